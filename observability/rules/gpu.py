"""Group `ml_gpu_resources`: the six GPU alerts of seed 001, on the NVML poller's series.

Every expression reduces by node, gpu_id, uuid and gpu_name (never summing a GPU away) and
drops the poller pod's target labels, so a restarted poller continues the same alert.

Cost at fleet scale (8,000 GPUs): the alerts read the poller's series directly (no per-GPU
recording rule), and an upper threshold filters before it aggregates (`max by (...) (x > t)`
selects the same GPUs with the same value as `max by (...) (x) > t`), so `max` only sees the
GPUs above it. GPUErrorsDetected reads only ml_gpu_errors_total, never the per-code XID series.
"""

from __future__ import annotations

from observability import catalog
from observability.config import ObservabilityConfig
from observability.rules import recording
from observability.rules.detection import critical_for_seconds, event_window_seconds
from observability.rules.model import AlertRule, RunbookQuery, Severity
from observability.rules.promql import by, counter_increased, duration, gauge

GROUP = "ml_gpu_resources"
GPU_LABELS = recording.GPU_LABELS
# A GPU lost before the poller ever read its UUID has only its index (uuid and gpu_name are empty).
_GPU = (
    "GPU {{ $labels.gpu_id }} ({{ if $labels.uuid }}{{ $labels.gpu_name }}, {{ $labels.uuid }}{{ else }}never "
    "identified: lost before its UUID was read{{ end }}) on node {{ $labels.node }}"
)
_ONE_GPU = '{node="<node>", gpu_id="<gpu_id>"}'

# The seed gives GPUMemoryExhausted `for: 1m` but also promises out-of-memory detection within
# 30s; both cannot hold. The promise wins: `for` is this, shortened by critical_for_seconds().
MEMORY_EXHAUSTED_SEED_FOR_SECONDS = 60


_USED = catalog.GPU_MEMORY_USED_BYTES.name
_TOTAL = catalog.GPU_MEMORY_TOTAL_BYTES.name


def _memory_ratio_above(ratio: str) -> str:
    """Per GPU, the fraction of its memory in use where it is above `ratio`.

    Used and total come from the same poller scrape, so they match on every label; the comparison
    filters before `max` reduces to the GPU's labels, so the aggregation only sees the few GPUs
    above the threshold (reading the poller's series directly costs less, fleet-wide, than
    recording the ratio for every GPU and reading that)."""
    return f"max {by(GPU_LABELS)} (\n  {_USED}\n  /\n  {_TOTAL}\n  > {ratio}\n)"


def _memory_ratio_one_gpu_last(window: str) -> str:
    return f"({_USED}{_ONE_GPU} / {_TOTAL}{_ONE_GPU})[{window}:]"


def gpu_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    event_window = duration(event_window_seconds(cfg))
    th = cfg.thresholds
    low, high = th.gpu_utilization_low_percent, th.gpu_utilization_high_percent
    memory_high, memory_exhausted = th.gpu_memory_high_ratio, th.gpu_memory_exhausted_ratio
    hot = th.gpu_temperature_high_celsius
    util = gauge(catalog.GPU_UTILIZATION_PERCENT, GPU_LABELS)
    one_util = f"{catalog.GPU_UTILIZATION_PERCENT.name}{_ONE_GPU}"
    return (
        AlertRule(
            name="GPUUtilizationLow",
            group=GROUP,
            severity=Severity.INFO,
            expr=f"{util} < {low.promql}",
            for_seconds=600,
            summary="A GPU has been mostly idle for 10 minutes.",
            description=(f'{_GPU} has been {{{{ printf "%.1f" $value }}}}% busy, below {low.short} for 10m.'),
            impact="Paid GPU capacity is wasted; jobs that need a GPU may be queued while this one idles",
            action=(
                "Check which pod holds the GPU and whether its job is still running",
                "Profile the job's input pipeline (data loading starves the GPU)",
                "Increase the batch size or release the GPU",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery("Utilization of this GPU over the last hour", f"{one_util}[1h]"),
                RunbookQuery(
                    "Data loading p95 per model (a slow input pipeline starves the GPU)",
                    f"histogram_quantile(0.95, sum by (model_type, le) "
                    f"(rate({catalog.TRAINING_DATA_LOADING_SECONDS.bucket}[5m])))",
                ),
                RunbookQuery("Every idle GPU right now", f"{util} < {low.promql}"),
            ),
            rationale="Info: an optimisation opportunity, routed to the low-priority receiver, never paged.",
        ),
        AlertRule(
            name="GPUUtilizationCritical",
            group=GROUP,
            severity=Severity.INFO,
            expr=f"max {by(GPU_LABELS)} ({catalog.GPU_UTILIZATION_PERCENT.name} > {high.promql})",
            for_seconds=300,
            summary="A GPU has been saturated for 5 minutes.",
            description=(f'{_GPU} has been {{{{ printf "%.1f" $value }}}}% busy, above {high.short} for 5m.'),
            impact="The GPU is the bottleneck: jobs sharing it slow down and there is no headroom for bursts",
            action=(
                "Check the power draw and clock throttle reasons of the GPU",
                "Check whether more than one job shares the GPU",
                "Scale the job out to more GPUs if throughput matters",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery("Utilization of this GPU over the last hour", f"{one_util}[1h]"),
                RunbookQuery(
                    "Active clock throttle reasons", f"{catalog.GPU_CLOCK_THROTTLE_ACTIVE.name}{_ONE_GPU} == 1"
                ),
                RunbookQuery(
                    "Power draw against the limit",
                    f"{catalog.GPU_POWER_WATTS.name}{_ONE_GPU} / {catalog.GPU_POWER_LIMIT_WATTS.name}{_ONE_GPU}",
                ),
            ),
            rationale=(
                "The seed names this a 'bottleneck alert' and assigns no severity; its severity table has two "
                "info alerts, and a saturated training GPU is an optimisation opportunity rather than an "
                "outage, so this is the second one."
            ),
        ),
        AlertRule(
            name="GPUMemoryUsageHigh",
            group=GROUP,
            severity=Severity.WARNING,
            expr=_memory_ratio_above(memory_high.promql),
            for_seconds=300,
            summary=f"A GPU has had more than {memory_high.text} of its memory in use for 5 minutes.",
            description=(
                f"{_GPU} has {{{{ $value | humanizePercentage }}}} of its memory in use, above {memory_high.short} "
                "for 5m."
            ),
            impact="Little memory headroom: a larger batch or a memory spike will fail with out-of-memory",
            action=(
                "Find the job on the GPU and its batch size",
                "Watch the trend: a steady climb points to a memory leak",
                "Reduce the batch size or enable gradient checkpointing before it runs out",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery("Memory in use on this GPU over the last hour", _memory_ratio_one_gpu_last("1h")),
                RunbookQuery(
                    "Bytes used and total",
                    f"{catalog.GPU_MEMORY_USED_BYTES.name}{_ONE_GPU} or "
                    f"{catalog.GPU_MEMORY_TOTAL_BYTES.name}{_ONE_GPU}",
                ),
            ),
            rationale="Inhibited by GPUMemoryExhausted on the same GPU (Alertmanager).",
        ),
        AlertRule(
            name="GPUMemoryExhausted",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=_memory_ratio_above(memory_exhausted.promql),
            for_seconds=critical_for_seconds(cfg, MEMORY_EXHAUSTED_SEED_FOR_SECONDS),
            summary="A GPU is about to run out of memory.",
            description=(
                f"{_GPU} has {{{{ $value | humanizePercentage }}}} of its memory in use, above "
                f"{memory_exhausted.short}: the next allocation will fail with out-of-memory."
            ),
            impact="Training crashes with CUDA out-of-memory and loses the work since its last checkpoint",
            action=(
                "Save a checkpoint now if the job allows it",
                "Reduce the batch size or sequence length",
                "Enable gradient checkpointing or mixed precision",
                "Check for a second process on the same GPU",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery("Memory in use on this GPU over the last 15 minutes", _memory_ratio_one_gpu_last("15m")),
                RunbookQuery(
                    "Out-of-memory training failures in the last hour",
                    f'sum by (model_type) (increase({catalog.TRAINING_FAILURES_TOTAL.name}{{error_type="oom"}}[1h]))',
                ),
            ),
            rationale=(
                "The seed gives `for: 1m` but promises out-of-memory detection within 30s; both cannot hold. "
                "The promise wins: `for` is derived from the evaluation interval (15s at the default 15s "
                f"intervals, so two consecutive samples above {memory_exhausted.short} are needed and a "
                "single-sample spike does not page; 0s when the evaluation interval is 30s). The ratio is "
                "computed from the poller's series (no recording rule, which could lag one evaluation)."
            ),
        ),
        AlertRule(
            name="GPUTemperatureHigh",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=f"max {by(GPU_LABELS)} ({catalog.GPU_TEMPERATURE_CELSIUS.name} > {hot.promql})",
            for_seconds=120,
            summary=f"A GPU has been hotter than {hot.text} for 2 minutes.",
            description=f'{_GPU} is at {{{{ printf "%.1f" $value }}}} °C, above {hot.short} for 2m.',
            impact="The GPU throttles its clocks (training slows) and risks hardware damage or shutdown",
            action=(
                "Check the node's cooling and fans with the data-centre team",
                "Check the active clock throttle reasons (thermal slowdown)",
                "Drain the node if the temperature keeps rising",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery(
                    "Temperature of every GPU on the node", f'{catalog.GPU_TEMPERATURE_CELSIUS.name}{{node="<node>"}}'
                ),
                RunbookQuery(
                    "Thermal throttling",
                    f'{catalog.GPU_CLOCK_THROTTLE_ACTIVE.name}{{node="<node>", reason=~".*thermal.*"}} == 1',
                ),
                RunbookQuery("Power draw", f"{catalog.GPU_POWER_WATTS.name}{_ONE_GPU}"),
            ),
        ),
        AlertRule(
            name="GPUErrorsDetected",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=counter_increased(catalog.GPU_ERRORS_TOTAL, event_window_seconds(cfg), GPU_LABELS),
            for_seconds=critical_for_seconds(cfg, 0),
            summary="A GPU reported hardware errors.",
            description=(
                f"{_GPU} reported hardware errors (XID, uncorrectable ECC or GPU lost) within the last "
                f"{event_window}. The XID codes: increase({catalog.GPU_XID_ERRORS_TOTAL.name}"
                f'{{node="{{{{ $labels.node }}}}", gpu_id="{{{{ $labels.gpu_id }}}}"}}[1h]).'
            ),
            impact="Results computed on the GPU may be corrupt, and the job on it may crash or hang",
            action=(
                "Read the XID codes and the error types of the GPU",
                "Stop or move the job on the GPU",
                "Cordon the node and reset the GPU or open a hardware ticket",
            ),
            locating_labels=GPU_LABELS,
            queries=(
                RunbookQuery(
                    "Errors by type in the last hour",
                    f"increase({catalog.GPU_ERRORS_TOTAL.name}{_ONE_GPU}[1h])",
                ),
                RunbookQuery(
                    "XID codes in the last hour",
                    f"increase({catalog.GPU_XID_ERRORS_TOTAL.name}{_ONE_GPU}[1h])",
                ),
                RunbookQuery(
                    "Uncorrected ECC errors",
                    f'{catalog.GPU_ECC_ERRORS_TOTAL.name}{{node="<node>", ecc_type="uncorrected"}}',
                ),
                RunbookQuery(
                    "Is NVML still answering on the node?", f'{catalog.GPU_POLLER_NVML_UP.name}{{node="<node>"}}'
                ),
            ),
            rationale=(
                "Reads only ml_gpu_errors_total, which the poller creates at 0 for every GPU and increments "
                "for every XID (any code), uncorrectable ECC error and lost GPU, so one alert per GPU covers "
                "all three. ml_gpu_xid_errors_total (by XID code) only says which codes occurred: its "
                "series appear on a code's first occurrence, and reading them made this rule cost seconds "
                "at fleet scale. A counter is never compared with `> 0`: that would fire forever after the "
                "first error. The alert fires at the first evaluation that sees a new error (no `for`) and "
                f"resolves {event_window} after the last one."
            ),
        ),
    )
