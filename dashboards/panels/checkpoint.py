"""Checkpoint panels: saves, failures, save time, size, the last good checkpoint a rollback
returns to, and the rollbacks, restarts and lost work of a job. `model` is the dashboard's
model-type matcher; `job` the matchers of one job (model type and `$job_id`)."""

from __future__ import annotations

from dashboards.panels import ERRORS, GREEN, JOB_LEGEND, RED, Common, PanelBuilder, Query, sum_rate, timeseries
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec


def saves(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Checkpoint Saves", "Successful checkpoint saves per second.", "cps", w=w, min=0),
        [Query(sum_rate(catalog.CHECKPOINT_SAVES_TOTAL, ("model_type",), (model,)), "{{model_type}}")],
    )


def failures(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Checkpoint Failures", "Failed checkpoint saves per second, by error type.", "cps", w=w, min=0,
            thresholds=ERRORS,
        ),
        [
            Query(
                sum_rate(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL, ("model_type", "error_type"), (model,)),
                "{{model_type}} {{error_type}}",
            )
        ],
        colours_by_ref={"A": RED},
    )  # fmt: skip


def saves_and_failures(matchers: tuple[str, ...], *, w: int) -> PanelBuilder:
    """Saves (green) and failures (red) per second in one panel, per model type."""

    def per_model(metric: catalog.Metric) -> str:
        return sum_rate(metric, ("model_type",), matchers)

    return timeseries(
        Common(
            "Checkpoint Creation Events",
            "Checkpoint saves per second (green) and failures per second (red).",
            "cps",
            w=w,
            min=0,
        ),
        [
            Query(per_model(catalog.CHECKPOINT_SAVES_TOTAL), "saves {{model_type}}"),
            Query(per_model(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL), "failures {{model_type}}"),
        ],
        colours_by_ref={"A": GREEN, "B": RED},
    )


def save_duration(model: str, quantiles: tuple[float, ...], description: str, *, w: int) -> PanelBuilder:
    """Quantiles of the checkpoint save time per model type (from the recorded bucket rates)."""
    record = rec.CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M.record
    return timeseries(
        Common("Checkpoint Save Duration", description, "s", w=w),
        [
            Query(
                promql.recorded_quantile(q, record, (model,), ("model_type",)), f"p{round(q * 100)} {{{{model_type}}}}"
            )
            for q in quantiles
        ],
    )


def size(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Checkpoint Size", "Size of each job's latest checkpoint.", "bytes", w=w, min=0),
        [Query(promql.gauge(catalog.CHECKPOINT_SIZE_BYTES, (model,)), JOB_LEGEND)],
    )


def since_last_good(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Since Last Good Checkpoint",
            "Time since each job's latest good checkpoint (saved without error, finite weights): the "
            "work a rollback would lose.",
            "s",
            w=w,
            min=0,
        ),
        [Query(f"time() - {promql.gauge(catalog.CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS, (model,))}", JOB_LEGEND)],
    )


def last_good_step(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Last Good Checkpoint Step",
            "Training step of each job's latest good checkpoint: where a rollback resumes.",
            "short",
            w=w,
            min=0,
        ),
        [Query(promql.gauge(catalog.CHECKPOINT_LAST_GOOD_STEP, (model,)), JOB_LEGEND)],
    )


def rollbacks(model: str, *, w: int) -> PanelBuilder:
    """Rollbacks of non-finite training to the last good checkpoint, and the rollbacks each job has left."""
    return timeseries(
        Common(
            "Rollbacks (Non-Finite Training)",
            "Rollbacks to the last good checkpoint in each rate interval (the learning rate lowered each time), "
            "and the rollbacks each job has left before non-finite training ends it.",
            "short",
            w=w,
            min=0,
            thresholds=ERRORS,
        ),
        [
            Query(
                promql.aggregate(
                    "sum", ("model_type", "job_id"), promql.increase(catalog.TRAINING_ROLLBACKS_TOTAL, (model,))
                ),
                "rollbacks " + JOB_LEGEND,
            ),
            Query(promql.gauge(catalog.TRAINING_ROLLBACK_BUDGET, (model,)), "left " + JOB_LEGEND),
        ],
    )


def job_recoveries(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    """What TrainingJobKeepsRecovering counts, for the selected job: its rollbacks, and its pods
    that resumed from a checkpoint (restarted pods)."""
    # The ranks of a job roll back together: the job's rollbacks are its busiest process's.
    rolled_back = promql.aggregate("max", ("job_id",), promql.increase(catalog.TRAINING_ROLLBACKS_TOTAL, job))
    resumed_pods = promql.aggregate(
        "count",
        ("job_id",),
        promql.aggregate("max", ("job_id", "pod"), promql.gauge(catalog.TRAINING_RESUMED, job)) + " > 0",
    )
    return timeseries(
        Common(
            "Rollbacks and Restarts of $job_id",
            "Rollbacks of $job_id to its last good checkpoint in each rate interval, and its pods running that "
            "resumed from a checkpoint (restarted pods). Rollbacks plus restarts within an hour at the "
            "trainingRecoveriesCount threshold fire TrainingJobKeepsRecovering.",
            "short",
            w=w,
            min=0,
            thresholds=ERRORS,
        ),
        [Query(rolled_back, "{{job_id}} rollbacks"), Query(resumed_pods, "{{job_id}} resumed pods")],
        colours_by_ref={"A": RED},
    )


def job_lost_work(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    """The share of the selected job's time spent redoing steps it had done before a rollback."""
    lost = promql.rate(catalog.TRAINING_PHASE_SECONDS_TOTAL, (*job, 'phase="lost_work"'))
    return timeseries(
        Common(
            "Lost Work of $job_id",
            "Share of each rank's time that $job_id spends redoing steps it had already done before a rollback "
            "(the lost_work phase), averaged over its ranks.",
            "percentunit",
            w=w,
            min=0,
            max=1,
        ),
        [Query(promql.aggregate("avg", ("job_id",), lost), "{{job_id}} lost work")],
        colours_by_ref={"A": RED},
    )
