"""Infra cockpit (seed 000, component 6): the health of what this project deploys.

Scrape targets of the annotated platform services, the training jobs and the GPU poller; the
poller's own health per node (NVML reachable, collection time and failures, driver versions);
GPU hardware health; and the "Trace Health" row from Tempo's metrics generator.
"""

from __future__ import annotations

from typing import Any

from dashboards import panels, promql, variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import GREEN, RED, YELLOW, Common, Query, Thresholds
from observability import catalog
from observability.config import ObservabilityConfig
from observability.rules import dashboard_recording as rec

UID = "foxhunt-infra-cockpit"
TITLE = "Foxhunt Infra Cockpit"

NODE = promql.variable_matcher("node", "node")
GPU_LEGEND = "{{node}} GPU {{gpu_id}}"
UP_DOWN = {"1": ("UP", GREEN), "0": ("DOWN", RED)}
ALL_UP = Thresholds(RED, ((1, GREEN),))
ERRORS = Thresholds(GREEN, ((1e-3, RED),))


def _up(services: tuple[str, ...]) -> str:
    return promql.gauge(catalog.UP, (promql.regex_matcher("service", promql.any_of(services)),))


def _targets_up(title: str, description: str, service: str) -> panels.PanelBuilder:
    """Scrape targets of one service: how many answer and how many do not."""
    up = promql.gauge(catalog.UP, (promql.matcher("service", service),))
    return panels.stat(
        Common(title, description, "short", w=6, h=6, thresholds=Thresholds(GREEN)),
        [Query(f"sum({up})", "up"), Query(f"count({up} == 0) or vector(0)", "down")],
    )


def _scrape_targets(cfg: ObservabilityConfig) -> Row:
    every_service = (*cfg.platform_services, cfg.training_job_service, cfg.gpu_poller_service)
    platform = cfg.platform_services or (cfg.training_service,)
    return Row("Scrape Targets", [
        panels.stat(
            Common("Platform Services Up",
                   "Lowest scrape health over each annotated platform service's targets (UP only if all answer).",
                   "none", w=12, h=6, thresholds=ALL_UP, mappings=UP_DOWN),
            [Query(promql.by("min", ("service",), _up(platform)), "{{service}}")],
            background=True,
        ),
        _targets_up("Training Job Targets", "Training job pods whose /metrics answer (up) and do not (down).",
                    cfg.training_job_service),
        _targets_up("GPU Poller Targets", "GPU poller pods whose /metrics answer (up) and do not (down).",
                    cfg.gpu_poller_service),
        panels.timeseries(
            Common("Targets Up by Service", "Scrape targets answering, per service, over time.", "short", w=12, min=0),
            [Query(promql.by("sum", ("service",), _up(every_service)), "{{service}}")],
        ),
        panels.prometheus_table(
            Common("Targets Down", "Every scrape target of the project's services that did not answer its last scrape.",
                   "none", w=12),
            [Query(f"{_up(every_service)} == 0", instant=True, format="table")],
            hidden_columns=("Value", "__name__"),
        ),
    ])


def _poller_health() -> Row:
    return Row("GPU Poller Health", [
        panels.state_timeline(
            Common("NVML Up per Node", "Whether the poller's last collection reached NVML, per node.", "none",
                   w=12, thresholds=ALL_UP, mappings=UP_DOWN),
            [Query(promql.by("max", ("node",), promql.gauge(catalog.GPU_POLLER_NVML_UP, (NODE,))), "{{node}}")],
        ),
        panels.timeseries(
            Common("Collection Duration", "Wall time of the poller's last NVML collection pass, per node.", "s",
                   w=12, min=0),
            [Query(promql.by("max", ("node",), promql.gauge(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, (NODE,))),
                   "{{node}}")],
        ),
        panels.timeseries(
            Common("Collection Failures", "Failed NVML calls or passes per second, by node and reason.", "cps",
                   w=8, min=0, thresholds=ERRORS),
            [Query(promql.by("sum", ("node", "reason"),
                             promql.rate(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, (NODE,))),
                   "{{node}} {{reason}}")],
            threshold_style=panels.ThresholdStyle.AREA,
        ),
        panels.timeseries(
            Common("GPUs per Node", "GPUs the poller found in its last collection, per node.", "short", w=8, min=0),
            [Query(promql.by("max", ("node",), promql.gauge(catalog.GPU_POLLER_DEVICES, (NODE,))), "{{node}}")],
        ),
        panels.prometheus_table(
            Common("Driver Versions", "NVML, driver and CUDA driver versions on each node.", "none", w=8),
            [Query(promql.by("max", ("node", "driver_version", "nvml_version", "cuda_driver_version"),
                             promql.gauge(catalog.GPU_DRIVER_INFO, (NODE,))), instant=True, format="table")],
            hidden_columns=("Value",),
        ),
    ])


def _gpu_hardware() -> Row:
    def errors(title: str, description: str, metric: catalog.Metric, label: str) -> panels.PanelBuilder:
        return panels.timeseries(
            Common(title, description, "cps", w=8, min=0, thresholds=ERRORS),
            [Query(promql.by("sum", ("node", "gpu_id", label), promql.rate(metric, (NODE,))),
                   f"{GPU_LEGEND} {{{{{label}}}}}")],
            threshold_style=panels.ThresholdStyle.AREA,
        )

    return Row("GPU Hardware Health", [
        errors("ECC Errors", "ECC errors per second, corrected and uncorrected.", catalog.GPU_ECC_ERRORS_TOTAL,
               "ecc_type"),
        errors("XID Errors", "XID error events per second, by XID code.", catalog.GPU_XID_ERRORS_TOTAL, "xid"),
        errors("GPU Errors by Type", "GPU hardware errors per second (xid, ecc_uncorrected, gpu_lost).",
               catalog.GPU_ERRORS_TOTAL, "error_type"),
        panels.timeseries(
            Common("Clock Throttle Reasons", "GPUs with each clock-throttle reason active, per node.", "short",
                   w=8, min=0),
            [Query(promql.by("sum", ("node", "reason"), promql.gauge(catalog.GPU_CLOCK_THROTTLE_ACTIVE, (NODE,))),
                   "{{node}} {{reason}}")],
            stacked=True,
        ),
        panels.timeseries(
            Common("SM and Memory Clocks", "Current SM clock (solid) and memory clock (dashed) of each GPU.",
                   "hertz", w=8, min=0),
            [Query(promql.gauge(catalog.GPU_SM_CLOCK_HERTZ, (NODE,)), f"{GPU_LEGEND} SM"),
             Query(promql.gauge(catalog.GPU_MEMORY_CLOCK_HERTZ, (NODE,)), f"{GPU_LEGEND} memory")],
            dashed_refs=("B",),
        ),
        panels.timeseries(
            Common("Power Draw vs Limit", "Power drawn by each node's GPUs (solid) against their limits (dashed).",
                   "watt", w=8, min=0),
            [Query(promql.by("sum", ("node",), promql.gauge(catalog.GPU_POWER_WATTS, (NODE,))), "{{node}} draw"),
             Query(promql.by("sum", ("node",), promql.gauge(catalog.GPU_POWER_LIMIT_WATTS, (NODE,))),
                   "{{node}} limit")],
            dashed_refs=("B",),
        ),
    ])


def _trace_health() -> Row:
    calls, errors = rec.SPAN_CALLS_RATE5M.record, rec.SPAN_ERRORS_RATE5M.record
    return Row("Trace Health", [
        panels.timeseries(
            Common("Spans per Second", "Spans Tempo's metrics generator received per second, per service.", "cps",
                   w=12, min=0),
            [Query(calls, "{{service}}"), Query(f"sum({calls})", "all services")],
        ),
        panels.timeseries(
            Common("Span Error Rate", "Share of spans with error status, per service and overall.", "percentunit",
                   w=12, min=0, max=1, thresholds=Thresholds(GREEN, ((0.01, YELLOW), (0.05, RED)))),
            [Query(rec.SPAN_ERROR_RATIO_RATE5M.record, "{{service}}"),
             Query(f"sum({errors}) / sum({calls})", "all services")],
            threshold_style=panels.ThresholdStyle.LINE,
        ),
    ])


def build(cfg: ObservabilityConfig) -> dict[str, Any]:
    return assemble(DashboardSpec(
        uid=UID,
        title=TITLE,
        description="Health of what foxhunt-observability deploys: scrape targets, GPU poller, GPUs, tracing.",
        tags=("infra", "gpu", "traces"),
        variables=[
            variables.prometheus_datasource(cfg.datasource_uids.prometheus),
            variables.label_values("node", "GPU node", catalog.GPU_POLLER_NVML_UP.name, "node"),
        ],
        rows=[_scrape_targets(cfg), _poller_health(), _gpu_hardware(), _trace_health()],
        min_interval=f"{cfg.scrape_interval_seconds}s",
        refresh="30s",
        time_from="now-6h",
    ))
