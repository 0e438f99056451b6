"""Group `ml_gpu_resources`: the GPU alerts of the monitoring report and the predicted out-of-memory alert.

Waste and bottleneck are judged per training job: GPUUtilizationLow and GPUUtilizationCritical
read each job's mean GPU utilization (recorded by `jobs.py`), so a job of 8 GPUs raises one
alert, not eight, and a GPU no job holds (free capacity) never raises them.

The hardware alerts (memory, temperature, errors, predicted out-of-memory) stay per GPU. Each
takes the `model_type` and `job_id` of the job holding the GPU where one does, and stays as it is
where none does: a hot or failing GPU pages whether or not a job holds it.

Cost at fleet scale (8,000 GPUs): the group reads each of the poller's GPU inputs once an
evaluation, in recording rules at its head (`input_rules`), and writes only the GPUs that could
matter to an alert: memory above the lowest memory threshold, temperature above its threshold,
error counters above zero. The conditions that read a window (the memory trend, new errors) are
recorded from those, once, for the few GPUs that meet them, and so are the GPUs above the memory
alerts' thresholds (the watched ratio holds every GPU above the trend floor, often most of the
fleet, and the job join would read it twice per alert). The alerts read these small recorded
series (the job join reads its per-GPU side twice: once joined, once for the GPUs no job holds; on
a few recorded series that costs nothing). Rules of one group run in order at the same evaluation
time, and each sees the samples the rules before it wrote, so the recorded inputs are never an
evaluation old and the 30-second promise of the critical alerts holds. Each input reduces by
node, gpu_id, uuid and gpu_name (never summing a GPU away, dropping the poller pod's target
labels so a restarted poller continues the same alert), and filters before it aggregates
(`max by (...) (x > t)` selects the same GPUs with the same value as `max by (...) (x) > t`).
GPUErrorsDetected reads only ml_gpu_errors_total, never the per-code XID series.
"""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, duration
from observability.rules import jobs, recording
from observability.rules.detection import critical_for_seconds, event_window_seconds
from observability.rules.rule_types import AlertRule, RecordingRule, RunbookQuery, Severity
from observability.thresholds import Threshold

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
    '{{ range printf "count by (node) (' + jobs.HELD.record + '{job_id=%q, model_type=%q})" '
    '$labels.job_id $labels.model_type | query | sortByLabel "node" }}'
    "{{ .Labels.node }}: {{ .Value }} GPU(s); {{ end }}"
)
_JOB_GPUS_QUERY = jobs.HELD.record + '{job_id="{{ $labels.job_id }}"}'

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
_ERROR_LABELS = (*GPU_LABELS, "error_type")

# --- recorded at the head of the group, read by its alerts in the same evaluation ------------------
# The inputs: each GPU input read once, and only the GPUs that could matter to an alert written.
MEMORY_RATIO_WATCHED = f"gpu:{recording.MEMORY_USED_OVER_TOTAL}:watched"
# The GPUs above the lower of the two memory alerts' thresholds: the memory alerts read this (a few
# GPUs) instead of the watched ratio (every GPU above the trend floor, often most of the fleet).
MEMORY_RATIO_HIGH = f"gpu:{recording.MEMORY_USED_OVER_TOTAL}:high"
TEMPERATURE_TOO_HOT = f"gpu:{catalog.GPU_TEMPERATURE_CELSIUS.name}:too_hot"
ERRORS_NONZERO = f"gpu_error_type:{catalog.GPU_ERRORS_TOTAL.name}:nonzero"
# Per-GPU alert conditions that read a window, recorded once so that the job join (which reads its
# per-GPU side twice) reads a few recorded series instead of evaluating the window twice.
EXHAUSTION_PREDICTED = f"gpu:{recording.MEMORY_USED_OVER_TOTAL}:exhaustion_predicted"
ERRORS_INCREASED = f"gpu:{catalog.GPU_ERRORS_TOTAL.name}:increased"


def _lowest(*thresholds: Threshold) -> Threshold:
    return min(thresholds, key=lambda t: t.value)


def _memory_alerts_ratio(cfg: ObservabilityConfig) -> Threshold:
    """The lower of the two memory alerts' thresholds: above it a GPU is in `MEMORY_RATIO_HIGH`."""
    return _lowest(cfg.thresholds.gpu_memory_high_ratio, cfg.thresholds.gpu_memory_exhausted_ratio)


def _watched_ratio(cfg: ObservabilityConfig) -> Threshold:
    """The lowest memory ratio any alert of the group looks at: below it a GPU is not recorded."""
    return _lowest(cfg.thresholds.gpu_memory_prediction_floor_ratio, _memory_alerts_ratio(cfg))


def _errors_increased(cfg: ObservabilityConfig) -> RecordingRule:
    """Per GPU: an error counter grew within the event window, or a counter above zero is new in it.

    `increase()` needs two samples, so a counter first recorded above zero (created by its first
    increment, or leaving 0 for the first time) is caught by the second branch, which matches by
    GPU and error type only: a restarted poller re-exporting the same counts is the same series."""
    window = duration(event_window_seconds(cfg))
    per_gpu = f"sum {by(GPU_LABELS)}"
    return RecordingRule(
        ERRORS_INCREASED,
        f"{per_gpu} (increase({ERRORS_NONZERO}[{window}]) > 0)\n"
        f"or\n"
        f"{per_gpu} ({ERRORS_NONZERO} unless {ERRORS_NONZERO} offset {window})",
        f"Each GPU whose hardware error counters grew within the last {window} (or appeared above zero in it); "
        f"GPUs without a new error are not recorded.",
    )


def input_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The recording rules at the head of the group, in order: the alerts after them (and each
    rule after the ones it reads) see their samples in the same evaluation."""
    watched, hot = _watched_ratio(cfg), cfg.thresholds.gpu_temperature_high_celsius
    high = _memory_alerts_ratio(cfg)
    floor = cfg.thresholds.gpu_memory_prediction_floor_ratio
    window, horizon = duration(PREDICTION_WINDOW_SECONDS), duration(PREDICTION_HORIZON_SECONDS)
    return (
        RecordingRule(
            MEMORY_RATIO_WATCHED,
            f"max {by(GPU_LABELS)} (\n  {_USED}\n  /\n  {_TOTAL}\n  > {watched.promql}\n)",
            f"Fraction (0-1) of memory in use on each GPU above {watched.short} (the GPUs the memory alerts and "
            f"the out-of-memory prediction look at); GPUs below are not recorded.",
        ),
        RecordingRule(
            MEMORY_RATIO_HIGH,
            f"{MEMORY_RATIO_WATCHED} > {high.promql}",
            f"Fraction (0-1) of memory in use on each GPU above {high.short}, the lower of the memory alerts' "
            f"thresholds; GPUs below are not recorded.",
        ),
        RecordingRule(
            TEMPERATURE_TOO_HOT,
            f"max {by(GPU_LABELS)} ({catalog.GPU_TEMPERATURE_CELSIUS.name} > {hot.promql})",
            f"Temperature (Celsius) of each GPU hotter than {hot.short}; cooler GPUs are not recorded.",
        ),
        RecordingRule(
            ERRORS_NONZERO,
            f"max {by(_ERROR_LABELS)} ({catalog.GPU_ERRORS_TOTAL.name} > 0)",
            "Hardware errors counted on each GPU by error type, where above zero (a counter at 0 is not "
            "recorded); one series per GPU and type whichever poller pod counted them.",
        ),
        RecordingRule(
            EXHAUSTION_PREDICTED,
            f"{MEMORY_RATIO_WATCHED} > {floor.promql}\n"
            f"and\n"
            f"predict_linear({MEMORY_RATIO_WATCHED}[{window}], {PREDICTION_HORIZON_SECONDS}) >= 1",
            f"Fraction (0-1) of memory in use on each GPU above {floor.short} whose memory, at the linear trend of "
            f"the last {window}, reaches its total within {horizon}. predict_linear fits a line through every "
            f"recorded sample of the window, so one spike barely moves it, and flat or falling usage never "
            f"reaches the total (a ratio of 1).",
        ),
        _errors_increased(cfg),
    )


def _memory_ratio_above(ratio: str) -> str:
    """Per GPU, the fraction of its memory in use where it is above `ratio`, with its job's labels."""
    return jobs.attributed_or_unheld(f"{MEMORY_RATIO_HIGH} > {ratio}")


# GPUs held by more than one job at once (time-sliced), computed here: the shards evaluate this group.
_SHARED_GPUS = f"count by (uuid) ({jobs.HOLDER}) > 1"


def _exhaustion_predicted(per_gpu: str) -> str:
    """`per_gpu` with its job's labels; on a shared GPU, for each job whose own device memory grew over
    the prediction window (the one heading for the out-of-memory), not for every job holding it."""
    reserved = catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES.name
    growing = f"sum by (model_type, job_id, uuid) (deriv({reserved}[{duration(PREDICTION_WINDOW_SECONDS)}])) > 0"
    return (
        f"(\n{jobs.attributed_or_unheld(per_gpu)}\n)\nunless on (uuid)\n({_SHARED_GPUS})\n"
        f"or\n(\n{jobs.attributed(per_gpu)}\n)\nand on (uuid)\n({_SHARED_GPUS})\n"
        f"and on (model_type, job_id, uuid)\n({growing})"
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
                "Out-of-memory must page within 30s of the failure, so `for` is not a fixed 1m but derived from the "
                "critical intervals (10s with the poller scraped and this group evaluated every 5s: at least two "
                f"consecutive samples above {memory_exhausted.short} are needed, so a single-sample spike does not "
                "page). The ratio is recorded at the head of this group in the same "
                "evaluation (never in another group, whose series could be an evaluation old)."
            ),
        ),
        AlertRule(
            name="GPUTemperatureHigh",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=jobs.attributed_or_unheld(f"{TEMPERATURE_TOO_HOT} > {hot.promql}"),
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
            expr=jobs.attributed_or_unheld(ERRORS_INCREASED),
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
                "Reads only ml_gpu_errors_total (its counters above zero, recorded at the head of this group in the "
                "same evaluation), which the poller creates at 0 for every GPU and increments "
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
            expr=_exhaustion_predicted(f"{EXHAUSTION_PREDICTED} > {floor.promql}"),
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
                    "Each job's own memory on this GPU (what its processes' allocators hold; several jobs on a "
                    "shared GPU)",
                    f'{catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES.name}{{uuid="<uuid>"}}',
                ),
                RunbookQuery(
                    "Seconds until the trend of the last 10 minutes reaches the total (negative: never)",
                    f"({catalog.GPU_MEMORY_TOTAL_BYTES.name}{_ONE_GPU}"
                    f" - {catalog.GPU_MEMORY_USED_BYTES.name}{_ONE_GPU})"
                    f" / deriv({catalog.GPU_MEMORY_USED_BYTES.name}{_ONE_GPU}[10m])",
                ),
            ),
            rationale=(
                "A warning ahead of GPUMemoryExhausted, which mutes it on the same GPU (Alertmanager). "
                "predict_linear fits a line through the samples of the last 10 minutes (those recorded at the "
                "head of this group, above the lowest memory threshold), so a single spike moves it little, "
                "flat or falling usage never reaches the total, and `for: 2m` needs the trend to hold "
                f"for eight more samples; below {floor.short} of the memory the trend is not trusted "
                "(allocators grow in steps at start-up). On a GPU several jobs share (time-sliced) it names only "
                "the jobs whose own memory (ml_training_gpu_memory_reserved_bytes, what their processes report) "
                "grew over the last 10 minutes: the job about to run the GPU out, not every job on it."
            ),
        ),
    )
