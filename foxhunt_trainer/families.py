"""prometheus-client metric objects built from the catalog, exposed under the catalog's exact names.

prometheus-client models a counter the OpenMetrics way: the family `x` exposes the sample
`x_total` (and `x_created`). The catalog keeps the names users' binaries already emit, one of
which is a counter without `_total` (`ml_training_nan_count`): exposed through the plain client it
would become `ml_training_nan_count_total` and the NaN alert on `ml_training_nan_count` would never
match.
`CatalogCollector` therefore wraps unregistered client objects (which keep their thread-safe
value handling) and re-emits each family under its catalog name, with its samples named exactly
as the catalog says and without the `_created` samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from foxhunt_trainer.contract.catalog import Metric, MetricType

_CREATED = "_created"


def _require(metric: Metric, expected: MetricType) -> None:
    if metric.type is not expected:
        raise TypeError(f"{metric.name} is a {metric.type.value} in the catalog, not a {expected.value}")


def counter(metric: Metric) -> Counter:
    """An unregistered client counter for a catalog counter (any name, `_total` or not)."""
    _require(metric, MetricType.COUNTER)
    return Counter(metric.name, metric.help, metric.labels, registry=None)


def gauge(metric: Metric) -> Gauge:
    _require(metric, MetricType.GAUGE)
    return Gauge(metric.name, metric.help, metric.labels, registry=None)


def info(metric: Metric) -> Gauge:
    """An info metric (value always 1, the labels are the information) as a client gauge."""
    _require(metric, MetricType.INFO)
    return Gauge(metric.name, metric.help, metric.labels, registry=None)


def histogram(metric: Metric) -> Histogram:
    _require(metric, MetricType.HISTOGRAM)
    if not metric.buckets:
        raise ValueError(f"histogram {metric.name} has no buckets in the catalog")
    return Histogram(metric.name, metric.help, metric.labels, buckets=metric.buckets, registry=None)


ClientMetric = Counter | Gauge | Histogram


def _catalog_sample(metric: Metric, sample: Sample) -> Sample | None:
    """The sample renamed to the catalog's series name, or None for samples the catalog lacks."""
    if sample.name.endswith(_CREATED):
        return None
    if metric.type is MetricType.COUNTER:
        return sample._replace(name=metric.name)
    if sample.name not in metric.series_names:
        raise ValueError(f"{metric.name}: unexpected sample {sample.name}")
    return sample


class CatalogCollector(Collector):
    """Collects client metric objects as families named, typed and documented by the catalog."""

    def __init__(self, pairs: Iterable[tuple[Metric, ClientMetric]]) -> None:
        self._pairs = tuple(pairs)
        names = [m.name for m, _ in self._pairs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"metrics registered twice: {duplicates}")

    @property
    def catalog_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m, _ in self._pairs)

    def describe(self) -> Iterable[ClientFamily]:
        # Lets the registry detect name clashes without collecting values.
        return [ClientFamily(m.name, m.help, m.type.value) for m, _ in self._pairs]

    def collect(self) -> Iterator[ClientFamily]:
        for metric, client in self._pairs:
            family = ClientFamily(metric.name, metric.help, metric.type.value)
            for client_family in client.collect():
                for sample in client_family.samples:
                    renamed = _catalog_sample(metric, sample)
                    if renamed is not None:
                        family.samples.append(renamed)
            yield family
