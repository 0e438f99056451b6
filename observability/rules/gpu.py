"""Group `ml_gpu_resources`: the six GPU alerts and the predicted out-of-memory alert.

Waste and bottleneck are judged per training job: GPUUtilizationLow and GPUUtilizationCritical
read each job's mean GPU utilization (recorded by `jobs.py`), so a job of 8 GPUs raises one
alert, not eight, and a GPU no job holds (free capacity) never raises them.

The hardware alerts (memory, temperature, errors, predicted out-of-memory) stay per GPU. Each
reduces by node, gpu_id, uuid and gpu_name (never summing a GPU away, dropping the poller pod's
target labels so a restarted poller continues the same alert), then takes the `model_type` and
`job_id` of the job holding the GPU where one does, and stays as it is where none does: a hot or
failing GPU pages whether or not a job holds it. They read the poller's and the jobs' raw series
(no recorded series), so the 30-second promise of the critical ones holds.

Cost at fleet scale (8,000 GPUs): the alerts read the poller's series directly (no per-GPU
recording rule), and an upper threshold filters before it aggregates (`max by (...) (x > t)`
selects the same GPUs with the same value as `max by (...) (x) > t`), so `max` only sees the
GPUs above it. GPUErrorsDetected reads only ml_gpu_errors_total, never the per-code XID series.
"""

from __future__ import annotations

from observability import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, counter_increased, duration
from observability.rules import jobs, recording
from observability.rules.detection import critical_for_seconds, event_window_seconds
from observability.rules.model import AlertRule, RunbookQuery, Severity

GROUP = "ml_gpu_resources"
GPU_LABELS = recording.GPU_LABELS
JOB_LABELS = jobs.JOB_LABELS
HELD_GPU_LABELS = (*GPU_LABELS, *JOB_LABELS)
# A GPU lost before the poller ever read its UUID has only its index (uuid and gpu_name are empty);
# a GPU a training job holds names the job.
_GPU = (
    "GPU {{ $labels.gpu_id }} ({{ if $labels.uuid }}{{ $labels.gpu_name }}, {{ $labels.uuid }}{{ else }}never "
    "identified: lost before its UUID was read{{ end }}) on node {{ $labels.node }}"
    "{{ if $labels.job_id }}, held by job {{ $labels.job_id }} ({{ $labels.model_type }}),"
    "{{ else }}, held by no job,{{ end }}"
)
_ONE_GPU = '{node="<node>", gpu_id="<gpu_id>"}'
_ONE_JOB = '{model_type="<model_type>", job_id="<job_id>"}'
_JOB = "Job {{ $labels.job_id }} ({{ $labels.model_type }})"
# The job's GPUs per node, from the recorded held-GPU series (one small query per firing alert).
_JOB_PLACEMENT = (
    '{{ range printf "count by (node) (' + jobs.HELD_UTILIZATION.record + '{job_id=%q, model_type=%q})" '
    '$labels.job_id $labels.model_type | query | sortByLabel "node" }}'
    "{{ .Labels.node }}: {{ .Value }} GPU(s); {{ end }}"
)
_JOB_GPUS_QUERY = jobs.HELD_UTILIZATION.record + '{job_id="{{ $labels.job_id }}"}'

# GPUMemoryExhaustionPredicted: the linear trend of the last 10 minutes reaches the GPU's total
# memory within the next 10 minutes, while more than a threshold share of it is in use.
PREDICTION_WINDOW_SECONDS = 600
PREDICTION_HORIZON_SECONDS = 600
PREDICTION_FOR_SECONDS = 120
# GPUMemoryExhausted would wait `for: 1m`, but out-of-memory must be detected within 30s: `for` is
# this, shortened by critical_for_seconds() to fit the detection budget.
MEMORY_EXHAUSTED_FOR_SECONDS = 60


_USED = catalog.GPU_MEMORY_USED_BYTES.name
_TOTAL = catalog.GPU_MEMORY_TOTAL_BYTES.name


def _memory_ratio_above(ratio: str) -> str:
    """Per GPU, the fraction of its memory in use where it is above `ratio`, with its job's labels.

    Used and total come from the same poller scrape, so they match on every label; the comparison
    filters before `max` reduces to the GPU's labels, so the aggregation and the job join only see
    the few GPUs above the threshold (reading the poller's series directly costs less, fleet-wide,
    than recording the ratio for every GPU and reading that)."""
    return jobs.attributed_or_unheld(f"max {by(GPU_LABELS)} (\n  {_USED}\n  /\n  {_TOTAL}\n  > {ratio}\n)")


def _memory_exhaustion_predicted(floor: str) -> str:
    """Per GPU above `floor` (a fraction of its memory in use), whose trend reaches its total within the horizon.

    The value is the fraction in use now. predict_linear fits a line through every sample of the
    window, so one spike barely moves it, and flat or falling usage never reaches the total."""
    window = duration(PREDICTION_WINDOW_SECONDS)
    return jobs.attributed_or_unheld(
        f"max {by(GPU_LABELS)} (\n"
        f"  {_USED} / {_TOTAL} > {floor}\n"
        f"  and\n"
        f"  predict_linear({_USED}[{window}], {PREDICTION_HORIZON_SECONDS}) >= {_TOTAL}\n"
        f")"
    )


def _memory_ratio_one_gpu_last(window: str) -> str:
    return f"({_USED}{_ONE_GPU} / {_TOTAL}{_ONE_GPU})[{window}:]"


def gpu_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    event_window = duration(event_window_seconds(cfg))
    th = cfg.thresholds
    low, high = th.gpu_utilization_low_percent, th.gpu_utilization_high_percent
    memory_high, memory_exhausted = th.gpu_memory_high_ratio, th.gpu_memory_exhausted_ratio
    hot = th.gpu_temperature_high_celsius
    floor = th.gpu_memory_prediction_floor_ratio
    job_util = jobs.JOB_UTILIZATION_AVG.record
    one_job_util = f"{job_util}{_ONE_JOB}"
    held_util = jobs.HELD_UTILIZATION.record
    job_queries = (
        RunbookQuery("Mean GPU utilization of this job over the last hour", f"{one_job_util}[1h]"),
        RunbookQuery("Each GPU of this job, with its node", f"{held_util}{_ONE_JOB}"),
    )
    return (
        AlertRule(
            name="GPUUtilizationLow",
            group=GROUP,
            severity=Severity.INFO,
            expr=f"{job_util} < {low.promql}",
            for_seconds=600,
            summary="A training job has kept its GPUs mostly idle for 10 minutes.",
            description=(
                f'{_JOB} has kept its GPUs {{{{ printf "%.1f" $value }}}}% busy on average, below '
                f"{low.short} for 10m. GPUs by node: {_JOB_PLACEMENT}list them: {_JOB_GPUS_QUERY}."
            ),
            impact="Paid GPU capacity is wasted; jobs that need a GPU may be queued while this one idles",
            action=(
                "Check whether the job is still making progress",
                "Profile the job's input pipeline (data loading starves the GPU)",
                "Increase the batch size or give the job fewer GPUs",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                *job_queries,
                RunbookQuery(
                    "Data loading p95 per model (a slow input pipeline starves the GPU)",
                    f"histogram_quantile(0.95, sum by (model_type, le) "
                    f"(rate({catalog.TRAINING_DATA_LOADING_SECONDS.bucket}[5m])))",
                ),
                RunbookQuery("Every job below the threshold right now", f"{job_util} < {low.promql}"),
            ),
            rationale=(
                "Info: an optimisation opportunity, routed to the low-priority receiver, never paged. Judged per "
                "job on the mean utilization of the GPUs it holds (ml_training_job_gpu_info joined on uuid): one "
                "alert per job, and a GPU no job holds is free capacity, not waste, so it never fires this."
            ),
        ),
        AlertRule(
            name="GPUUtilizationCritical",
            group=GROUP,
            severity=Severity.INFO,
            expr=f"{job_util} > {high.promql}",
            for_seconds=300,
            summary="A training job has kept its GPUs saturated for 5 minutes.",
            description=(
                f'{_JOB} has kept its GPUs {{{{ printf "%.1f" $value }}}}% busy on average, above '
                f"{high.short} for 5m. GPUs by node: {_JOB_PLACEMENT}list them: {_JOB_GPUS_QUERY}."
            ),
            impact=(
                "The GPUs are the job's bottleneck: no headroom for bursts, and a second job sharing them slows down"
            ),
            action=(
                "Check the power draw and clock throttle reasons of the job's GPUs",
                "Check whether more than one job shares the GPUs",
                "Scale the job out to more GPUs if throughput matters",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                *job_queries,
                RunbookQuery(
                    "Active clock throttle reasons on the job's nodes",
                    f'{catalog.GPU_CLOCK_THROTTLE_ACTIVE.name}{{node=~"<node>"}} == 1',
                ),
                RunbookQuery("Power drawn by the job's GPUs", f"{jobs.HELD_POWER.record}{_ONE_JOB}"),
            ),
            rationale=(
                "Severity info: a GPU saturated for this long is a bottleneck to look at, an optimisation "
                "opportunity rather than an outage, so nobody is notified out of hours. Judged per job like "
                "GPUUtilizationLow."
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
            locating_labels=HELD_GPU_LABELS,
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
            for_seconds=critical_for_seconds(cfg, MEMORY_EXHAUSTED_FOR_SECONDS),
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
            locating_labels=HELD_GPU_LABELS,
            queries=(
                RunbookQuery("Memory in use on this GPU over the last 15 minutes", _memory_ratio_one_gpu_last("15m")),
                RunbookQuery(
                    "Out-of-memory training failures in the last hour",
                    f'sum by (model_type) (increase({catalog.TRAINING_FAILURES_TOTAL.name}{{error_type="oom"}}[1h]))',
                ),
            ),
            rationale=(
                "Out-of-memory must be detected within 30s, so `for` is not a fixed 1m but derived from the "
                "evaluation interval (15s at the default 15s intervals, so two consecutive samples above "
                f"{memory_exhausted.short} are needed and a single-sample spike does not page; 0s when the "
                "evaluation interval is 30s). The ratio is computed from the poller's series (no recording "
                "rule, which could lag one evaluation)."
            ),
        ),
        AlertRule(
            name="GPUTemperatureHigh",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=jobs.attributed_or_unheld(
                f"max {by(GPU_LABELS)} ({catalog.GPU_TEMPERATURE_CELSIUS.name} > {hot.promql})"
            ),
            for_seconds=120,
            summary=f"A GPU has been hotter than {hot.text} for 2 minutes.",
            description=f'{_GPU} is at {{{{ printf "%.0f" $value }}}} °C, above {hot.short} for 2m.',
            impact="The GPU throttles its clocks (training slows) and risks hardware damage or shutdown",
            action=(
                "Check the node's cooling and fans with the data-centre team",
                "Check the active clock throttle reasons (thermal slowdown)",
                "Drain the node if the temperature keeps rising",
            ),
            locating_labels=HELD_GPU_LABELS,
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
            expr=jobs.attributed_or_unheld(
                counter_increased(catalog.GPU_ERRORS_TOTAL, event_window_seconds(cfg), GPU_LABELS)
            ),
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
            locating_labels=HELD_GPU_LABELS,
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
        AlertRule(
            name="GPUMemoryExhaustionPredicted",
            group=GROUP,
            severity=Severity.WARNING,
            expr=_memory_exhaustion_predicted(floor.promql),
            for_seconds=PREDICTION_FOR_SECONDS,
            summary="A GPU's memory use is on course to reach its total within 10 minutes.",
            description=(
                f"{_GPU} has {{{{ $value | humanizePercentage }}}} of its memory in use (above {floor.short}), and at "
                f"the trend of the last 10m it reaches its total memory within 10m."
            ),
            impact="The job on the GPU will fail with CUDA out-of-memory within minutes unless something changes",
            action=(
                "Find the job on the GPU and what grows (a leak, a growing batch or sequence, a cache)",
                "Save a checkpoint while the job can still write one",
                "Reduce the batch size or enable gradient checkpointing before it runs out",
            ),
            locating_labels=HELD_GPU_LABELS,
            queries=(
                RunbookQuery("Memory in use on this GPU over the last hour", _memory_ratio_one_gpu_last("1h")),
                RunbookQuery(
                    "Seconds until the trend of the last 10 minutes reaches the total (negative: never)",
                    f"({catalog.GPU_MEMORY_TOTAL_BYTES.name}{_ONE_GPU}"
                    f" - {catalog.GPU_MEMORY_USED_BYTES.name}{_ONE_GPU})"
                    f" / deriv({catalog.GPU_MEMORY_USED_BYTES.name}{_ONE_GPU}[10m])",
                ),
            ),
            rationale=(
                "A warning ahead of GPUMemoryExhausted, which mutes it on the same GPU (Alertmanager). "
                "predict_linear fits a line through all samples of the last 10 minutes, so a single spike moves "
                "it little, flat or falling usage never reaches the total, and `for: 2m` needs the trend to hold "
                f"for eight more samples; below {floor.short} of the memory the trend is not trusted "
                "(allocators grow in steps at start-up)."
            ),
        ),
    )
