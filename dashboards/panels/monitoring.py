"""Monitoring health panels: is the monitoring itself blind anywhere? GPU pollers against GPU nodes,
nodes whose poller cannot reach NVML, GPUs enumerated against answering, the project's rule groups'
evaluation cost and the pollers' scrape duration (what the `ml_monitoring_health` alerts watch).
Fleet totals only, no series per node."""

from __future__ import annotations

from dashboards.panels import (
    GREEN,
    RED,
    RED_FROM_ONE,
    YELLOW,
    ColourSteps,
    Common,
    PanelBuilder,
    Query,
    ThresholdStyle,
    prometheus_table,
    timeseries,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig
from observability.rules import health, project_group_names


def _gpu_capacity() -> str:
    return promql.gauge(catalog.KUBE_NODE_STATUS_CAPACITY, (promql.matcher("resource", health.GPU_RESOURCE),))


def _pollers_up(cfg: ObservabilityConfig) -> str:
    return promql.gauge(catalog.UP, (promql.matcher("service", cfg.gpu_poller_service),))


def pollers_up_vs_gpu_nodes(cfg: ObservabilityConfig, *, w: int) -> PanelBuilder:
    if cfg.kube_state_metrics:
        gpu_nodes = Query(f"count({_gpu_capacity()} > 0)", "GPU nodes (nvidia.com/gpu capacity)")
    else:
        nvml_up = catalog.GPU_POLLER_NVML_UP.name
        gpu_nodes = Query(f"count(max by (node) (last_over_time({nvml_up}[1h])))", "GPU nodes seen in the last hour")
    return timeseries(
        Common(
            "Pollers Up vs GPU Nodes",
            "GPU poller targets answering against the GPU nodes"
            + (
                " (nodes with nvidia.com/gpu capacity, from kube-state-metrics)"
                if cfg.kube_state_metrics
                else " (nodes whose poller reported in the last hour)"
            )
            + ": a gap is a node whose GPUs nobody watches (GPUPollerDown).",
            "short",
            w=w,
            min=0,
        ),
        [Query(f"sum({_pollers_up(cfg)})", "pollers up"), gpu_nodes],
    )


def nodes_with_nvml_down_over_time(*, w: int) -> PanelBuilder:
    nvml_up = catalog.GPU_POLLER_NVML_UP.name
    return timeseries(
        Common(
            "Nodes with NVML Down",
            "GPU nodes whose poller runs but cannot reach NVML (NVMLDown after 5 minutes).",
            "short",
            w=w,
            min=0,
            thresholds=RED_FROM_ONE,
        ),
        [Query(f"count({promql.aggregate('max', ('node',), nvml_up)} == 0) or vector(0)", "NVML down")],
        threshold_style=ThresholdStyle.AREA,
    )


def gpus_enumerated_vs_answering(cfg: ObservabilityConfig, *, w: int) -> PanelBuilder:
    enumerated = promql.aggregate("max", ("node",), promql.gauge(catalog.GPU_POLLER_DEVICES_ENUMERATED))
    answering = promql.aggregate("max", ("node",), promql.gauge(catalog.GPU_POLLER_DEVICES))
    gpu_counts = [
        Query(promql.aggregate("sum", (), enumerated), "enumerated by NVML"),
        Query(promql.aggregate("sum", (), answering), "answering"),
    ]
    if cfg.kube_state_metrics:
        gpu_counts.append(Query(f"sum({_gpu_capacity()})", "capacity (kube-state-metrics)"))
    return timeseries(
        Common(
            "GPUs Enumerated vs Answering",
            "GPUs NVML enumerates over the fleet against those the pollers read: the difference is GPUs "
            "present but lost or failing (GPUsNotAnswering).",
            "short",
            w=w,
            min=0,
        ),
        gpu_counts,
    )


def slowest_rule_groups(cfg: ObservabilityConfig, top: int, *, w: int) -> PanelBuilder:
    """The project's rule groups whose last evaluation took the largest share of their interval."""
    slow_group = cfg.thresholds.rule_group_slow_interval_ratio
    groups = health.rule_group_matcher(project_group_names(cfg))
    last = promql.gauge(catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS, (groups,))
    interval = promql.gauge(catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS, (groups,))
    share = f"{promql.aggregate('max', ('rule_group',), last)} / {promql.aggregate('max', ('rule_group',), interval)}"
    return prometheus_table(
        Common(
            "Slowest Rule Groups (share of interval)",
            f"The {top} rule groups of this project whose last evaluation took the largest share of "
            f"their interval: above {slow_group.short} is the early warning that the fleet is outgrowing "
            "Prometheus (RuleGroupSlow). Needs Prometheus to scrape itself.",
            "percentunit",
            w=w,
            thresholds=ColourSteps(GREEN, ((slow_group.value / 2, YELLOW), (slow_group.value, RED))),
        ),
        [Query(f"topk({top}, {share})", instant=True, format="table")],
        hidden_columns=("Time",),
    )


def poller_scrape_duration(cfg: ObservabilityConfig, *, w: int) -> PanelBuilder:
    scrape = promql.gauge(catalog.SCRAPE_DURATION_SECONDS, (promql.matcher("service", cfg.gpu_poller_service),))
    return timeseries(
        Common(
            "Poller Scrape Duration",
            "How long Prometheus' scrapes of the GPU pollers take: slowest poller and 95th percentile over the fleet.",
            "s",
            w=w,
            min=0,
        ),
        [Query(promql.aggregate("max", (), scrape), "slowest poller"), Query(f"quantile(0.95, {scrape})", "p95")],
    )
