"""Scrape target panels: which targets of the project's services Prometheus reaches (the `up`
series of the annotated platform services, the training jobs and the GPU pollers)."""

from __future__ import annotations

from dashboards.panels import (
    ALL_UP,
    GREEN,
    UP_DOWN,
    ColourSteps,
    Common,
    PanelBuilder,
    Query,
    prometheus_table,
    stat,
    timeseries,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig


def _up(services: tuple[str, ...]) -> str:
    return promql.gauge(catalog.UP, (promql.regex_matcher("service", promql.any_of(services)),))


def _every_service(cfg: ObservabilityConfig) -> tuple[str, ...]:
    return (*cfg.platform_services, cfg.training_job_service, cfg.gpu_poller_service)


def _targets_up(title: str, description: str, service: str, w: int, h: int) -> PanelBuilder:
    """Scrape targets of one service: how many answer and how many do not."""
    up = promql.gauge(catalog.UP, (promql.matcher("service", service),))
    return stat(
        Common(title, description, "short", w=w, h=h, thresholds=ColourSteps(GREEN)),
        [Query(f"sum({up})", "up"), Query(f"count({up} == 0) or vector(0)", "down")],
    )


def platform_services_up(cfg: ObservabilityConfig, *, w: int, h: int) -> PanelBuilder:
    platform = cfg.platform_services or (cfg.training_service,)
    return stat(
        Common(
            "Platform Services Up",
            "Lowest scrape health over each annotated platform service's targets (UP only if all answer).",
            "none",
            w=w,
            h=h,
            thresholds=ALL_UP,
            mappings=UP_DOWN,
        ),
        [Query(promql.aggregate("min", ("service",), _up(platform)), "{{service}}")],
        background=True,
    )


def training_job_targets(cfg: ObservabilityConfig, *, w: int, h: int) -> PanelBuilder:
    return _targets_up(
        "Training Job Targets",
        "Training job pods whose /metrics answer (up) and do not (down).",
        cfg.training_job_service,
        w,
        h,
    )


def gpu_poller_targets(cfg: ObservabilityConfig, *, w: int, h: int) -> PanelBuilder:
    return _targets_up(
        "GPU Poller Targets",
        "GPU poller pods whose /metrics answer (up) and do not (down).",
        cfg.gpu_poller_service,
        w,
        h,
    )


def targets_up_by_service(cfg: ObservabilityConfig, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Targets Up by Service", "Scrape targets answering, per service, over time.", "short", w=w, min=0),
        [Query(promql.aggregate("sum", ("service",), _up(_every_service(cfg))), "{{service}}")],
    )


def targets_down(cfg: ObservabilityConfig, *, w: int) -> PanelBuilder:
    return prometheus_table(
        Common(
            "Targets Down",
            "Every scrape target of the project's services that did not answer its last scrape.",
            "none",
            w=w,
        ),
        [Query(f"{_up(_every_service(cfg))} == 0", instant=True, format="table")],
        hidden_columns=("Value", "__name__"),
    )
