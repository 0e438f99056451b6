"""Collect on scrape: one shared NVML pass at a time, and the prometheus-client custom collector.

Following the Prometheus "Writing exporters" guide, nothing polls on a timer: a scrape asks
`SharedPass.latest()`, which runs a pass unless
- a pass is already running: the scrape waits for it and shares its result (never two passes at
  once against the driver), or
- the last pass started less than `min_interval` seconds ago: the scrape gets that pass.
Counters (XID events, GPU errors, failures) are read live on every scrape, so an XID that arrives
between two passes shows on the next scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from observability import catalog
from poller.error_counters import CountersSnapshot, ErrorCounters
from poller.exported_metrics import ECC_TYPES, GPU_GAUGES, THROTTLE_REASONS
from poller.model import GpuIdentity, PassResult

LOG = logging.getLogger(__name__)


class PassSource(Protocol):
    def collect(self) -> PassResult: ...


class SharedPass:
    def __init__(
        self,
        source: PassSource,
        counters: ErrorCounters,
        min_interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0, got {min_interval}")
        self._source = source
        self._counters = counters
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: PassResult | None = None
        self._last_started = 0.0
        self._last_finished = 0.0
        self.passes = 0  # passes run since start (for tests and benchmarks)

    def latest(self) -> PassResult:
        requested = self._clock()
        with self._lock:
            last = self._last
            if last is not None and (
                self._last_finished >= requested  # it ran while this scrape waited: share it
                or requested - self._last_started < self._min_interval
            ):
                return last
            started = self._clock()
            try:
                result = self._source.collect()
            except Exception:  # a bug must not take the exporter down: report NVML down
                LOG.exception("collection pass failed")
                self._counters.record_failure("query")
                result = PassResult(nvml_up=False, started_at=started, finished_at=self._clock())
            self._last, self._last_started, self._last_finished = result, started, self._clock()
            self.passes += 1
            return result


def gpu_label_values(node: str, gpu: GpuIdentity) -> list[str]:
    """Values of catalog.GPU labels (node, gpu_id, uuid, gpu_name), in that order."""
    return [node, str(gpu.index), gpu.uuid, gpu.name]


def build_families(node: str, result: PassResult, counters: CountersSnapshot) -> list[Metric]:
    """The whole page as prometheus-client metric families (the exposition writer's twin)."""
    families: list[Metric] = []
    labelled = [(sample, gpu_label_values(node, sample.gpu)) for sample in result.samples]
    for metric, attribute in GPU_GAUGES:
        gauge = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
        for sample, labels in labelled:
            value = getattr(sample, attribute)
            if value is not None:
                gauge.add_metric(labels, value)
        families.append(gauge)

    throttle = GaugeMetricFamily(
        catalog.GPU_CLOCK_THROTTLE_ACTIVE.name,
        catalog.GPU_CLOCK_THROTTLE_ACTIVE.help,
        labels=catalog.GPU_CLOCK_THROTTLE_ACTIVE.labels,
    )
    for sample, labels in labelled:
        if sample.clock_event_reasons is not None:
            for reason, bit in THROTTLE_REASONS:
                throttle.add_metric([*labels, reason], 1 if sample.clock_event_reasons & bit else 0)
    families.append(throttle)

    ecc = CounterMetricFamily(
        catalog.GPU_ECC_ERRORS_TOTAL.name, catalog.GPU_ECC_ERRORS_TOTAL.help, labels=catalog.GPU_ECC_ERRORS_TOTAL.labels
    )
    for sample, labels in labelled:
        for ecc_type, attribute in ECC_TYPES:
            value = getattr(sample, attribute)
            if value is not None:
                ecc.add_metric([*labels, ecc_type], value)
    families.append(ecc)

    xid = CounterMetricFamily(
        catalog.GPU_XID_ERRORS_TOTAL.name, catalog.GPU_XID_ERRORS_TOTAL.help, labels=catalog.GPU_XID_ERRORS_TOTAL.labels
    )
    errors = CounterMetricFamily(
        catalog.GPU_ERRORS_TOTAL.name, catalog.GPU_ERRORS_TOTAL.help, labels=catalog.GPU_ERRORS_TOTAL.labels
    )
    for gpu_counts in counters.gpus:
        labels = gpu_label_values(node, gpu_counts.gpu)
        for code, count in gpu_counts.xids:
            xid.add_metric([*labels, str(code)], count)
        for error_type, count in gpu_counts.errors:
            errors.add_metric([*labels, error_type], count)
    families += [xid, errors]

    if result.driver is not None:
        info = InfoMetricFamily(
            catalog.GPU_DRIVER_INFO.name.removesuffix("_info"), catalog.GPU_DRIVER_INFO.help, labels=["node"]
        )
        info.add_metric(
            [node],
            {
                "driver_version": result.driver.driver_version,
                "nvml_version": result.driver.nvml_version,
                "cuda_driver_version": result.driver.cuda_driver_version,
            },
        )
        families.append(info)

    def node_gauge(metric: catalog.Metric, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
        family.add_metric([node], value)
        return family

    families.append(node_gauge(catalog.GPU_POLLER_NVML_UP, 1 if result.nvml_up else 0))
    families.append(node_gauge(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, result.duration_seconds))
    failures = CounterMetricFamily(
        catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name,
        catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.help,
        labels=catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.labels,
    )
    for reason, count in counters.failures:
        failures.add_metric([node, reason], count)
    families.append(failures)
    families.append(node_gauge(catalog.GPU_POLLER_DEVICES, len(result.samples)))
    families.append(node_gauge(catalog.GPU_POLLER_DEVICES_ENUMERATED, result.enumerated))
    return families


class GpuCollector(Collector):
    """A prometheus-client custom collector: register it in any CollectorRegistry."""

    def __init__(self, shared: SharedPass, counters: ErrorCounters, node: str) -> None:
        self._shared = shared
        self._counters = counters
        self._node = node

    def collect(self) -> Iterator[Metric]:
        result = self._shared.latest()
        yield from build_families(self._node, result, self._counters.snapshot())

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the GPUs present: do not collect at registration
