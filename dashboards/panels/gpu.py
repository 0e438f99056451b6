"""GPU hardware panels (NVML through the poller): temperature and the like, coloured by the alert
thresholds that watch them."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import Common, PanelBuilder, Query, ThresholdStyle, timeseries
from dashboards.threshold_steps import temperature_steps
from observability.thresholds import Thresholds as AlertThresholds


def temperature(th: AlertThresholds, description: str, queries: Sequence[Query], *, w: int) -> PanelBuilder:
    """Core temperature in °C, with the GPUTemperatureHigh threshold drawn as a line."""
    return timeseries(
        Common("GPU Temperature", description, "celsius", w=w, thresholds=temperature_steps(th)),
        queries,
        threshold_style=ThresholdStyle.LINE,
    )
