"""Data pipeline panels: the batches the jobs consume and how long loading one takes. `model` is
the dashboard's model-type matcher."""

from __future__ import annotations

from dashboards.panels import Common, PanelBuilder, Query, duration_heatmap, sum_rate, timeseries
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec


def batches_per_second(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Batches per Second", "Data batches the training jobs consume per second.", "cps", w=w, min=0),
        [Query(sum_rate(catalog.TRAINING_DATA_BATCHES_TOTAL, ("model_type",), (model,)), "{{model_type}}")],
    )


def batches_processed(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Batches Processed", "Data batches processed in each rate interval.", "short", w=w, min=0),
        [
            Query(
                promql.aggregate(
                    "sum", ("model_type",), promql.increase(catalog.TRAINING_DATA_BATCHES_TOTAL, (model,))
                ),
                "{{model_type}}",
            )
        ],
        bars=True,
        stacked=True,
        fill_opacity=60,
    )


def _load_quantiles(title: str, description: str, quantiles: tuple[float, ...], model: str, w: int) -> PanelBuilder:
    """Quantiles of the time to load a batch per model type (from the recorded bucket rates)."""
    record = rec.TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M.record
    return timeseries(
        Common(title, description, "s", w=w),
        [
            Query(
                promql.recorded_quantile(q, record, (model,), ("model_type",)), f"p{round(q * 100)} {{{{model_type}}}}"
            )
            for q in quantiles
        ],
    )


def data_load_seconds(model: str, *, w: int) -> PanelBuilder:
    return _load_quantiles(
        "Data Load Seconds", "Median and 95th percentile time to load a batch.", (0.5, 0.95), model, w
    )


def data_loading_p95(model: str, *, w: int) -> PanelBuilder:
    return _load_quantiles("Data Loading Performance", "95th percentile time to load a batch.", (0.95,), model, w)


def data_load_seconds_histogram(model: str, *, w: int) -> PanelBuilder:
    return duration_heatmap(
        "Data Load Seconds Histogram",
        "Distribution of batch loading durations over time.",
        catalog.TRAINING_DATA_LOADING_SECONDS,
        (model,),
        w=w,
    )
