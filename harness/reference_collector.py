"""The poller's page built a second, independent way: as prometheus-client metric families from a
custom collector. Tests compare the poller's own text writer with it, and the poller benchmark
times prometheus-client's `generate_latest` on it side by side with the writer."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from foxhunt_trainer.contract import catalog
from poller.error_counters import CountersSnapshot, ErrorCounters
from poller.exported_metrics import ECC_TYPES, GPU_COUNTERS, GPU_GAUGES, INTERCONNECT_COUNTERS, THROTTLE_REASONS
from poller.samples import PassResult
from poller.shared_pass import SharedPass, gpu_label_values


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

    for metric, directions in INTERCONNECT_COUNTERS:
        interconnect = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        for sample, labels in labelled:
            for direction, attribute in directions:
                value = getattr(sample, attribute)
                if value is not None:
                    interconnect.add_metric([*labels, direction], value)
        families.append(interconnect)
    for metric, attribute in GPU_COUNTERS:
        family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        for sample, labels in labelled:
            value = getattr(sample, attribute)
            if value is not None:
                family.add_metric(labels, value)
        families.append(family)

    mig_info = GaugeMetricFamily(
        catalog.GPU_MIG_DEVICE_INFO.name, catalog.GPU_MIG_DEVICE_INFO.help, labels=catalog.GPU_MIG_DEVICE_INFO.labels
    )
    mig_share = GaugeMetricFamily(
        catalog.GPU_MIG_SM_SHARE_RATIO.name,
        catalog.GPU_MIG_SM_SHARE_RATIO.help,
        labels=catalog.GPU_MIG_SM_SHARE_RATIO.labels,
    )
    for sample, labels in labelled:
        mig = sample.gpu.mig
        if mig is not None:
            mig_info.add_metric([*labels, str(sample.gpu.index), mig.parent_uuid, mig.profile], 1)
            mig_share.add_metric(labels, mig.sm_share)
    families += [mig_info, mig_share]

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
    families.append(node_gauge(catalog.GPU_POLLER_DEVICES, result.whole_gpus_answering))
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
