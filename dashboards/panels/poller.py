"""GPU poller panels: the poller's own health per node (NVML reachable, collection time and
failures, GPUs found, driver versions). `nodes` is the dashboard's node matchers (e.g. its
`$node`); a "worst" table lists the `top` worst nodes now."""

from __future__ import annotations

from dashboards.panels import (
    ALL_UP,
    ERRORS,
    RED_FROM_ONE,
    UP_DOWN,
    Common,
    PanelBuilder,
    Query,
    ThresholdStyle,
    prometheus_table,
    stat,
    timeseries,
    worst_now,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec


def _per_node(metric: catalog.Metric, nodes: tuple[str, ...]) -> str:
    """One value per node (a poller pod restarting briefly exports a node twice)."""
    return promql.aggregate("max", ("node",), promql.gauge(metric, nodes))


def _nvml_down(nodes: tuple[str, ...]) -> str:
    return f"{_per_node(catalog.GPU_POLLER_NVML_UP, nodes)} == 0"


def _duration(nodes: tuple[str, ...]) -> str:
    return promql.gauge(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, nodes)


def nodes_with_nvml_down_now(nodes: tuple[str, ...], *, w: int) -> PanelBuilder:
    return stat(
        Common(
            "Nodes with NVML Down",
            "Nodes whose poller could not reach NVML in its last collection.",
            "short",
            w=w,
            thresholds=RED_FROM_ONE,
        ),
        [Query(f"count({_nvml_down(nodes)}) or vector(0)", "NVML down", instant=True)],
        background=True,
    )


def nvml_up_per_node(nodes: tuple[str, ...], *, w: int) -> PanelBuilder:
    return prometheus_table(
        Common(
            "NVML Up per Node",
            "Only the nodes whose poller cannot reach NVML now (value 0); empty while every node is up.",
            "none",
            w=w,
            thresholds=ALL_UP,
            mappings=UP_DOWN,
        ),
        [Query(_nvml_down(nodes), instant=True, format="table")],
    )


def collection_duration(nodes: tuple[str, ...], *, w: int) -> PanelBuilder:
    duration = _duration(nodes)
    return timeseries(
        Common(
            "Collection Duration",
            "Wall time of the pollers' last NVML collection pass: slowest node, 95th percentile and median "
            "over the nodes.",
            "s",
            w=w,
            min=0,
        ),
        [
            Query(promql.aggregate("max", (), duration), "slowest node"),
            Query(f"quantile(0.95, {duration})", "p95"),
            Query(f"quantile(0.5, {duration})", "median"),
        ],
    )


def collection_failures(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Collection Failures",
            "Failed NVML calls or passes per second over the fleet, by reason.",
            "cps",
            w=w,
            min=0,
            thresholds=ERRORS,
        ),
        [Query(rec.GPU_POLLER_COLLECTION_FAILURES_RATE.record, "{{reason}}")],
        threshold_style=ThresholdStyle.AREA,
    )


def slowest_collections(nodes: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return worst_now(
        "Slowest Collections",
        f"The {top} nodes whose last NVML collection took longest.",
        "s",
        promql.aggregate("max", ("node",), _duration(nodes)),
        top,
        w=w,
    )


def most_collection_failures(nodes: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    failures = promql.aggregate("sum", ("node",), promql.rate(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, nodes))
    return worst_now(
        "Most Collection Failures",
        f"The {top} nodes failing the most NVML calls per second now.",
        "cps",
        f"{failures} > 0",
        top,
        w=w,
    )


def gpus_per_node(nodes: tuple[str, ...], *, w: int) -> PanelBuilder:
    devices = _per_node(catalog.GPU_POLLER_DEVICES, nodes)
    return stat(
        Common(
            "GPUs per Node",
            "GPUs the pollers found in their last collection: fleet total and the fewest on any node.",
            "short",
            w=w,
            min=0,
        ),
        [
            Query(promql.aggregate("sum", (), devices), "GPUs in the fleet", instant=True),
            Query(promql.aggregate("min", (), devices), "fewest on a node", instant=True),
        ],
    )


def driver_versions(nodes: tuple[str, ...], *, w: int) -> PanelBuilder:
    return prometheus_table(
        Common("Driver Versions", "Nodes running each NVML, driver and CUDA driver version.", "short", w=w),
        [
            Query(
                promql.aggregate(
                    "count",
                    ("driver_version", "nvml_version", "cuda_driver_version"),
                    promql.gauge(catalog.GPU_DRIVER_INFO, nodes),
                ),
                instant=True,
                format="table",
            )
        ],
    )
