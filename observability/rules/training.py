"""Groups `ml_training_performance` and `ml_training_availability`."""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, counter_increased, counter_rate, duration, gauge_by
from observability.rules import recording
from observability.rules.detection import critical_for_seconds, event_window_seconds
from observability.rules.rule_types import AlertRule, RunbookQuery, Severity

PERFORMANCE_GROUP = "ml_training_performance"
AVAILABILITY_GROUP = "ml_training_availability"

JOB_LABELS: tuple[str, ...] = ("namespace", "model_type", "job_id")
SERVICE_MODEL_LABELS = recording.SERVICE_MODEL_LABELS
_JOB = "{{ $labels.model_type }} training job {{ $labels.job_id }} (namespace {{ $labels.namespace }})"
_ON_SERVICE = "{{ $labels.service }} (namespace {{ $labels.namespace }})"
_ONE_JOB = '{job_id="<job_id>"}'

SERVICE_DOWN_FOR_SECONDS = 30
SLOWDOWN_FOR_SECONDS = 300
SLOWDOWN_BASELINE_SECONDS = 3600  # a job's own speed: its median over this long
LOADING_FAILURES_WINDOW_SECONDS = 120
RECOVERIES_WINDOW_SECONDS = 3600  # rollbacks and restarts of a job are counted over this long


def recoveries_expr(cfg: ObservabilityConfig) -> str:
    """Rollbacks plus restarts of each job within the window, at least the threshold.

    Rollbacks: per process, its counter's increase when the process is older than the window,
    else everything it counted (a process started within the window counted nothing before it;
    a first sample already above 0 is invisible to `increase()`); the job's count is the largest
    any of its processes reports, since the ranks of a job roll back together. Restarts: the pods
    of the job whose process resumed from a checkpoint and began within the window (a restarted
    pod has a new name; its ranks are one restart)."""
    window = duration(RECOVERIES_WINDOW_SECONDS)
    rollbacks, resumes = catalog.TRAINING_ROLLBACKS_TOTAL.name, catalog.TRAINING_RESUMED.name
    job = by(JOB_LABELS)
    per_pod = by((*JOB_LABELS, "pod"))
    rolled_back = (
        f"max {job} (increase({rollbacks}[{window}]) and {rollbacks} offset {window} "
        f"or last_over_time({rollbacks}[{window}]))"
    )
    restarted = (
        f"count {job} (max {per_pod} (last_over_time({resumes}[{window}]) > 0 unless {resumes} offset {window}))"
    )
    edge = cfg.thresholds.training_recoveries_count.promql
    return f"(\n  {rolled_back}\n  + {restarted}\n  or {rolled_back}\n  or {restarted}\n) >= {edge}"


def performance_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    window = event_window_seconds(cfg)
    floor, ratio = cfg.thresholds.training_slowdown_epochs_per_second, cfg.thresholds.training_slowdown_ratio
    inference_p99 = cfg.thresholds.inference_p99_seconds
    speed = gauge_by(catalog.TRAINING_EPOCHS_PER_SECOND, JOB_LABELS)
    baseline = (
        f"max {by(JOB_LABELS)} (quantile_over_time(0.5, "
        f"{catalog.TRAINING_EPOCHS_PER_SECOND.name}[{duration(SLOWDOWN_BASELINE_SECONDS)}]))"
    )
    nan_labels = (*JOB_LABELS, "tensor_type")
    return (
        AlertRule(
            name="TrainingNaNDetected",
            group=PERFORMANCE_GROUP,
            severity=Severity.CRITICAL,
            expr=counter_increased(catalog.TRAINING_NAN_COUNT, window, nan_labels),
            for_seconds=critical_for_seconds(cfg, 0),
            summary="A training job produced NaN values.",
            description=(
                f"NaN values appeared in {{{{ $labels.tensor_type }}}} tensors of {_JOB} within the last "
                f"{duration(window)}."
            ),
            impact="Training unstable - model will produce invalid results",
            action=(
                "Stop training immediately",
                "Check learning rate",
                "Review data normalization",
                "Inspect gradient clipping",
            ),
            locating_labels=nan_labels,
            queries=(
                RunbookQuery(
                    "NaN values by tensor type in the last hour",
                    f"increase({catalog.TRAINING_NAN_COUNT.name}{_ONE_JOB}[1h])",
                ),
                RunbookQuery("Loss just before the NaN", f"{catalog.TRAINING_LOSS.name}{_ONE_JOB}[30m]"),
                RunbookQuery(
                    "Gradient explosions in the same job",
                    f"increase({catalog.TRAINING_GRADIENT_EXPLOSION_TOTAL.name}{_ONE_JOB}[1h])",
                ),
            ),
            rationale=(
                "A plain `ml_training_nan_count > 0` on this counter would fire forever after one NaN. This "
                "fires when the count grew within the window (or the job's series first appeared above zero, "
                f"which `increase()` cannot see) and resolves {duration(window)} after the last NaN. It has no "
                "`for`: an increment is an event, not noise, and 30s of `for` plus one evaluation interval "
                "would miss the 30-second detection target for critical failures."
            ),
        ),
        AlertRule(
            name="TrainingSlowdown",
            group=PERFORMANCE_GROUP,
            severity=Severity.WARNING,
            expr=(f"{speed}\n< {ratio.promql} * {baseline}\nor\n{speed} < {floor.promql}"),
            for_seconds=SLOWDOWN_FOR_SECONDS,
            summary=(
                f"A training job has run below {ratio.text} of its own speed over the last "
                f"{duration(SLOWDOWN_BASELINE_SECONDS)} for 5 minutes."
            ),
            description=(
                f'{_JOB} runs at {{{{ printf "%.4f" $value }}}} epochs per second for 5m: below {ratio.short} of '
                f"its median over the last {duration(SLOWDOWN_BASELINE_SECONDS)}"
                + f", or below the floor of {floor.short}."
            ),
            impact="Training will take much longer than expected",
            action=("Check GPU utilization", "Profile data loading", "Review batch size"),
            locating_labels=JOB_LABELS,
            queries=(
                RunbookQuery(
                    "Speed of the job over the last hour", f"{catalog.TRAINING_EPOCHS_PER_SECOND.name}{_ONE_JOB}[1h]"
                ),
                RunbookQuery(
                    "Iteration time p95 of the job",
                    f"histogram_quantile(0.95, sum by (le) "
                    f"(rate({catalog.TRAINING_ITERATION_SECONDS.bucket}{_ONE_JOB}[5m])))",
                ),
                RunbookQuery(
                    "Where the job's time goes (data wait, compute, checkpoints ...)",
                    f"sum by (phase) (rate({catalog.TRAINING_PHASE_SECONDS_TOTAL.name}{_ONE_JOB}[5m]))",
                ),
                RunbookQuery(
                    "GPU utilization on every GPU", gauge_by(catalog.GPU_UTILIZATION_PERCENT, recording.GPU_LABELS)
                ),
            ),
            rationale=(
                "Epochs of different models last milliseconds or hours, so no fixed speed is slow for all: the "
                "job is judged against its own median speed of the last hour (a job whose epochs always take "
                "20 s is healthy at 0.05 epochs/s; the same job at 0.02 is not). One slow epoch does not fire "
                "(5m `for`), and a job that stays slower becomes its own new normal once it has run so for half "
                "the hour. The absolute floor (trainingSlowdownEpochsPerSecond) catches a job that was never "
                "fast; it is low by default (raise it for a fleet whose epochs are known to be short). "
                "Inhibited while MLTrainingServiceDown fires (Alertmanager)."
            ),
        ),
        AlertRule(
            name="MLInferenceLatencyHigh",
            group=PERFORMANCE_GROUP,
            severity=Severity.WARNING,
            expr=f"{recording.INFERENCE_LATENCY_P99.record} > {inference_p99.promql}",
            for_seconds=120,
            summary=f"Online inference p99 latency has been above {inference_p99.text} for 2 minutes.",
            description=(
                f"p99 latency of {{{{ $labels.model_type }}}} inference on {_ON_SERVICE} is "
                f"{{{{ $value | humanizeDuration }}}}, above {inference_p99.short} for 2m."
            ),
            impact="Predictions arrive late: callers time out or act on stale decisions",
            action=(
                "Check the request rate against the service's capacity",
                "Check GPU utilization and memory of the serving nodes",
                "Check model cache misses (cold loads are slow)",
                "Scale the service out or roll back a recent model",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery("p99 latency per service and model", recording.INFERENCE_LATENCY_P99.record),
                RunbookQuery(
                    "Request rate per service and model",
                    f"sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.INFERENCE_LATENCY_SECONDS.count}[5m]))",
                ),
                RunbookQuery("Cache miss ratio", recording.MODEL_CACHE_MISS_RATIO.record),
            ),
            rationale=(
                "Reads the p99 recording rule (5m rate window); a service with no requests has no p99 and stays silent."
            ),
        ),
    )


def availability_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    up = f'{catalog.UP.name}{{service="{cfg.training_service}"}}'
    loading, cache_miss = cfg.thresholds.model_loading_failures_per_second, cfg.thresholds.model_cache_miss_ratio
    window = event_window_seconds(cfg)
    failure_labels = (*JOB_LABELS, "error_type")
    recoveries = cfg.thresholds.training_recoveries_count
    window_text = duration(RECOVERIES_WINDOW_SECONDS)
    return (
        AlertRule(
            name="TrainingJobKeepsRecovering",
            group=AVAILABILITY_GROUP,
            severity=Severity.HIGH,
            expr=recoveries_expr(cfg),
            for_seconds=0,
            summary=(
                f"A training job has rolled back or restarted from a checkpoint {recoveries.text} or more "
                f"within {window_text}."
            ),
            description=(
                f'{_JOB} rolled back or restarted {{{{ printf "%.0f" $value }}}} times within the last {window_text} '
                f"(at least {recoveries.short}): each recovery redoes the work since its checkpoint."
            ),
            impact=(
                "The job spends its GPUs redoing lost work and is running out of retries: the rollback budget "
                "or the Job's backoffLimit ends it next"
            ),
            action=(
                "Rollbacks (non-finite loss): check the learning rate, its schedule and warm-up, gradient "
                "clipping and the data of the steps before each rollback (the log line carries the trace id)",
                "Restarts: read the failed pods' exit codes and last log lines (a GPU, collective or "
                "out-of-memory error) and the nodes they ran on",
                "Stop the job rather than let it spend its remaining budget if the cause is not transient",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                RunbookQuery(
                    "Rollbacks of the job in the last hour, per pod",
                    f"sum by (pod) (increase({catalog.TRAINING_ROLLBACKS_TOTAL.name}{_ONE_JOB}[1h]))",
                ),
                RunbookQuery(
                    "Pods of the job that resumed from a checkpoint",
                    f"max by (pod) (last_over_time({catalog.TRAINING_RESUMED.name}{_ONE_JOB}[1h])) > 0",
                ),
                RunbookQuery("Rollbacks the job has left", f"{catalog.TRAINING_ROLLBACK_BUDGET.name}{_ONE_JOB}"),
                RunbookQuery(
                    "Work lost to them (seconds of redone compute)",
                    f"sum (increase({catalog.TRAINING_PHASE_SECONDS_TOTAL.name}"
                    f'{{job_id="<job_id>", phase="lost_work"}}[1h]))',
                ),
            ),
            rationale=(
                "One rollback or one restart is what remediation and the Job's backoffLimit are for; the same "
                f"job needing {recoveries.short} within {window_text} is not recovering but repeating a failure, "
                "while it still has budget left. No `for`: each recovery is an event. It resolves once the "
                f"recoveries are older than {window_text}. Restarts are counted per pod (the job template's "
                "pods never restart in place): a worker that torchrun restarts inside its pod is not counted."
            ),
        ),
        AlertRule(
            name="TrainingJobFailed",
            group=AVAILABILITY_GROUP,
            severity=Severity.HIGH,
            expr=counter_increased(catalog.TRAINING_FAILURES_TOTAL, window, failure_labels),
            for_seconds=0,
            summary="A training job ended with an error.",
            description=(
                f"{_JOB} failed with a {{{{ $labels.error_type }}}} error within the last {duration(window)}."
            ),
            impact="The job stopped: its work since the last good checkpoint is lost until it is restarted",
            action=(
                "Read the job's last log lines (the error and its traceback)",
                "oom: lower the batch size or use gradient accumulation; nan: lower the learning rate",
                "io or timeout: check storage, the network and the data source, then restart from the last "
                "good checkpoint",
            ),
            locating_labels=failure_labels,
            queries=(
                RunbookQuery(
                    "Failures by error type in the last day",
                    f"sum by (model_type, job_id, error_type) (increase({catalog.TRAINING_FAILURES_TOTAL.name}[1d]))",
                ),
                RunbookQuery(
                    "The job's last good checkpoint (step)",
                    f"{catalog.CHECKPOINT_LAST_GOOD_STEP.name}{_ONE_JOB}",
                ),
                RunbookQuery(
                    "NaN values before the failure", f"increase({catalog.TRAINING_NAN_COUNT.name}{_ONE_JOB}[1h])"
                ),
            ),
            rationale=(
                "The trainer library counts the exception that ends a job (`with metrics.job(...)`) by its error "
                "type and flushes it to Prometheus before the process exits. An event, not a level: it fires "
                f"once per failure and resolves {duration(window)} later; the job's restart is the operator's "
                "(or the remediation's) call."
            ),
        ),
        AlertRule(
            name="MLTrainingServiceDown",
            group=AVAILABILITY_GROUP,
            severity=Severity.HIGH,
            expr=f"max by (namespace, service) ({up}) == 0\nor\nabsent({up})",
            for_seconds=SERVICE_DOWN_FOR_SECONDS,
            summary="The ML training service has been unreachable for 30 seconds.",
            description=(
                "No scrape target of {{ $labels.service }} has answered for 30s"
                "{{ if $labels.namespace }} in namespace {{ $labels.namespace }}"
                "{{ else }}: no target is discovered at all{{ end }}."
            ),
            impact="No training job can be started, monitored or stopped; model loading through the service fails",
            action=(
                "Check the service's pods and their recent events",
                "Read the logs of the last crashed container",
                "Check the scrape target's error in Prometheus (Status > Targets)",
                "Roll back the latest deployment if it started the outage",
            ),
            locating_labels=("namespace", "service"),
            queries=(
                RunbookQuery("Scrape health of every target of the service", up),
                RunbookQuery("How often the targets went up or down in the last hour", f"changes({up}[1h])"),
            ),
            rationale=(
                "Down means every target of the service in a namespace fails its scrape (one bad replica "
                "is not an outage), or no target is discovered at all (`absent`, which carries only the "
                "`service` label). Inhibits the warnings the outage causes (Alertmanager)."
            ),
        ),
        AlertRule(
            name="ModelLoadingFailures",
            group=AVAILABILITY_GROUP,
            severity=Severity.HIGH,
            expr=(
                counter_rate(
                    catalog.MODEL_LOADING_FAILURES_TOTAL, LOADING_FAILURES_WINDOW_SECONDS, SERVICE_MODEL_LABELS
                )
                + f" > {loading.promql}"
            ),
            for_seconds=60,
            summary=f"Models fail to load more than {loading.text}.",
            description=(
                f"{_ON_SERVICE} fails to load {{{{ $labels.model_type }}}} models "
                f'{{{{ printf "%.2f" $value }}}} times per second, above {loading.short}.'
            ),
            impact="Requests for the model fail or fall back to an old model version",
            action=(
                "Read the failures by error type",
                "Check that the model artifact exists in storage and is readable",
                "Check S3 errors and storage usage",
                "Pin the last model version that loaded",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery(
                    "Failures per second by error type",
                    f"sum by (service, model_type, error_type) (rate({catalog.MODEL_LOADING_FAILURES_TOTAL.name}[5m]))",
                ),
                RunbookQuery(
                    "S3 errors by operation",
                    f"sum by (service, operation, error_type) (rate({catalog.S3_ERRORS_TOTAL.name}[5m]))",
                ),
            ),
            rationale=(
                f"A 2m rate window and 1m `for` make a steady {loading.value * 2:g} failures/s fire in about two "
                "minutes, within the 30s-2m response time of high-severity alerts."
            ),
        ),
        AlertRule(
            name="ModelCacheMissesHigh",
            group=AVAILABILITY_GROUP,
            severity=Severity.WARNING,
            expr=f"{recording.MODEL_CACHE_MISS_RATIO.record} > {cache_miss.promql}",
            for_seconds=300,
            summary=f"More than {cache_miss.text} of model cache lookups have been missing for 5 minutes.",
            description=(
                f"{{{{ $value | humanizePercentage }}}} of {{{{ $labels.model_type }}}} model cache lookups on "
                f"{_ON_SERVICE} missed over the last 5m, above {cache_miss.short}."
            ),
            impact="Cache misses load models from storage: inference latency and storage traffic rise",
            action=(
                "Check whether the cache was restarted or resized recently",
                "Check the number of distinct models requested",
                "Increase the cache size if the working set outgrew it",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery("Miss ratio per service and model", recording.MODEL_CACHE_MISS_RATIO.record),
                RunbookQuery(
                    "Lookups per second",
                    f"sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.MODEL_CACHE_HITS_TOTAL.name}[5m]) "
                    f"+ rate({catalog.MODEL_CACHE_MISSES_TOTAL.name}[5m]))",
                ),
            ),
            rationale="Inhibited while MLTrainingServiceDown fires (Alertmanager).",
        ),
    )
