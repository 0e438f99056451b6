"""Checkpoint panels: saves, failures, save time, size, and the last good checkpoint a rollback
returns to. `model` is the dashboard's model-type matcher."""

from __future__ import annotations

from dashboards.panels import ERRORS, GREEN, JOB_LEGEND, RED, Common, PanelBuilder, Query, sum_rate, timeseries
from observability import catalog, promql
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
