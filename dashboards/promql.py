"""PromQL expression builders over the metric catalog.

Each helper checks the catalog type of what it is given, so a dashboard cannot put a counter
outside `rate`/`increase` or a histogram outside `histogram_quantile`/a heatmap by accident:
the mistake raises `TypeError` while the dashboard is built, long before a test reads the JSON.
Range windows default to Grafana's `$__rate_interval`.
"""

from __future__ import annotations

from collections.abc import Sequence

from observability.catalog import Metric, MetricType

RATE_INTERVAL = "$__rate_interval"


def matcher(label: str, value: str) -> str:
    """`label="value"`."""
    return f'{label}="{value}"'


def regex_matcher(label: str, pattern: str) -> str:
    """`label=~"pattern"`."""
    return f'{label}=~"{pattern}"'


def variable_matcher(label: str, variable: str) -> str:
    """`label=~"$variable"`: works for single, multi and include-all variables alike."""
    return regex_matcher(label, f"${variable}")


def any_of(values: Sequence[str]) -> str:
    """A regex matching exactly one of `values` (Prometheus anchors label regexes)."""
    if not values:
        raise ValueError("any_of needs at least one value")
    return "|".join(sorted(set(values)))


def selector(series: str, matchers: Sequence[str] = ()) -> str:
    """`series{m1, m2}` or the bare series name."""
    return f"{series}{{{', '.join(matchers)}}}" if matchers else series


def by(operator: str, labels: Sequence[str], expr: str) -> str:
    """`operator by (labels) (expr)`, or `operator(expr)` without labels."""
    if not labels:
        return f"{operator}({expr})"
    return f"{operator} by ({', '.join(labels)}) ({expr})"


def gauge(metric: Metric, matchers: Sequence[str] = ()) -> str:
    """The selector of a gauge or info metric (their values are meaningful on their own)."""
    if metric.type not in (MetricType.GAUGE, MetricType.INFO):
        raise TypeError(f"{metric.name} is a {metric.type.value}: use rate/increase or a histogram helper")
    return selector(metric.name, matchers)


def _counter_series(metric: Metric) -> str:
    if metric.type is not MetricType.COUNTER:
        raise TypeError(f"{metric.name} is a {metric.type.value}, not a counter")
    return metric.name


def rate(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`rate(counter{...}[window])`."""
    return f"rate({selector(_counter_series(metric), matchers)}[{window}])"


def increase(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`increase(counter{...}[window])`."""
    return f"increase({selector(_counter_series(metric), matchers)}[{window}])"


def bucket_increase(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`sum by (le) (increase(histogram_bucket{...}[window]))`: the input of a heatmap panel."""
    return by("sum", ("le",), f"increase({selector(metric.bucket, matchers)}[{window}])")


def histogram_quantile(quantile: float, buckets_by_le: str) -> str:
    """`histogram_quantile(q, buckets)`; `buckets_by_le` must keep the `le` label."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile {quantile} outside [0, 1]")
    return f"histogram_quantile({quantile:g}, {buckets_by_le})"


def recorded_quantile(
    quantile: float, recorded_bucket_rate: str, matchers: Sequence[str] = (), labels: Sequence[str] = ()
) -> str:
    """A quantile over a recording rule that already holds per-`le` bucket rates."""
    if "_bucket:" not in recorded_bucket_rate:
        raise TypeError(f"{recorded_bucket_rate} is not a recorded bucket rate")
    return histogram_quantile(quantile, by("sum", ("le", *labels), selector(recorded_bucket_rate, matchers)))
