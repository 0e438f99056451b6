"""Training job panels: the jobs' states and resources, as the fleet overview and the job view show
them, and the one-gauge-per-job shape the workload topics share. `model` is the dashboard's
model-type matcher."""

from __future__ import annotations

from dashboards.panels import JOB_LEGEND, Common, PanelBuilder, Query, stat, timeseries
from observability import catalog, promql
from observability.rules import dashboard_recording as rec


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
