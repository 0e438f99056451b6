"""Infra cockpit: the health of what this project deploys.

For the platform / SRE on call: are the targets scraped, is the monitoring itself healthy, are the
GPU pollers and the GPUs healthy, is the fleet's hardware used. Every panel comes from its topic
module (`dashboards/panels/<topic>.py`); this module composes them into rows.

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

from dashboards import variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import allocation, efficiency, gpm, gpu, gpu_errors, monitoring, poller, targets, traces
from foxhunt_trainer.contract import catalog
from observability import alert_links, promql
from observability.config import ObservabilityConfig

UID = alert_links.INFRA_COCKPIT_UID
TITLE = "Foxhunt Infra Cockpit"

NODE = promql.variable_matcher("node", "node")
NODES = (NODE,)
# How many members a "worst" table lists.
WORST = 10
# How many rule groups the "worst groups" panel lists.
WORST_GROUPS = 5


def _scrape_targets(cfg: ObservabilityConfig) -> Row:
    return Row(
        "Scrape Targets",
        [
            targets.platform_services_up(cfg, w=12, h=6),
            targets.training_job_targets(cfg, w=6, h=6),
            targets.gpu_poller_targets(cfg, w=6, h=6),
            targets.targets_up_by_service(cfg, w=12),
            targets.targets_down(cfg, w=12),
        ],
    )


def _monitoring_health(cfg: ObservabilityConfig) -> Row:
    """Is the monitoring itself blind anywhere? Fleet totals only (no series per node)."""
    return Row(
        "Monitoring Health",
        [
            monitoring.pollers_up_vs_gpu_nodes(cfg, w=8),
            monitoring.nodes_with_nvml_down_over_time(w=8),
            monitoring.gpus_enumerated_vs_answering(cfg, w=8),
            monitoring.slowest_rule_groups(cfg, WORST_GROUPS, w=12),
            monitoring.poller_scrape_duration(cfg, w=12),
        ],
    )


def _poller_health() -> Row:
    return Row(
        "GPU Poller Health",
        [
            poller.nodes_with_nvml_down_now(NODES, w=4),
            poller.nvml_up_per_node(NODES, w=8),
            poller.collection_duration(NODES, w=12),
            poller.collection_failures(w=8),
            poller.slowest_collections(NODES, WORST, w=8),
            poller.most_collection_failures(NODES, WORST, w=8),
            poller.gpus_per_node(NODES, w=8),
            poller.driver_versions(NODES, w=16),
        ],
    )


def _gpu_hardware() -> Row:
    return Row(
        "GPU Hardware Health",
        [
            gpu_errors.ecc_errors(w=8),
            gpu_errors.xid_errors(w=8),
            gpu_errors.errors_by_type(w=8),
            gpu_errors.gpus_with_ecc_errors(NODES, WORST, w=8),
            gpu_errors.gpus_with_xid_errors(NODES, WORST, w=8),
            gpu_errors.gpus_with_hardware_errors(NODES, WORST, w=8),
            gpu.clock_throttle_reasons(w=8),
            gpu.sm_and_memory_clocks(w=8),
            gpu.fleet_power_draw_and_limit(w=8),
            gpu.highest_power_draw(NODES, WORST, w=24),
        ],
    )


def _gpu_profiling() -> Row:
    return Row(
        "GPU Profiling (GPM)",
        [
            gpm.fleet_busyness(w=8),
            gpm.sm_occupancy_and_dram_bandwidth(w=8),
            gpm.interconnect_traffic(w=8),
        ],
    )


def _gpu_allocation(cfg: ObservabilityConfig) -> Row:
    return Row(
        "GPU Allocation",
        [
            allocation.held_and_free(w=8),
            allocation.held_but_idle(cfg.thresholds, w=8),
            allocation.mig_and_shared(w=8),
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
    return Row("Trace Health", [traces.spans_per_second(w=12), traces.span_error_rate()])


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
