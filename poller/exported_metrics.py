"""Which catalog metric each NVML reading becomes, and the fixed label values of the poller.

The writer (`exposition`) walks these tables, and so does the independent prometheus-client
collector the tests compare it with. The NVML readings' series come from the rows of
`poller.samples.NVML_FIELDS` (in GpuSample's field order): a plain gauge or counter per row whose metric
has only the GPU's labels, an `ecc_type` series per ECC row, the throttle reasons of the
clock-event mask.
"""

from __future__ import annotations

from dataclasses import fields

from foxhunt_trainer.contract import catalog
from poller.nvml_fields import NvmlField
from poller.samples import NVML_FIELDS, GpuSample

_ORDER = {f.name: i for i, f in enumerate(fields(GpuSample))}
_ROWS: tuple[NvmlField, ...] = tuple(
    sorted((f for f in NVML_FIELDS if f.attribute is not None), key=lambda f: _ORDER[str(f.attribute)])
)


def _plain(kind: catalog.MetricType) -> tuple[tuple[catalog.Metric, str], ...]:
    return tuple(
        (f.metric, str(f.attribute))
        for f in _ROWS
        if f.metric is not None and f.metric.type is kind and f.metric.labels == catalog.GPU
    )


# GPU gauges: (catalog metric, GpuSample attribute holding its value); the NVML readings', then GPM's.
GPU_GAUGES: tuple[tuple[catalog.Metric, str], ...] = (
    *_plain(catalog.MetricType.GAUGE),
    (catalog.GPU_SM_ACTIVE_PERCENT, "sm_active_percent"),
    (catalog.GPU_SM_OCCUPANCY_PERCENT, "sm_occupancy_percent"),
    (catalog.GPU_TENSOR_ACTIVE_PERCENT, "tensor_active_percent"),
    (catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT, "dram_bandwidth_utilization_percent"),
)

# Interconnect byte counters: (catalog metric, ((`direction` label value, GpuSample attribute), ...)).
INTERCONNECT_COUNTERS: tuple[tuple[catalog.Metric, tuple[tuple[str, str], ...]], ...] = (
    (catalog.GPU_PCIE_BYTES_TOTAL, (("rx", "pcie_rx_bytes_total"), ("tx", "pcie_tx_bytes_total"))),
    (catalog.GPU_NVLINK_BYTES_TOTAL, (("rx", "nvlink_rx_bytes_total"), ("tx", "nvlink_tx_bytes_total"))),
)

# `reason` label values of ml_gpu_clock_throttle_active and their bits in NVML's
# clocks-event (formerly clocks-throttle) reason mask (nvmlClocksEventReason*).
THROTTLE_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)

# `ecc_type` label values of ml_gpu_ecc_errors_total and the GpuSample attribute of each.
ECC_TYPES: tuple[tuple[str, str], ...] = tuple(
    (f.label[1], str(f.attribute)) for f in _ROWS if f.metric is catalog.GPU_ECC_ERRORS_TOTAL and f.label is not None
)

# GPU counters read from NVML each pass: (catalog metric, GpuSample attribute holding its value).
GPU_COUNTERS: tuple[tuple[catalog.Metric, str], ...] = _plain(catalog.MetricType.COUNTER)

# Every row must become some series: a plain gauge or counter, an ECC type, or the throttle mask.
_EXPORTED = {a for _, a in (*GPU_GAUGES, *GPU_COUNTERS, *ECC_TYPES)} | {"clock_event_reasons"}
_UNEXPORTED = sorted(str(f.attribute) for f in _ROWS if f.attribute not in _EXPORTED)
if _UNEXPORTED:
    raise ImportError(
        f"NVML_FIELDS rows {_UNEXPORTED} export nothing: give them a catalog metric with only the GPU's labels "
        "(catalog.GPU), or teach exported_metrics their label"
    )

# `error_type` values of ml_gpu_errors_total, created at 0 for every GPU the poller sees.
ERROR_TYPES: tuple[str, ...] = ("xid", "ecc_uncorrected", "gpu_lost")

# `reason` values of ml_gpu_poller_collection_failures_total, created at 0 at start.
FAILURE_REASONS: tuple[str, ...] = ("init", "gpu_lost", "query", "event")

# ml_gpu_xid_errors_total has no pre-created children: XID codes are an open set, and a dozen
# codes at 0 on every GPU were most of a fleet's GPU series. A code's series appears on its first
# occurrence (error_counters); ml_gpu_errors_total{error_type="xid"} above exists at 0 and counts
# every XID, so the first occurrence of any code is visible to increase() through it.
