"""GPU hardware panels (NVML through the poller): utilization, memory, temperature, power and
memory bandwidth, coloured by the alert thresholds that watch them. The per-GPU panels draw the
`top` busiest GPUs that `gpus` (the dashboard's GPU matchers, e.g. its `$node`) selects, so a panel
reads at most `top` series per target whatever the selection."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import Common, PanelBuilder, Query, ThresholdStyle, timeseries
from dashboards.threshold_steps import temperature_steps
from observability import catalog, promql
from observability.thresholds import Thresholds

GPU_LEGEND = "{{node}} GPU {{gpu_id}}"


def _gpus(metric: catalog.Metric, gpus: tuple[str, ...]) -> str:
    return promql.gauge(metric, gpus)


def busiest(metric: catalog.Metric, gpus: tuple[str, ...], top: int, suffix: str = "") -> Query:
    """The `top` GPUs with the highest value of a gauge, named by node and GPU."""
    return Query(f"topk({top}, {_gpus(metric, gpus)})", f"{GPU_LEGEND}{suffix}")


def temperature(th: Thresholds, description: str, queries: Sequence[Query], *, w: int) -> PanelBuilder:
    """Core temperature in °C, with the GPUTemperatureHigh threshold drawn as a line."""
    return timeseries(
        Common("GPU Temperature", description, "celsius", w=w, thresholds=temperature_steps(th)),
        queries,
        threshold_style=ThresholdStyle.LINE,
    )


def hottest_temperature(th: Thresholds, gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return temperature(
        th,
        f"Core temperature of the {top} hottest selected GPUs; throttling risk above "
        f"{th.gpu_temperature_high_celsius.short}.",
        [busiest(catalog.GPU_TEMPERATURE_CELSIUS, gpus, top)],
        w=w,
    )


def utilization_busiest_and_idlest(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "GPU Utilization",
            f"Share of time a kernel ran: the {top} busiest (solid) and {top} idlest (dashed) of the selected GPUs.",
            "percent",
            w=w,
            min=0,
            max=100,
        ),
        [
            busiest(catalog.GPU_UTILIZATION_PERCENT, gpus, top),
            Query(f"bottomk({top}, {_gpus(catalog.GPU_UTILIZATION_PERCENT, gpus)})", f"{GPU_LEGEND} idle"),
        ],
        dashed_refs=("B",),
    )


def memory_used_and_total(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "GPU Memory Used and Total",
            f"Device memory used by the {top} fullest selected GPUs (solid) against the largest GPU's total (dashed).",
            "bytes",
            w=w,
            min=0,
        ),
        [
            busiest(catalog.GPU_MEMORY_USED_BYTES, gpus, top, " used"),
            Query(promql.aggregate("max", (), _gpus(catalog.GPU_MEMORY_TOTAL_BYTES, gpus)), "total"),
        ],
        dashed_refs=("B",),
    )


def power_draw_and_limit(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "GPU Power Draw",
            f"Power drawn by the {top} hungriest selected GPUs (solid) against the highest enforced limit (dashed).",
            "watt",
            w=w,
            min=0,
        ),
        [
            busiest(catalog.GPU_POWER_WATTS, gpus, top, " draw"),
            Query(promql.aggregate("max", (), _gpus(catalog.GPU_POWER_LIMIT_WATTS, gpus)), "limit"),
        ],
        dashed_refs=("B",),
    )


def memory_bandwidth_utilization(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "GPU Memory Bandwidth Utilization",
            f"Share of time device memory was read or written, on the {top} busiest selected GPUs.",
            "percent",
            w=w,
            min=0,
            max=100,
        ),
        [busiest(catalog.GPU_MEMORY_UTILIZATION_PERCENT, gpus, top)],
    )
