"""Training error panels: non-finite values, exploding gradients, feature-engineering errors and
failed jobs, per second or counted over the range, red from the first. `model` is the dashboard's
model-type matcher; `job` the matchers of the jobs a panel shows."""

from __future__ import annotations

from dashboards.panels import (
    ERRORS,
    RED_FROM_ONE,
    Common,
    PanelBuilder,
    Query,
    ThresholdStyle,
    legend_of,
    stat,
    sum_rate,
    timeseries,
)
from foxhunt_trainer.contract import catalog
from observability import promql


def _per_second(
    title: str, description: str, metric: catalog.Metric, labels: tuple[str, ...], model: str, w: int
) -> PanelBuilder:
    return timeseries(
        Common(title, description, "cps", w=w, min=0, thresholds=ERRORS),
        [Query(sum_rate(metric, labels, (model,)), legend_of(labels))],
        threshold_style=ThresholdStyle.AREA,
    )


def nan_detected(model: str, *, w: int) -> PanelBuilder:
    return _per_second(
        "NaN Detected",
        "Non-finite values (NaN, infinity) detected per second, by tensor type.",
        catalog.TRAINING_NAN_COUNT,
        ("model_type", "tensor_type"),
        model,
        w,
    )


def gradient_explosions(model: str, *, w: int) -> PanelBuilder:
    return _per_second(
        "Gradient Explosions",
        "Gradient explosion events per second.",
        catalog.TRAINING_GRADIENT_EXPLOSION_TOTAL,
        ("model_type",),
        model,
        w,
    )


def feature_engineering_errors(model: str, *, w: int) -> PanelBuilder:
    return _per_second(
        "Feature Engineering Errors",
        "Feature engineering errors per second, by error type.",
        catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
        ("model_type", "error_type"),
        model,
        w,
    )


def training_failures(model: str, *, w: int) -> PanelBuilder:
    return _per_second(
        "Training Failures",
        "Training jobs that ended with an error, per second, by error type.",
        catalog.TRAINING_FAILURES_TOTAL,
        ("model_type", "error_type"),
        model,
        w,
    )


def _count_in_range(
    title: str,
    description: str,
    metric: catalog.Metric,
    labels: tuple[str, ...],
    matchers: tuple[str, ...],
    legend: str,
    w: int,
) -> PanelBuilder:
    """The most events of a counter in one rate interval of the range (whole events), red from one."""
    count = promql.aggregate("sum", labels, promql.increase(metric, matchers))
    return stat(
        Common(title, description, "short", w=w, thresholds=RED_FROM_ONE),
        [Query(f"ceil({count})", legend)],
        calcs=("max",),
        background=True,
    )


def nan_count(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _count_in_range(
        "NaN Detection Count",
        "CRITICAL: NaN values detected in the selected jobs (most in one rate interval of the range); "
        "red as soon as any appears.",
        catalog.TRAINING_NAN_COUNT,
        (),
        job,
        "NaN",
        w,
    )


def failures_by_type_count(model: str, *, w: int) -> PanelBuilder:
    return _count_in_range(
        "Training Failures by Type",
        "Training failures by error type (most in one rate interval of the range); red if any.",
        catalog.TRAINING_FAILURES_TOTAL,
        ("error_type",),
        (model,),
        "{{error_type}}",
        w,
    )
