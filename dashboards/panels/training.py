"""Training job panels: the jobs' states, speed, progress and resources, as the fleet overview and the
job view show them, and the one-gauge-per-job shape the workload topics share. `model` is the
dashboard's model-type matcher; `job` the matchers of the jobs a panel shows."""

from __future__ import annotations

from dashboards.panels import (
    BLUE,
    GREEN,
    JOB_LEGEND,
    YELLOW,
    ColourSteps,
    Common,
    PanelBuilder,
    Query,
    gauge,
    stat,
    timeseries,
)
from dashboards.threshold_steps import GOOD_TRAINING_SPEED, training_speed_steps
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec
from observability.thresholds import Thresholds

PROGRESS = ColourSteps(BLUE, ((50, YELLOW), (100, GREEN)))  # blue -> yellow -> green


def per_job(
    title: str,
    description: str,
    metric: catalog.Metric,
    unit: str,
    matchers: tuple[str, ...],
    *,
    w: int,
    min: float | None = None,
    max: float | None = None,
    legend: str = JOB_LEGEND,
) -> PanelBuilder:
    """A gauge the jobs report, one line per job (or per `legend`)."""
    return timeseries(
        Common(title, description, unit, w=w, min=min, max=max), [Query(promql.gauge(metric, matchers), legend)]
    )


def jobs_by_status_now(*, w: int) -> PanelBuilder:
    """Running, pending and failed jobs now (a big number each)."""
    running = promql.gauge(catalog.TRAINING_JOBS_BY_STATUS, (promql.regex_matcher("status", "running|pending|failed"),))
    return stat(
        Common("Training Jobs by Status", "Running, pending and failed training jobs.", "short", w=w),
        [Query(promql.aggregate("sum", ("status",), running), "{{status}}")],
    )


def jobs_by_status_over_time(*, w: int) -> PanelBuilder:
    """Jobs in every state, stacked over time."""
    return timeseries(
        Common(
            "Training Jobs by Status",
            "Training jobs in each state (pending, running, completed, failed, ...).",
            "short",
            w=w,
            min=0,
        ),
        [Query(promql.aggregate("sum", ("status",), promql.gauge(catalog.TRAINING_JOBS_BY_STATUS)), "{{status}}")],
        stacked=True,
    )


def active_workers(model: str, *, w: int) -> PanelBuilder:
    return stat(
        Common("Active Workers", "Training workers running now, per model type.", "short", w=w),
        [
            Query(
                promql.aggregate("sum", ("model_type",), promql.gauge(catalog.TRAINING_ACTIVE_WORKERS, (model,))),
                "{{model_type}}",
            )
        ],
    )


def job_memory_used(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Job Memory Used", "System memory used by each training job.", catalog.TRAINING_MEMORY_USED_BYTES, "bytes",
        (model,), w=w,
    )  # fmt: skip


def job_cpu_usage(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Job CPU Usage", "CPU used by each training job (100% is one core).", catalog.TRAINING_CPU_USAGE_PERCENT,
        "percent", (model,), w=w, min=0,
    )  # fmt: skip


def job_duration(model: str, *, w: int) -> PanelBuilder:
    """How long each job has run, against the recorded quantiles of the jobs that ended."""
    job_duration = rec.TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H
    # Finished jobs: end - start; running ones: now - start.
    by_job = ("model_type", "job_id")
    started = promql.aggregate("max", by_job, promql.gauge(catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS, (model,)))
    ended = promql.aggregate("max", by_job, promql.gauge(catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS, (model,)))
    job_elapsed = f"({ended} - {started})\nor\n(time() - {started})"
    return timeseries(
        Common(
            "Training Job Duration",
            "How long each job has run (solid; a finished job's line holds its duration until its pod "
            "is gone) and the median and 95th percentile duration of the jobs that ended in the last "
            "hour, per model type (dashed).",
            "s",
            w=w,
            min=0,
        ),
        [
            Query(job_elapsed, JOB_LEGEND),
            *(
                Query(
                    promql.recorded_quantile(q, job_duration.record, (model,), ("model_type",)),
                    f"p{round(q * 100)} {{{{model_type}}}} ended",
                )
                for q in (0.5, 0.95)
            ),
        ],
        dashed_refs=("B", "C"),
    )


def speed_gauge(th: Thresholds, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    """Epochs per second of each job, red below the TrainingSlowdown threshold."""
    slow = th.training_slowdown_epochs_per_second
    return gauge(
        Common(
            "Training Speed",
            f"Epochs per second; below {slow.promql} is the TrainingSlowdown "
            f"warning, {max(GOOD_TRAINING_SPEED, slow.value):g} is good.",
            "none",
            w=w,
            min=0,
            max=1,
            thresholds=training_speed_steps(th),
            decimals=2,
        ),
        [Query(promql.gauge(catalog.TRAINING_EPOCHS_PER_SECOND, job), JOB_LEGEND)],
    )


def progress_gauge(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return gauge(
        Common(
            "Training Progress Gauge",
            "Completion of each selected job, 0 to 100%.",
            "percent",
            w=w,
            min=0,
            max=100,
            thresholds=PROGRESS,
        ),
        [Query(promql.gauge(catalog.TRAINING_PROGRESS_PERCENT, job), JOB_LEGEND)],
    )


def current_epoch(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return stat(
        Common("Current Epoch", "Epoch each selected job is training.", "none", w=w, decimals=0),
        [Query(promql.gauge(catalog.TRAINING_CURRENT_EPOCH, job), JOB_LEGEND)],
    )
