"""Cross-validation fold panels: how far each job's folds are, how fast they finish, what each
fold reached and took. `model` is the dashboard's model-type matcher, `fold` its fold matcher."""

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
    bar_gauge,
    sum_rate,
    timeseries,
)
from foxhunt_trainer.contract import catalog
from observability import promql

FOLD_LEGEND = "{{model_type}} {{job_id}} fold {{fold}}"


def fold_progress(model: str, *, w: int) -> PanelBuilder:
    per_job = ("model_type", "job_id")
    folds_done = promql.aggregate("count", per_job, promql.gauge(catalog.TRAINING_FOLD_LOSS, (model,)))
    folds_planned = promql.aggregate("max", per_job, promql.gauge(catalog.TRAINING_FOLDS_PLANNED, (model,)))
    return bar_gauge(
        Common(
            "Fold Progress",
            "Folds that reported results, as a share of the folds the job plans.",
            "percent",
            w=w,
            min=0,
            max=100,
            thresholds=ColourSteps(BLUE, ((50, YELLOW), (100, GREEN))),
        ),
        [Query(f"100 * {folds_done} / {folds_planned}", JOB_LEGEND)],
    )


def folds_completed_per_hour(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Folds Completed per Hour", "Pace of fold completion per model type.", "short", w=w),
        [
            Query(
                f"3600 * {sum_rate(catalog.TRAINING_FOLDS_COMPLETED_TOTAL, ('model_type',), (model,))}",
                "{{model_type}}",
            )
        ],
    )


def best_loss_per_fold(model: str, fold: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Best Loss per Fold",
            "Best training loss (solid) and validation loss (dashed) of each finished fold.",
            "none",
            w=w,
        ),
        [
            Query(promql.gauge(catalog.TRAINING_FOLD_LOSS, (model, fold)), f"{FOLD_LEGEND} loss"),
            Query(promql.gauge(catalog.TRAINING_FOLD_VALIDATION_LOSS, (model, fold)), f"{FOLD_LEGEND} validation"),
        ],
        dashed_refs=("B",),
    )


def fold_duration(model: str, fold: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Fold Duration", "Wall time each fold took.", "s", w=w),
        [Query(promql.gauge(catalog.TRAINING_FOLD_DURATION_SECONDS, (model, fold)), FOLD_LEGEND)],
    )


def epochs_per_fold(model: str, fold: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Epochs per Fold", "Epochs completed within each fold.", "short", w=w),
        [Query(promql.gauge(catalog.TRAINING_FOLD_EPOCH, (model, fold)), FOLD_LEGEND)],
    )
