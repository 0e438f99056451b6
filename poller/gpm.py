"""GPU Performance Monitoring (GPM): what the GPU really does, not only whether a kernel ran.

NVML's GPM (Hopper and newer; drivers from R520) computes profiling metrics between two samples
the caller takes: SM activity and occupancy, tensor-core activity, DRAM bandwidth, PCIe and NVLink
throughput. The poller takes one sample per GPU in each collection pass and computes the metrics
over the interval since the previous pass's sample, so a scrape never waits for a second sample.
- The first pass after the poller starts, after NVML re-initialises or after a GPU returns only
  takes the baseline sample: it reports no GPM gauge rather than a figure over no interval.
- PCIe and NVLink throughput (MiB/s averaged over the interval) are integrated into byte counters
  (`ml_gpu_pcie_bytes_total`, `ml_gpu_nvlink_bytes_total`): the intervals between passes are
  contiguous, so the counters miss nothing however often, and by how many Prometheus servers, the
  poller is scraped, and `rate()` over any window is exact. They are kept per GPU UUID for the
  life of the process, so an NVML re-initialisation does not reset them.
- A figure out of its range (a percent outside 0-100, a negative or impossible throughput: counters
  that wrapped or were reset between the two samples) discards that GPU's whole interval; the new
  sample is the next baseline.
- A metric the GPU does not offer (NVLink on a PCIe card) is dropped from its request until NVML
  re-initialises, with one log line.
MIG instances (nvmlGpmMigSampleGet) are not read: on a GPU in MIG mode the device-level sample is
whatever the driver answers for the whole GPU, typically Not Supported, and GPM is then omitted.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from poller.error_counters import ErrorCounters
from poller.model import GpuIdentity, GpuSample
from poller.nvml_calls import nvml_function

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024
# A percent a little outside 0-100 is rounding in the driver and is clamped; further out is junk.
PERCENT_SLACK = 1.0
# Above any link: NVLink 5 moves 0.9 TB/s each way; a larger figure is a wrapped counter.
MAX_MIB_PER_SECOND = 1e7


@dataclass(frozen=True)
class GpmMetric:
    """One GPM metric the poller asks for and the GpuSample attribute it fills."""

    metric_id: int
    name: str
    attribute: str
    throughput: bool  # MiB/s integrated into a byte counter; otherwise a percent gauge


GPM_METRICS: tuple[GpmMetric, ...] = (
    GpmMetric(pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_util", "sm_active_percent", False),
    GpmMetric(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy", "sm_occupancy_percent", False),
    GpmMetric(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "any_tensor_util", "tensor_active_percent", False),
    GpmMetric(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_bw_util", "dram_bandwidth_utilization_percent", False),
    GpmMetric(pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, "pcie_rx", "pcie_rx_bytes_total", True),
    GpmMetric(pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, "pcie_tx", "pcie_tx_bytes_total", True),
    GpmMetric(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "nvlink_rx", "nvlink_rx_bytes_total", True),
    GpmMetric(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "nvlink_tx", "nvlink_tx_bytes_total", True),
)
GPM_FUNCTION_NAMES = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
)


class GpmFunctions:
    """The GPM entry points of the loaded library; FunctionMissingError when it lacks one."""

    def __init__(self, lib: Any) -> None:
        self.query_device_support = nvml_function(lib, "nvmlGpmQueryDeviceSupport")
        self.sample_alloc = nvml_function(lib, "nvmlGpmSampleAlloc")
        self.sample_free = nvml_function(lib, "nvmlGpmSampleFree")
        self.sample_get = nvml_function(lib, "nvmlGpmSampleGet")
        self.metrics_get = nvml_function(lib, "nvmlGpmMetricsGet")

    def device_support(self, handle: Any) -> tuple[int, bool]:
        """(NVML return code, whether the GPU supports GPM)."""
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        code = self.query_device_support(handle, ctypes.byref(support))
        return code, bool(code == 0 and support.isSupportedDevice)


class GpmAllocationError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"nvmlGpmSampleAlloc answered {code}")
        self.code = code


class GpmReader:
    """One GPU's two GPM samples (previous and current) and its request, made once per session."""

    def __init__(
        self,
        functions: GpmFunctions,
        handle: Any,
        gpu: GpuIdentity,
        totals: dict[str, float],
        counters: ErrorCounters,
        clock: Callable[[], float],
    ) -> None:
        self._functions = functions
        self._handle = handle
        self._gpu = gpu
        self._totals = totals  # bytes per throughput attribute; owned by the source, kept by UUID
        self._counters = counters
        self._clock = clock
        self._samples: list[Any] = []
        for _ in range(2):
            sample = pynvml.c_nvmlGpmSample_t()
            code = functions.sample_alloc(ctypes.byref(sample))
            if code != 0:
                self.free()
                raise GpmAllocationError(code)
            self._samples.append(sample)
        self._current = 0  # index of the sample the next pass takes
        self._previous_at: float | None = None  # when the previous sample was taken
        self._request = pynvml.c_nvmlGpmMetricsGet_t()
        self._request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        self._metrics: list[GpmMetric] = []
        self._set_metrics(list(GPM_METRICS))
        self._logged: set[tuple[str, int]] = set()
        self._discards = 0

    def _set_metrics(self, metrics: list[GpmMetric]) -> None:
        self._metrics = metrics
        self._request.numMetrics = len(metrics)
        for index, metric in enumerate(metrics):
            self._request.metrics[index].metricId = metric.metric_id

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    def read(self, sample: GpuSample) -> tuple[str, int] | None:
        """Take this pass's GPM sample and fill `sample` over the interval since the previous one.

        Returns (call, NVML return code) when a call failed (the caller decides what the code
        means: a lost GPU, NVML gone, not supported, ...), else None.
        """
        self._report_totals(sample)
        functions = self._functions
        current = self._samples[self._current]
        code = functions.sample_get(self._handle, current)
        if code != 0:  # the previous sample stays the baseline: the next interval is longer
            return "nvmlGpmSampleGet", code
        now = self._clock()
        previous_at = self._previous_at
        previous = self._samples[1 - self._current]
        self._current = 1 - self._current
        self._previous_at = now
        if previous_at is None:
            return None  # the baseline: nothing to report yet
        elapsed = now - previous_at
        request = self._request
        request.sample1 = previous
        request.sample2 = current
        code = functions.metrics_get(ctypes.byref(request))
        if code != 0:  # this pass's sample is still a good baseline
            return "nvmlGpmMetricsGet", code
        self._store(sample, elapsed)
        return None

    def _report_totals(self, sample: GpuSample) -> None:
        for attribute, total in self._totals.items():
            setattr(sample, attribute, int(total))

    def _store(self, sample: GpuSample, elapsed: float) -> None:
        entries = self._request.metrics
        values: list[tuple[GpmMetric, float]] = []
        unsupported: list[GpmMetric] = []
        for index, metric in enumerate(self._metrics):
            entry = entries[index]
            code = entry.nvmlReturn
            if code != 0:
                if code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                    unsupported.append(metric)
                else:
                    self._metric_failed(metric, code)
                continue
            value = entry.value
            if not self._in_range(metric, value) or elapsed <= 0:
                self._discard(metric, value, elapsed)
                return
            values.append((metric, value))
        if unsupported:
            LOG.info(
                "GPU %d (%s): GPM metric(s) %s not supported; omitted",
                self._gpu.index,
                self._gpu.uuid,
                ", ".join(m.name for m in unsupported),
            )
            self._set_metrics([m for m in self._metrics if m not in unsupported])
        totals = self._totals
        for metric, value in values:
            if metric.throughput:
                total = totals[metric.attribute] = totals.get(metric.attribute, 0.0) + max(value, 0.0) * MIB * elapsed
                setattr(sample, metric.attribute, int(total))
            else:
                setattr(sample, metric.attribute, min(max(value, 0.0), 100.0))

    @staticmethod
    def _in_range(metric: GpmMetric, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if metric.throughput:
            return -PERCENT_SLACK <= value <= MAX_MIB_PER_SECOND
        return -PERCENT_SLACK <= value <= 100.0 + PERCENT_SLACK

    def _discard(self, metric: GpmMetric, value: float, elapsed: float) -> None:
        self._discards += 1
        log = LOG.info if self._discards == 1 else LOG.debug
        log(
            "GPU %d (%s): GPM %s = %r over %.3f s is out of range (counters wrapped or reset); this "
            "interval is not reported",
            self._gpu.index,
            self._gpu.uuid,
            metric.name,
            value,
            elapsed,
        )

    def _metric_failed(self, metric: GpmMetric, code: int) -> None:
        self._counters.record_failure("query")
        key = (metric.name, code)
        if key not in self._logged:
            self._logged.add(key)
            LOG.warning(
                "GPU %d (%s): GPM metric %s failed (%s); omitted from this pass",
                self._gpu.index,
                self._gpu.uuid,
                metric.name,
                pynvml.NVMLError(code),
            )

    def free(self) -> None:
        """Free both samples (before nvmlShutdown); safe to call twice."""
        samples, self._samples = self._samples, []
        for sample in samples:
            code = self._functions.sample_free(sample)
            if code != 0:
                LOG.debug("nvmlGpmSampleFree answered %d", code)
