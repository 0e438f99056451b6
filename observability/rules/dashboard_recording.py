"""Recording rules the dashboards read instead of heavy raw expressions.

Histogram quantiles over every training job's buckets and the fleet-wide span-metrics rates are
the expensive panels at fleet scale; these rules pre-aggregate them once per evaluation so a
dashboard refresh only reads a handful of series. Names follow `level:metric:operations`
(Prometheus' recording-rule convention); every input is a catalog metric, and the dashboards refer
to the constants' `.record`, never to a spelled-out name.

Windows are fixed (`5m`, at least four scrape intervals for every stack) because a recording rule
cannot follow a dashboard's `$__rate_interval`; job durations use `1h` since jobs end rarely.

The three GPU groups turn the poller's per-GPU series (8,000 at 1,000 nodes x 8 GPUs) into a few
series that the GPU panels draw instead of one line per GPU: fleet medians, sums and minimums, the
5 GPUs at either end (`topk`/`bottomk`, recorded with their labels), and error rates by type. A
rule costs one pass over its input every evaluation, so they record only what a panel draws, read
counters over a 2m window, and keep the slow-moving clocks and throttle reasons (9 series per GPU)
in a group of their own. XID codes are created by the poller on first occurrence,
so the XID rule reads only the codes that happened. The profiling group records the fleet medians
of the GPM figures (GPUs without GPM have no such series and are left out), NVML utilization over
the same GPUs for a like-for-like comparison, and the fleet's PCIe and NVLink traffic.
"""

from __future__ import annotations

from typing import Any

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.rules.rule_types import RecordingRule

SPAN_STATUS_ERROR = "STATUS_CODE_ERROR"


def _sum_rate(series: str, labels: tuple[str, ...], window: str, matchers: str = "") -> str:
    return f"sum by ({', '.join(labels)}) (rate({series}{matchers}[{window}]))"


# --- Training jobs ---------------------------------------------------------------------------
TRAINING_ITERATION_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type_job_id:{catalog.TRAINING_ITERATION_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.TRAINING_ITERATION_SECONDS.bucket, ("model_type", "job_id", "le"), "5m"),
    "Per-second rate of training iteration histogram buckets over 5m, per job and le.",
)
TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type:{catalog.TRAINING_DATA_LOADING_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.TRAINING_DATA_LOADING_SECONDS.bucket, ("model_type", "le"), "5m"),
    "Per-second rate of data loading histogram buckets over 5m, per model type and le.",
)
CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type:{catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket, ("model_type", "le"), "5m"),
    "Per-second rate of checkpoint save duration buckets over 5m, per model type and le.",
)
TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H = RecordingRule(
    f"model_type:{catalog.TRAINING_JOB_DURATION_SECONDS.bucket}:rate1h",
    _sum_rate(catalog.TRAINING_JOB_DURATION_SECONDS.bucket, ("model_type", "le"), "1h"),
    "Per-second rate of training job duration buckets over 1h, per model type and le.",
)

ITERATION_SECONDS_P50 = RecordingRule(
    f"model_type_job_id:{catalog.TRAINING_ITERATION_SECONDS.name}:p50_rate5m",
    f"histogram_quantile(0.5, {TRAINING_ITERATION_SECONDS_BUCKET_RATE5M.record})",
    "Median training iteration duration over 5m, per job, in seconds.",
)
ITERATION_SECONDS_P95 = RecordingRule(
    f"model_type_job_id:{catalog.TRAINING_ITERATION_SECONDS.name}:p95_rate5m",
    f"histogram_quantile(0.95, {TRAINING_ITERATION_SECONDS_BUCKET_RATE5M.record})",
    "95th percentile training iteration duration over 5m, per job, in seconds.",
)


# --- GPU fleet (NVML poller) -----------------------------------------------------------------
def _counter_base(metric: catalog.Metric) -> str:
    return metric.name.removesuffix("_total")


def _fleet(metric: catalog.Metric, operation: str, help_text: str) -> RecordingRule:
    """`fleet:<metric>:<operation>`: one series for the whole fleet; `p50` is the median, any
    other operation an aggregation operator (`sum`, `min`, ...)."""
    expr = f"quantile(0.5, {metric.name})" if operation == "p50" else f"{operation}({metric.name})"
    return RecordingRule(f"fleet:{metric.name}:{operation}", expr, help_text)


def _extreme(metric: catalog.Metric, operator: str, k: int, what: str) -> RecordingRule:
    """`node_gpu:<metric>:top<k>` = `topk(k, <metric>)`: the k GPUs at one end, with their labels."""
    name = "top" if operator == "topk" else "bottom"
    return RecordingRule(
        f"node_gpu:{metric.name}:{name}{k}", f"{operator}({k}, {metric.name})", f"The {k} GPUs with the {what}."
    )


def _fleet_rate(metric: catalog.Metric, label: str, help_text: str) -> RecordingRule:
    return RecordingRule(
        f"{label}:{_counter_base(metric)}:rate{GPU_COUNTER_WINDOW}",
        _sum_rate(metric.name, (label,), GPU_COUNTER_WINDOW),
        help_text,
    )


# GPUs a recorded top/bottom list holds, and the rate window of the GPU counters: 2m is 8
# samples at a 15 s scrape (4 at 30 s), and reads 2.5 times fewer samples than 5m over the
# 8,000-24,000 counter series a fleet has.
GPU_EXTREMES = 5
GPU_COUNTER_WINDOW = "2m"

GPU_UTILIZATION_P50 = _fleet(catalog.GPU_UTILIZATION_PERCENT, "p50", "Median GPU utilization (0-100) over the fleet.")
GPU_UTILIZATION_TOP = _extreme(catalog.GPU_UTILIZATION_PERCENT, "topk", GPU_EXTREMES, "highest utilization")
GPU_UTILIZATION_BOTTOM = _extreme(catalog.GPU_UTILIZATION_PERCENT, "bottomk", GPU_EXTREMES, "lowest utilization")
GPU_TEMPERATURE_P50 = _fleet(
    catalog.GPU_TEMPERATURE_CELSIUS, "p50", "Median GPU temperature over the fleet, in Celsius."
)
GPU_TEMPERATURE_TOP = _extreme(catalog.GPU_TEMPERATURE_CELSIUS, "topk", GPU_EXTREMES, "highest temperature")
GPU_POWER_SUM = _fleet(catalog.GPU_POWER_WATTS, "sum", "Power drawn by every GPU of the fleet, in watts.")
GPU_POWER_LIMIT_SUM = _fleet(
    catalog.GPU_POWER_LIMIT_WATTS, "sum", "Sum of the enforced power limits of the fleet's GPUs, in watts."
)

GPU_ERRORS_RATE = _fleet_rate(
    catalog.GPU_ERRORS_TOTAL, "error_type", "GPU hardware errors per second across the fleet, per error type."
)
GPU_ECC_ERRORS_RATE = _fleet_rate(
    catalog.GPU_ECC_ERRORS_TOTAL, "ecc_type", "ECC errors per second across the fleet, corrected and uncorrected."
)
GPU_XID_ERRORS_RATE = _fleet_rate(
    catalog.GPU_XID_ERRORS_TOTAL, "xid", "XID error events per second across the fleet, per XID code that occurred."
)
GPU_POLLER_COLLECTION_FAILURES_RATE = _fleet_rate(
    catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL,
    "reason",
    "Failed NVML calls or collection passes per second across the fleet, per reason.",
)

GPU_CLOCK_THROTTLE_SUM = RecordingRule(
    f"reason:{catalog.GPU_CLOCK_THROTTLE_ACTIVE.name}:sum",
    f"sum by (reason) ({catalog.GPU_CLOCK_THROTTLE_ACTIVE.name})",
    "GPUs of the fleet with each clock-throttle reason active.",
)
GPU_SM_CLOCK_P50 = _fleet(catalog.GPU_SM_CLOCK_HERTZ, "p50", "Median SM clock over the fleet, Hz.")
GPU_SM_CLOCK_MIN = _fleet(catalog.GPU_SM_CLOCK_HERTZ, "min", "Slowest SM clock of any GPU of the fleet, Hz.")
GPU_MEMORY_CLOCK_P50 = _fleet(catalog.GPU_MEMORY_CLOCK_HERTZ, "p50", "Median memory clock over the fleet, Hz.")
GPU_MEMORY_CLOCK_MIN = _fleet(
    catalog.GPU_MEMORY_CLOCK_HERTZ, "min", "Slowest memory clock of any GPU of the fleet, Hz."
)

# GPM profiling figures (Hopper and newer): what "utilization" hides.
GPU_SM_ACTIVE_P50 = _fleet(
    catalog.GPU_SM_ACTIVE_PERCENT, "p50", "Median SM activity (0-100) over the fleet's GPUs that report GPM."
)
GPU_SM_OCCUPANCY_P50 = _fleet(
    catalog.GPU_SM_OCCUPANCY_PERCENT, "p50", "Median SM occupancy (0-100) over the fleet's GPUs that report GPM."
)
GPU_TENSOR_ACTIVE_P50 = _fleet(
    catalog.GPU_TENSOR_ACTIVE_PERCENT,
    "p50",
    "Median tensor-core activity (0-100) over the fleet's GPUs that report GPM.",
)
GPU_DRAM_BANDWIDTH_P50 = _fleet(
    catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT,
    "p50",
    "Median DRAM bandwidth utilization (0-100) over the fleet's GPUs that report GPM.",
)
GPU_UTILIZATION_P50_WHERE_GPM = RecordingRule(
    f"fleet:{catalog.GPU_UTILIZATION_PERCENT.name}:p50_gpm",
    f"quantile(0.5, {catalog.GPU_UTILIZATION_PERCENT.name} and {catalog.GPU_SM_ACTIVE_PERCENT.name})",
    "Median NVML utilization (0-100) over the same GPUs as the GPM medians (those that report GPM).",
)
GPU_PCIE_BYTES_RATE = _fleet_rate(
    catalog.GPU_PCIE_BYTES_TOTAL, "direction", "PCIe bytes per second across the fleet, rx (to GPUs) and tx."
)
GPU_NVLINK_BYTES_RATE = _fleet_rate(
    catalog.GPU_NVLINK_BYTES_TOTAL, "direction", "NVLink bytes per second across the fleet, rx and tx."
)

# --- Tempo metrics generator: span metrics and service graph -----------------------------------
_CALLS = catalog.SPANMETRICS_CALLS_TOTAL.name
_CALLS_BASE = _CALLS.removesuffix("_total")
SPAN_CALLS_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}:rate5m",
    _sum_rate(_CALLS, ("service",), "5m"),
    "Spans per second over 5m, per service (Tempo span metrics).",
)
SPAN_ERRORS_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}_errors:rate5m",
    _sum_rate(_CALLS, ("service",), "5m", f'{{status_code="{SPAN_STATUS_ERROR}"}}'),
    "Spans with error status per second over 5m, per service.",
)
SPAN_ERROR_RATIO_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}_errors:ratio_rate5m",
    f"{SPAN_ERRORS_RATE5M.record} / {SPAN_CALLS_RATE5M.record}",
    "Fraction (0-1) of spans with error status over 5m, per service.",
)
SPAN_LATENCY_BUCKET_RATE5M = RecordingRule(
    f"service:{catalog.SPANMETRICS_LATENCY.bucket}:rate5m",
    _sum_rate(catalog.SPANMETRICS_LATENCY.bucket, ("service", "le"), "5m"),
    "Per-second rate of span duration buckets over 5m, per service and le.",
)
SERVICE_GRAPH_REQUEST_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_TOTAL.name.removesuffix('_total')}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_TOTAL.name, ("client", "server"), "5m"),
    "Requests per second over 5m on each client -> server edge of the service graph.",
)
SERVICE_GRAPH_REQUEST_FAILED_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_FAILED_TOTAL.name.removesuffix('_total')}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_FAILED_TOTAL.name, ("client", "server"), "5m"),
    "Failed requests per second over 5m on each client -> server edge.",
)
SERVICE_GRAPH_REQUEST_SERVER_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_SERVER_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_SERVER_SECONDS.bucket, ("client", "server", "le"), "5m"),
    "Per-second rate of server-side duration buckets over 5m on each client -> server edge.",
)

TRAINING_RULES: tuple[RecordingRule, ...] = (
    TRAINING_ITERATION_SECONDS_BUCKET_RATE5M,
    ITERATION_SECONDS_P50,
    ITERATION_SECONDS_P95,
    TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M,
    CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M,
    TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H,
)
# Order matters: a rule may read a record defined earlier in its group (same evaluation).
TRACE_RULES: tuple[RecordingRule, ...] = (
    SPAN_CALLS_RATE5M,
    SPAN_ERRORS_RATE5M,
    SPAN_ERROR_RATIO_RATE5M,
    SPAN_LATENCY_BUCKET_RATE5M,
    SERVICE_GRAPH_REQUEST_RATE5M,
    SERVICE_GRAPH_REQUEST_FAILED_RATE5M,
    SERVICE_GRAPH_REQUEST_SERVER_SECONDS_BUCKET_RATE5M,
)
GPU_FLEET_RULES: tuple[RecordingRule, ...] = (
    GPU_UTILIZATION_P50,
    GPU_UTILIZATION_TOP,
    GPU_UTILIZATION_BOTTOM,
    GPU_TEMPERATURE_P50,
    GPU_TEMPERATURE_TOP,
    GPU_POWER_SUM,
    GPU_POWER_LIMIT_SUM,
)
GPU_ERROR_RULES: tuple[RecordingRule, ...] = (
    GPU_ERRORS_RATE,
    GPU_ECC_ERRORS_RATE,
    GPU_XID_ERRORS_RATE,
    GPU_POLLER_COLLECTION_FAILURES_RATE,
)
# Slow-moving health signals (clocks, throttle reasons: 9 series per GPU). Every group runs at the
# evaluation interval (tests/rules); this one could run 4 times less often if that rule allowed it.
GPU_HEALTH_RULES: tuple[RecordingRule, ...] = (
    GPU_CLOCK_THROTTLE_SUM,
    GPU_SM_CLOCK_P50,
    GPU_SM_CLOCK_MIN,
    GPU_MEMORY_CLOCK_P50,
    GPU_MEMORY_CLOCK_MIN,
)
GPU_PROFILING_RULES: tuple[RecordingRule, ...] = (
    GPU_SM_ACTIVE_P50,
    GPU_SM_OCCUPANCY_P50,
    GPU_TENSOR_ACTIVE_P50,
    GPU_DRAM_BANDWIDTH_P50,
    GPU_UTILIZATION_P50_WHERE_GPM,
    GPU_PCIE_BYTES_RATE,
    GPU_NVLINK_BYTES_RATE,
)
ALL_RULES: tuple[RecordingRule, ...] = (
    TRAINING_RULES + TRACE_RULES + GPU_FLEET_RULES + GPU_ERROR_RULES + GPU_HEALTH_RULES + GPU_PROFILING_RULES
)

TRAINING_GROUP = "foxhunt-dashboards-training.rules"
TRACES_GROUP = "foxhunt-dashboards-traces.rules"
GPU_FLEET_GROUP = "foxhunt-dashboards-gpu-fleet.rules"
GPU_ERRORS_GROUP = "foxhunt-dashboards-gpu-errors.rules"
GPU_HEALTH_GROUP = "foxhunt-dashboards-gpu-health.rules"
GPU_PROFILING_GROUP = "foxhunt-dashboards-gpu-profiling.rules"


def dashboard_recording_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """The rule groups (Prometheus rule-file format) the dashboards depend on."""
    interval = f"{cfg.evaluation_interval_seconds}s"
    groups = (
        (TRAINING_GROUP, TRAINING_RULES),
        (TRACES_GROUP, TRACE_RULES),
        (GPU_FLEET_GROUP, GPU_FLEET_RULES),
        (GPU_ERRORS_GROUP, GPU_ERROR_RULES),
        (GPU_HEALTH_GROUP, GPU_HEALTH_RULES),
        (GPU_PROFILING_GROUP, GPU_PROFILING_RULES),
    )
    return [{"name": name, "interval": interval, "rules": [r.to_rule() for r in rules]} for name, rules in groups]
