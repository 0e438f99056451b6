"""Training error panels: non-finite values, exploding gradients, feature-engineering errors and
failed jobs, per second, red from the first. `model` is the dashboard's model-type matcher."""

from __future__ import annotations

from dashboards.panels import ERRORS, Common, PanelBuilder, Query, ThresholdStyle, legend_of, sum_rate, timeseries
from observability import catalog


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
