"""Data pipeline panels: the batches the jobs consume and how long loading one takes. `model` is
the dashboard's model-type matcher."""

from __future__ import annotations

from dashboards.panels import Common, PanelBuilder, Query, duration_heatmap, sum_rate, timeseries
from observability import catalog, promql
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


def data_load_seconds(model: str, *, w: int) -> PanelBuilder:
    record, legend = rec.TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M.record, "{{model_type}}"
    return timeseries(
        Common("Data Load Seconds", "Median and 95th percentile time to load a batch.", "s", w=w),
        [
            Query(promql.recorded_quantile(q, record, (model,), ("model_type",)), f"p{round(q * 100)} {legend}")
            for q in (0.5, 0.95)
        ],
    )


def data_load_seconds_histogram(model: str, *, w: int) -> PanelBuilder:
    return duration_heatmap(
        "Data Load Seconds Histogram",
        "Distribution of batch loading durations over time.",
        catalog.TRAINING_DATA_LOADING_SECONDS,
        (model,),
        w=w,
    )
