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
MIG devices: each MIG device of a GPU in MIG mode has its own reader, sampled with
nvmlGpmMigSampleGet (the parent's handle and the device's GPU instance id), where the driver has it;
the parent's device-level sample is whatever the driver answers for the whole GPU (often Not
Supported in MIG mode, and then omitted for the parent).
"""

from __future__ import annotations

import ctypes
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from poller.error_counters import ErrorCounters
from poller.nvml_calls import FunctionMissingError, nvml_function
from poller.samples import GPM_FIELDS, GpuIdentity

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024
# A percent a little outside 0-100 is rounding in the driver and is clamped; further out is junk.
PERCENT_SLACK = 1.0
# Above any link: NVLink 5 moves 0.9 TB/s each way; a larger figure is a wrapped counter.
MAX_MIB_PER_SECOND = 1e7
_NONE = (0.0,)  # what min() and max() see when a GPU answers no metric of a kind


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
# One nvmlGpmMetric_t: metricId (uint), nvmlReturn (int), value (double), metricInfo (3 pointers).
if tuple(m.attribute for m in GPM_METRICS) != GPM_FIELDS or sorted(GPM_METRICS, key=lambda m: m.throughput) != list(
    GPM_METRICS
):
    raise ImportError("GPM_METRICS must list GpuSample's GPM fields in order, percents first")
# A pass's GPM figures in GPM_FIELDS order (None: no figure); NO_GPM has none.
GpmFigures = tuple[float | int | None, ...]
NO_GPM: GpmFigures = (None,) * len(GPM_FIELDS)


def _in_order(figures: dict[str, float | int]) -> GpmFigures:
    return tuple(map(figures.get, GPM_FIELDS))


class GpmCallError(Exception):
    """A GPM call failed: which, its NVML return code, and the figures the pass still has."""

    def __init__(self, call: str, code: int, figures: GpmFigures) -> None:
        super().__init__(f"{call} answered {code}")
        self.call = call
        self.code = code
        self.figures = figures


_METRIC_LAYOUT = "Iid" + f"{3 * ctypes.sizeof(ctypes.c_void_p)}x"
_METRICS_OFFSET: int = pynvml.c_nvmlGpmMetricsGet_t.metrics.offset
if struct.calcsize("=" + _METRIC_LAYOUT) != ctypes.sizeof(pynvml.c_nvmlGpmMetric_t):
    raise ImportError("nvidia-ml-py's nvmlGpmMetric_t layout is not the one this module reads")

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
        # Per MIG device (R525 and later); None where the driver lacks it.
        self.mig_sample_get: Callable[..., int] | None
        try:
            self.mig_sample_get = nvml_function(lib, "nvmlGpmMigSampleGet")
        except FunctionMissingError:
            self.mig_sample_get = None

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
    """One GPU's two GPM samples and the two requests over them, made once per NVML session.

    The samples take turns: each pass fills the older one, and the request whose `sample1` is
    the other one (the previous pass's) computes the interval. Results are read with one
    `struct` unpack over the request's buffer rather than a ctypes object per field, which keeps
    GPM to a few microseconds a GPU.
    """

    def __init__(
        self,
        functions: GpmFunctions,
        handle: Any,
        gpu: GpuIdentity,
        totals: dict[str, float],
        counters: ErrorCounters,
        clock: Callable[[], float],
        gpu_instance_id: int | None = None,
    ) -> None:
        """`gpu_instance_id`: a MIG device's, with its parent's `handle` (nvmlGpmMigSampleGet)."""
        self._functions = functions
        self._sample_get = functions.sample_get
        if gpu_instance_id is not None:
            mig_sample_get = functions.mig_sample_get
            if mig_sample_get is None:
                raise FunctionMissingError("nvmlGpmMigSampleGet")
            instance = ctypes.c_uint(gpu_instance_id)

            def sample_mig(handle: Any, sample: Any) -> int:
                return mig_sample_get(handle, instance, sample)

            self._sample_get = sample_mig
        self._metrics_get = functions.metrics_get
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
        # _requests[i] computes from the other sample to sample i (filled by this pass).
        self._requests = tuple(pynvml.c_nvmlGpmMetricsGet_t() for _ in range(2))
        for index, request in enumerate(self._requests):
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.sample1 = self._samples[1 - index]
            request.sample2 = self._samples[index]
        self._request_refs = tuple(ctypes.byref(request) for request in self._requests)
        self._results = tuple(memoryview(request).cast("B") for request in self._requests)
        self._unpack_from = struct.Struct("").unpack_from
        self._metrics: tuple[GpmMetric, ...] = ()
        self._set_metrics(GPM_METRICS)
        self._current = 0  # the sample this pass fills
        self._previous_at: float | None = None  # when the other sample was taken; None: no baseline
        self._logged: set[tuple[str, int]] = set()
        self._discards = 0

    def _set_metrics(self, metrics: tuple[GpmMetric, ...]) -> None:
        metrics = tuple(sorted(metrics, key=lambda m: m.throughput))  # percents first
        self._metrics = metrics
        self._attributes = tuple(m.attribute for m in metrics)
        self._complete = metrics == GPM_METRICS
        self._throughputs = tuple(m.attribute for m in metrics if m.throughput)
        self._all_answered = (0,) * len(metrics)
        self._unpack_from = struct.Struct("=" + _METRIC_LAYOUT * len(metrics)).unpack_from
        self._percent_count = len(metrics) - len(self._throughputs)
        for request in self._requests:
            request.numMetrics = len(metrics)
            for index, metric in enumerate(metrics):
                request.metrics[index].metricId = metric.metric_id

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    def read(self) -> GpmFigures:
        """Take this pass's GPM sample; the figures over the interval since the previous one, in
        GpuSample's GPM field order (None where there is none: the baseline pass, a metric left out).

        Raises GpmCallError when a call failed (the caller decides what its code means: a lost GPU,
        NVML gone, not supported, ...); it carries what the pass still reports (the byte counters).
        """
        current = self._current
        code = self._sample_get(self._handle, self._samples[current])
        if code != 0:  # the previous sample stays the baseline: the next interval is longer
            raise GpmCallError("nvmlGpmSampleGet", code, self._totals_only())
        now = self._clock()
        previous_at = self._previous_at
        self._current = 1 - current
        self._previous_at = now
        if previous_at is None:  # the baseline: no figure yet
            return self._totals_only()
        code = self._metrics_get(self._request_refs[current])
        if code != 0:  # this pass's sample is still a good baseline
            raise GpmCallError("nvmlGpmMetricsGet", code, self._totals_only())
        fields = self._unpack_from(self._results[current], _METRICS_OFFSET)
        elapsed = now - previous_at
        # The common case in a few C calls: every metric answered, every figure finite and in range.
        values = fields[2::3]
        count = self._percent_count
        percents, throughputs = values[:count], values[count:]
        every = sum(values)
        if not (
            fields[1::3] == self._all_answered
            and elapsed > 0.0
            and every - every == 0.0  # no NaN, no infinity
            and min(values or _NONE) >= 0.0
            and max(percents or _NONE) <= 100.0
            and max(throughputs or _NONE) <= MAX_MIB_PER_SECOND
        ):
            return self._checked(fields, elapsed)
        figures: list[float | int] = [int(value * 100.0 + 0.5) / 100.0 for value in percents]  # 0.01 %: short text
        totals = self._totals
        scale = MIB * elapsed
        for attribute, value in zip(self._throughputs, throughputs, strict=True):
            total = totals[attribute] = totals.get(attribute, 0.0) + value * scale
            figures.append(int(total))
        if self._complete:  # every metric, in GpuSample's order
            return tuple(figures)
        return _in_order(dict(zip(self._attributes, figures, strict=True)))

    def _totals_only(self) -> GpmFigures:
        """The byte counters as they stand (they exist also on a pass without a new interval)."""
        return _in_order({attribute: int(total) for attribute, total in self._totals.items()})

    def _checked(self, fields: tuple[Any, ...], elapsed: float) -> GpmFigures:
        """Metric by metric: errors, metrics the GPU lacks, figures out of range."""
        figures: dict[str, float | int] = {attribute: int(total) for attribute, total in self._totals.items()}
        values: list[tuple[GpmMetric, float]] = []
        unsupported: list[GpmMetric] = []
        for index, metric in enumerate(self._metrics):
            code, value = fields[3 * index + 1], fields[3 * index + 2]
            if code != 0:
                if code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                    unsupported.append(metric)
                else:
                    self._metric_failed(metric, code)
                continue
            if elapsed <= 0 or not self._in_range(metric, value):
                self._discard(metric, value, elapsed)
                return _in_order(figures)
            values.append((metric, value))
        if unsupported:
            LOG.info(
                "GPU %d (%s): GPM metric(s) %s not supported; omitted",
                self._gpu.index,
                self._gpu.uuid,
                ", ".join(m.name for m in unsupported),
            )
            self._set_metrics(tuple(m for m in self._metrics if m not in unsupported))
        totals = self._totals
        for metric, value in values:
            if metric.throughput:
                total = totals.get(metric.attribute, 0.0) + max(value, 0.0) * MIB * elapsed
                totals[metric.attribute] = total
                figures[metric.attribute] = int(total)
            else:
                figures[metric.attribute] = int(min(max(value, 0.0), 100.0) * 100.0 + 0.5) / 100.0
        return _in_order(figures)

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
