"""GPU hardware panels (NVML through the poller): utilization, memory, temperature, power, clocks and
memory bandwidth, coloured by the alert thresholds that watch them. The per-GPU panels draw the
`top` busiest GPUs that `gpus` (the dashboard's GPU matchers, e.g. its `$node`) selects, so a panel
reads at most `top` series per target whatever the selection; the fleet panels read the recorded
fleet medians, sums and extremes (`rec.GPU_EXTREMES` GPUs at most)."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import Common, PanelBuilder, Query, ThresholdStyle, stat, timeseries, worst_now
from dashboards.threshold_steps import gpu_memory_steps, gpu_utilization_steps, temperature_steps
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec
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


# --- the fleet, from the recorded series -------------------------------------------------------------
def fleet_utilization(th: Thresholds, *, w: int) -> PanelBuilder:
    """Fleet median, busiest and idlest GPUs, red outside the band the utilization alerts watch."""
    low, high = th.gpu_utilization_low_percent.short, th.gpu_utilization_high_percent.short
    steps = gpu_utilization_steps(th)
    top = rec.GPU_EXTREMES
    return timeseries(
        Common(
            "GPU Utilization Timeline",
            f"GPU utilization: fleet median, the {top} busiest and the {top} idlest GPUs; red below {low} "
            f"(waste) and above {high} (bottleneck), green from {steps.steps[1][0]:g}% to {high}.",
            "percent",
            w=w,
            min=0,
            max=100,
            thresholds=steps,
        ),
        [
            Query(rec.GPU_UTILIZATION_P50.record, "fleet median"),
            Query(rec.GPU_UTILIZATION_TOP.record, GPU_LEGEND),
            Query(rec.GPU_UTILIZATION_BOTTOM.record, f"{GPU_LEGEND} idle"),
        ],
        fill_opacity=20,
        threshold_style=ThresholdStyle.LINE_AND_AREA,
    )


def fullest_memory_now(th: Thresholds, *, w: int) -> PanelBuilder:
    top = rec.GPU_EXTREMES
    # Per GPU, then only the fullest `top` of them (an instant query: one pass over the fleet's GPUs).
    memory = f"100 * {promql.gauge(catalog.GPU_MEMORY_USED_BYTES)} / {promql.gauge(catalog.GPU_MEMORY_TOTAL_BYTES)}"
    return stat(
        Common(
            "GPU Memory Usage",
            f"Device memory in use on the {top} fullest GPUs now; critical (red) at "
            f"{th.gpu_memory_exhausted_ratio.short}.",
            "percent",
            w=w,
            min=0,
            max=100,
            thresholds=gpu_memory_steps(th),
        ),
        [Query(f"topk({top}, {memory})", GPU_LEGEND, instant=True)],
        background=True,
    )


def fleet_temperature(th: Thresholds, *, w: int) -> PanelBuilder:
    steps = temperature_steps(th)
    return temperature(
        th,
        f"GPU temperature, fleet median and the {rec.GPU_EXTREMES} hottest GPUs: green below "
        f"{steps.steps[0][0]:g} °C, yellow to {th.gpu_temperature_high_celsius.short}, red above.",
        [Query(rec.GPU_TEMPERATURE_P50.record, "fleet median"), Query(rec.GPU_TEMPERATURE_TOP.record, GPU_LEGEND)],
        w=w,
    )


def clock_throttle_reasons(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Clock Throttle Reasons", "GPUs of the fleet with each clock-throttle reason active.", "short", w=w, min=0
        ),
        [Query(rec.GPU_CLOCK_THROTTLE_SUM.record, "{{reason}}")],
        stacked=True,
    )


def sm_and_memory_clocks(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "SM and Memory Clocks",
            "SM clock (solid) and memory clock (dashed) over the fleet: the median GPU and the slowest one.",
            "hertz",
            w=w,
            min=0,
        ),
        [
            Query(rec.GPU_SM_CLOCK_P50.record, "SM median"),
            Query(rec.GPU_SM_CLOCK_MIN.record, "SM slowest GPU"),
            Query(rec.GPU_MEMORY_CLOCK_P50.record, "memory median"),
            Query(rec.GPU_MEMORY_CLOCK_MIN.record, "memory slowest GPU"),
        ],
        dashed_refs=("C", "D"),
    )


def fleet_power_draw_and_limit(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Power Draw vs Limit",
            "Power drawn by all GPUs of the fleet (solid) against the sum of their limits (dashed).",
            "watt",
            w=w,
            min=0,
        ),
        [Query(rec.GPU_POWER_SUM.record, "fleet draw"), Query(rec.GPU_POWER_LIMIT_SUM.record, "fleet limit")],
        dashed_refs=("B",),
    )


def highest_power_draw(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return worst_now(
        "Highest Power Draw",
        f"The {top} GPUs drawing the most power now.",
        "watt",
        promql.aggregate("max", ("node", "gpu_id"), _gpus(catalog.GPU_POWER_WATTS, gpus)),
        top,
        w=w,
    )
