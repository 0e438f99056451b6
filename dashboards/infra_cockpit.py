"""Infra cockpit: the health of what this project deploys.

For the platform / SRE on call: are the targets scraped, is the monitoring itself healthy, are the
GPU pollers and the GPUs healthy, is the fleet's hardware used. Panels shared with other
dashboards come from the topic modules (`dashboards/panels/<topic>.py`).

Scrape targets of the annotated platform services, the training jobs and the GPU poller; the
monitoring's own health (pollers up against GPU nodes, NVML down, GPUs enumerated against
answering, the project's rule groups' cost, the pollers' scrape duration: what the
`ml_monitoring_health` alerts watch); the poller's own health per node (NVML reachable, collection
time and failures, driver versions); GPU hardware health; the fleet's profiling figures (GPM: SM
and tensor activity, interconnect traffic); GPU allocation and the fleet's training efficiency
(GPU-hours by bottleneck verdict, the jobs wasting the most GPU-hours, GPU models without a known
peak); and the "Trace Health" row from Tempo's metrics generator.
"""

from __future__ import annotations

from typing import Any

from dashboards import panels, variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import ERRORS, GREEN, RED, YELLOW, ColourSteps, Common, Query, efficiency, traces
from observability import alert_links, catalog, promql
from observability.config import ObservabilityConfig
from observability.rules import dashboard_recording as rec
from observability.rules import health, jobs, project_group_names
from observability.rules.rule_types import RecordingRule

UID = alert_links.INFRA_COCKPIT_UID
TITLE = "Foxhunt Infra Cockpit"

NODE = promql.variable_matcher("node", "node")
UP_DOWN = {"1": ("UP", GREEN), "0": ("DOWN", RED)}
ALL_UP = ColourSteps(RED, ((1, GREEN),))
# How many members a "worst" table lists.
WORST = 10


def _up(services: tuple[str, ...]) -> str:
    return promql.gauge(catalog.UP, (promql.regex_matcher("service", promql.any_of(services)),))


def _targets_up(title: str, description: str, service: str) -> panels.PanelBuilder:
    """Scrape targets of one service: how many answer and how many do not."""
    up = promql.gauge(catalog.UP, (promql.matcher("service", service),))
    return panels.stat(
        Common(title, description, "short", w=6, h=6, thresholds=ColourSteps(GREEN)),
        [Query(f"sum({up})", "up"), Query(f"count({up} == 0) or vector(0)", "down")],
    )


def _scrape_targets(cfg: ObservabilityConfig) -> Row:
    every_service = (*cfg.platform_services, cfg.training_job_service, cfg.gpu_poller_service)
    platform = cfg.platform_services or (cfg.training_service,)
    return Row(
        "Scrape Targets",
        [
            panels.stat(
                Common(
                    "Platform Services Up",
                    "Lowest scrape health over each annotated platform service's targets (UP only if all answer).",
                    "none",
                    w=12,
                    h=6,
                    thresholds=ALL_UP,
                    mappings=UP_DOWN,
                ),
                [Query(promql.aggregate("min", ("service",), _up(platform)), "{{service}}")],
                background=True,
            ),
            _targets_up(
                "Training Job Targets",
                "Training job pods whose /metrics answer (up) and do not (down).",
                cfg.training_job_service,
            ),
            _targets_up(
                "GPU Poller Targets",
                "GPU poller pods whose /metrics answer (up) and do not (down).",
                cfg.gpu_poller_service,
            ),
            panels.timeseries(
                Common(
                    "Targets Up by Service", "Scrape targets answering, per service, over time.", "short", w=12, min=0
                ),
                [Query(promql.aggregate("sum", ("service",), _up(every_service)), "{{service}}")],
            ),
            panels.prometheus_table(
                Common(
                    "Targets Down",
                    "Every scrape target of the project's services that did not answer its last scrape.",
                    "none",
                    w=12,
                ),
                [Query(f"{_up(every_service)} == 0", instant=True, format="table")],
                hidden_columns=("Value", "__name__"),
            ),
        ],
    )


def _node_gauge(metric: catalog.Metric) -> str:
    """One value per node (a poller pod restarting briefly exports a node twice)."""
    return promql.aggregate("max", ("node",), promql.gauge(metric, (NODE,)))


def _worst(title: str, description: str, unit: str, expr: str, w: int = 8) -> panels.PanelBuilder:
    """The worst members now: an instant `topk` table, bounded and free of the churn a range
    topk draws (every member that was in the top k at any step)."""
    return panels.prometheus_table(
        Common(title, description, unit, w=w),
        [Query(f"topk({WORST}, {expr})", instant=True, format="table")],
        hidden_columns=("Time",),
    )


# How many rule groups the "worst groups" panel lists.
WORST_GROUPS = 5


def _monitoring_health(cfg: ObservabilityConfig) -> Row:
    """Is the monitoring itself blind anywhere? Fleet totals only (no series per node)."""
    slow_group = cfg.thresholds.rule_group_slow_interval_ratio
    pollers = promql.gauge(catalog.UP, (promql.matcher("service", cfg.gpu_poller_service),))
    nvml_up = catalog.GPU_POLLER_NVML_UP.name
    capacity = promql.gauge(catalog.KUBE_NODE_STATUS_CAPACITY, (promql.matcher("resource", health.GPU_RESOURCE),))
    if cfg.kube_state_metrics:
        gpu_nodes = Query(f"count({capacity} > 0)", "GPU nodes (nvidia.com/gpu capacity)")
    else:
        gpu_nodes = Query(f"count(max by (node) (last_over_time({nvml_up}[1h])))", "GPU nodes seen in the last hour")
    enumerated = promql.aggregate("max", ("node",), promql.gauge(catalog.GPU_POLLER_DEVICES_ENUMERATED))
    answering = promql.aggregate("max", ("node",), promql.gauge(catalog.GPU_POLLER_DEVICES))
    gpu_counts = [
        Query(promql.aggregate("sum", (), enumerated), "enumerated by NVML"),
        Query(promql.aggregate("sum", (), answering), "answering"),
    ]
    if cfg.kube_state_metrics:
        gpu_counts.append(Query(f"sum({capacity})", "capacity (kube-state-metrics)"))
    groups = health.rule_group_matcher(project_group_names(cfg))
    last = promql.gauge(catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS, (groups,))
    interval = promql.gauge(catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS, (groups,))
    share = f"{promql.aggregate('max', ('rule_group',), last)} / {promql.aggregate('max', ('rule_group',), interval)}"
    scrape = promql.gauge(catalog.SCRAPE_DURATION_SECONDS, (promql.matcher("service", cfg.gpu_poller_service),))
    return Row(
        "Monitoring Health",
        [
            panels.timeseries(
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
                    w=8,
                    min=0,
                ),
                [Query(f"sum({pollers})", "pollers up"), gpu_nodes],
            ),
            panels.timeseries(
                Common(
                    "Nodes with NVML Down",
                    "GPU nodes whose poller runs but cannot reach NVML (NVMLDown after 5 minutes).",
                    "short",
                    w=8,
                    min=0,
                    thresholds=ColourSteps(GREEN, ((1, RED),)),
                ),
                [Query(f"count({promql.aggregate('max', ('node',), nvml_up)} == 0) or vector(0)", "NVML down")],
                threshold_style=panels.ThresholdStyle.AREA,
            ),
            panels.timeseries(
                Common(
                    "GPUs Enumerated vs Answering",
                    "GPUs NVML enumerates over the fleet against those the pollers read: the difference is GPUs "
                    "present but lost or failing (GPUsNotAnswering).",
                    "short",
                    w=8,
                    min=0,
                ),
                gpu_counts,
            ),
            panels.prometheus_table(
                Common(
                    "Slowest Rule Groups (share of interval)",
                    f"The {WORST_GROUPS} rule groups of this project whose last evaluation took the largest share of "
                    f"their interval: above {slow_group.short} is the early warning that the fleet is outgrowing "
                    "Prometheus (RuleGroupSlow). Needs Prometheus to scrape itself.",
                    "percentunit",
                    w=12,
                    thresholds=ColourSteps(GREEN, ((slow_group.value / 2, YELLOW), (slow_group.value, RED))),
                ),
                [Query(f"topk({WORST_GROUPS}, {share})", instant=True, format="table")],
                hidden_columns=("Time",),
            ),
            panels.timeseries(
                Common(
                    "Poller Scrape Duration",
                    "How long Prometheus' scrapes of the GPU pollers take: slowest poller and 95th percentile over "
                    "the fleet.",
                    "s",
                    w=12,
                    min=0,
                ),
                [
                    Query(promql.aggregate("max", (), scrape), "slowest poller"),
                    Query(f"quantile(0.95, {scrape})", "p95"),
                ],
            ),
        ],
    )


def _poller_health() -> Row:
    nvml_down = f"{_node_gauge(catalog.GPU_POLLER_NVML_UP)} == 0"
    duration = promql.gauge(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, (NODE,))
    devices = _node_gauge(catalog.GPU_POLLER_DEVICES)
    failures = promql.aggregate("sum", ("node",), promql.rate(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, (NODE,)))
    return Row(
        "GPU Poller Health",
        [
            panels.stat(
                Common(
                    "Nodes with NVML Down",
                    "Nodes whose poller could not reach NVML in its last collection.",
                    "short",
                    w=4,
                    thresholds=ColourSteps(GREEN, ((1, RED),)),
                ),
                [Query(f"count({nvml_down}) or vector(0)", "NVML down", instant=True)],
                background=True,
            ),
            panels.prometheus_table(
                Common(
                    "NVML Up per Node",
                    "Only the nodes whose poller cannot reach NVML now (value 0); empty while every node is up.",
                    "none",
                    w=8,
                    thresholds=ALL_UP,
                    mappings=UP_DOWN,
                ),
                [Query(nvml_down, instant=True, format="table")],
            ),
            panels.timeseries(
                Common(
                    "Collection Duration",
                    "Wall time of the pollers' last NVML collection pass: slowest node, 95th percentile and median "
                    "over the nodes.",
                    "s",
                    w=12,
                    min=0,
                ),
                [
                    Query(promql.aggregate("max", (), duration), "slowest node"),
                    Query(f"quantile(0.95, {duration})", "p95"),
                    Query(f"quantile(0.5, {duration})", "median"),
                ],
            ),
            panels.timeseries(
                Common(
                    "Collection Failures",
                    "Failed NVML calls or passes per second over the fleet, by reason.",
                    "cps",
                    w=8,
                    min=0,
                    thresholds=ERRORS,
                ),
                [Query(rec.GPU_POLLER_COLLECTION_FAILURES_RATE.record, "{{reason}}")],
                threshold_style=panels.ThresholdStyle.AREA,
            ),
            _worst(
                "Slowest Collections",
                f"The {WORST} nodes whose last NVML collection took longest.",
                "s",
                promql.aggregate("max", ("node",), duration),
            ),
            _worst(
                "Most Collection Failures",
                f"The {WORST} nodes failing the most NVML calls per second now.",
                "cps",
                f"{failures} > 0",
            ),
            panels.stat(
                Common(
                    "GPUs per Node",
                    "GPUs the pollers found in their last collection: fleet total and the fewest on any node.",
                    "short",
                    w=8,
                    min=0,
                ),
                [
                    Query(promql.aggregate("sum", (), devices), "GPUs in the fleet", instant=True),
                    Query(promql.aggregate("min", (), devices), "fewest on a node", instant=True),
                ],
            ),
            panels.prometheus_table(
                Common("Driver Versions", "Nodes running each NVML, driver and CUDA driver version.", "short", w=16),
                [
                    Query(
                        promql.aggregate(
                            "count",
                            ("driver_version", "nvml_version", "cuda_driver_version"),
                            promql.gauge(catalog.GPU_DRIVER_INFO, (NODE,)),
                        ),
                        instant=True,
                        format="table",
                    )
                ],
            ),
        ],
    )


def _gpu_hardware() -> Row:
    def errors(title: str, description: str, rule: RecordingRule, label: str) -> panels.PanelBuilder:
        return panels.timeseries(
            Common(title, description, "cps", w=8, min=0, thresholds=ERRORS),
            [Query(rule.record, f"{{{{{label}}}}}")],
            threshold_style=panels.ThresholdStyle.AREA,
        )

    def worst_gpus(title: str, what: str, metric: catalog.Metric) -> panels.PanelBuilder:
        per_gpu = promql.aggregate("sum", ("node", "gpu_id"), promql.rate(metric, (NODE,)))
        return _worst(
            title,
            f"The {WORST} GPUs with the most {what} per second now (only GPUs that have any).",
            "cps",
            f"{per_gpu} > 0",
        )

    power = promql.gauge(catalog.GPU_POWER_WATTS, (NODE,))
    return Row(
        "GPU Hardware Health",
        [
            errors(
                "ECC Errors",
                "ECC errors per second over the fleet, corrected and uncorrected.",
                rec.GPU_ECC_ERRORS_RATE,
                "ecc_type",
            ),
            errors(
                "XID Errors",
                "XID error events per second over the fleet, by XID code (codes that occurred).",
                rec.GPU_XID_ERRORS_RATE,
                "xid",
            ),
            errors(
                "GPU Errors by Type",
                "GPU hardware errors per second over the fleet (xid, ecc_uncorrected, gpu_lost).",
                rec.GPU_ERRORS_RATE,
                "error_type",
            ),
            worst_gpus("GPUs with ECC Errors", "ECC errors", catalog.GPU_ECC_ERRORS_TOTAL),
            worst_gpus("GPUs with XID Errors", "XID errors", catalog.GPU_XID_ERRORS_TOTAL),
            worst_gpus("GPUs with Hardware Errors", "hardware errors of any type", catalog.GPU_ERRORS_TOTAL),
            panels.timeseries(
                Common(
                    "Clock Throttle Reasons",
                    "GPUs of the fleet with each clock-throttle reason active.",
                    "short",
                    w=8,
                    min=0,
                ),
                [Query(rec.GPU_CLOCK_THROTTLE_SUM.record, "{{reason}}")],
                stacked=True,
            ),
            panels.timeseries(
                Common(
                    "SM and Memory Clocks",
                    "SM clock (solid) and memory clock (dashed) over the fleet: the median GPU and the slowest one.",
                    "hertz",
                    w=8,
                    min=0,
                ),
                [
                    Query(rec.GPU_SM_CLOCK_P50.record, "SM median"),
                    Query(rec.GPU_SM_CLOCK_MIN.record, "SM slowest GPU"),
                    Query(rec.GPU_MEMORY_CLOCK_P50.record, "memory median"),
                    Query(rec.GPU_MEMORY_CLOCK_MIN.record, "memory slowest GPU"),
                ],
                dashed_refs=("C", "D"),
            ),
            panels.timeseries(
                Common(
                    "Power Draw vs Limit",
                    "Power drawn by all GPUs of the fleet (solid) against the sum of their limits (dashed).",
                    "watt",
                    w=8,
                    min=0,
                ),
                [Query(rec.GPU_POWER_SUM.record, "fleet draw"), Query(rec.GPU_POWER_LIMIT_SUM.record, "fleet limit")],
                dashed_refs=("B",),
            ),
            _worst(
                "Highest Power Draw",
                f"The {WORST} GPUs drawing the most power now.",
                "watt",
                promql.aggregate("max", ("node", "gpu_id"), power),
                w=24,
            ),
        ],
    )


def _gpu_profiling() -> Row:
    return Row(
        "GPU Profiling (GPM)",
        [
            panels.timeseries(
                Common(
                    "Fleet Busyness: NVML vs GPM",
                    "Medians over the GPUs that report GPM (Hopper and newer): NVML utilization (dashed) "
                    "against SM activity and tensor-core activity.",
                    "percent",
                    w=8,
                    min=0,
                    max=100,
                ),
                [
                    Query(rec.GPU_UTILIZATION_P50_WHERE_GPM.record, "NVML utilization median"),
                    Query(rec.GPU_SM_ACTIVE_P50.record, "SM active median"),
                    Query(rec.GPU_TENSOR_ACTIVE_P50.record, "tensor active median"),
                ],
                dashed_refs=("A",),
            ),
            panels.timeseries(
                Common(
                    "SM Occupancy and DRAM Bandwidth",
                    "Fleet medians of SM occupancy (resident warps of the maximum) and DRAM bandwidth used.",
                    "percent",
                    w=8,
                    min=0,
                    max=100,
                ),
                [
                    Query(rec.GPU_SM_OCCUPANCY_P50.record, "SM occupancy median"),
                    Query(rec.GPU_DRAM_BANDWIDTH_P50.record, "DRAM bandwidth median"),
                ],
            ),
            panels.timeseries(
                Common(
                    "Interconnect Traffic",
                    "Bytes per second over the fleet: NVLink (solid) and PCIe (dashed), received by GPUs (rx) "
                    "and sent (tx).",
                    "Bps",
                    w=8,
                    min=0,
                ),
                [
                    Query(rec.GPU_NVLINK_BYTES_RATE.record, "NVLink {{direction}}"),
                    Query(rec.GPU_PCIE_BYTES_RATE.record, "PCIe {{direction}}"),
                ],
                dashed_refs=("B",),
            ),
        ],
    )


def _gpu_allocation(cfg: ObservabilityConfig) -> Row:
    idle = cfg.thresholds.gpu_utilization_low_percent
    return Row(
        "GPU Allocation",
        [
            panels.timeseries(
                Common(
                    "Held vs Free GPUs",
                    "GPUs of the fleet held by a training job (ml_training_job_gpu_info joined on uuid) and GPUs "
                    "no job holds (free capacity), as the pollers report them.",
                    "short",
                    w=12,
                    min=0,
                ),
                [Query(jobs.FLEET_HELD.record, "held by a job"), Query(jobs.FLEET_UNHELD.record, "free")],
                stacked=True,
                fill_opacity=40,
            ),
            panels.timeseries(
                Common(
                    "Held but Idle GPUs",
                    f"GPUs a training job holds while they run below {idle.short} utilization: paid for and "
                    "idle (GPUUtilizationLow names the jobs).",
                    "short",
                    w=12,
                    min=0,
                    thresholds=ColourSteps(GREEN, ((1, YELLOW),)),
                ),
                [Query(jobs.FLEET_HELD_IDLE, "held, idle")],
                threshold_style=panels.ThresholdStyle.AREA,
            ),
        ],
    )


def _training_efficiency() -> Row:
    return Row(
        "Training Efficiency",
        [
            efficiency.gpu_hours_by_verdict(),
            efficiency.jobs_wasting_gpu_hours(WORST),
            efficiency.unknown_gpu_models(),
            efficiency.gpus_by_verdict(),
        ],
    )


def _trace_health() -> Row:
    return Row(
        "Trace Health",
        [
            traces.span_rate(
                "Spans per Second",
                "Spans Tempo's metrics generator received per second, per service.",
                (),
                with_total=True,
                w=12,
            ),
            traces.span_error_ratio(
                "Span Error Rate", "Share of spans with error status, per service and overall.", (), with_total=True
            ),
        ],
    )


def build(cfg: ObservabilityConfig) -> dict[str, Any]:
    return assemble(
        DashboardSpec(
            uid=UID,
            title=TITLE,
            description=(
                "Health of what foxhunt-observability deploys: scrape targets, the monitoring's own health, "
                "GPU poller, GPUs, tracing."
            ),
            tags=("infra", "gpu", "traces"),
            variables=[
                variables.prometheus_datasource(cfg.datasource_uids.prometheus),
                variables.label_values("node", "GPU node", catalog.GPU_POLLER_NVML_UP.name, "node"),
            ],
            rows=[
                _scrape_targets(cfg),
                _monitoring_health(cfg),
                _poller_health(),
                _gpu_hardware(),
                _gpu_profiling(),
                _gpu_allocation(cfg),
                _training_efficiency(),
                _trace_health(),
            ],
            min_interval=f"{cfg.scrape_interval_seconds}s",
            refresh="30s",
            time_from="now-6h",
        )
    )
