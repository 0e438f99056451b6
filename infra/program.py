"""The Pulumi program as a function of the typed settings, so tests can run it once per stack.

`component_args(settings)` is the one place that slices the settings (and the content generated
from them) into each component's typed Args; `build` hands every component its Args.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra import components, generated
from infra.components import (
    AlertRoutingArgs,
    AlertRulesArgs,
    GpuPollerArgs,
    GrafanaProvisioningArgs,
    OtelExport,
    ScrapeDiscoveryArgs,
    ServiceScrapeArgs,
    TrainingJobArgs,
)
from infra.components.scrape_discovery import watched_namespaces
from infra.settings import Settings, load_settings, pulumi_config_source, pulumi_secret_reader


@dataclass(frozen=True)
class ComponentArgs:
    service_scrape: ServiceScrapeArgs
    scrape_discovery: ScrapeDiscoveryArgs
    training_job: TrainingJobArgs
    gpu_poller: GpuPollerArgs
    alert_rules: AlertRulesArgs
    alert_routing: AlertRoutingArgs
    grafana: GrafanaProvisioningArgs


def component_args(settings: Settings) -> ComponentArgs:
    """Every component's Args, from the settings and the content generated from them."""
    cfg = settings.observability_config()
    gen = generated.generated(cfg)
    ns = settings.namespaces
    labels = settings.common_labels
    otel = OtelExport(environment=settings.environment, otlp_grpc_endpoint=settings.endpoints.tempo_otlp_grpc)
    scrape = settings.scrape
    return ComponentArgs(
        service_scrape=ServiceScrapeArgs(services=settings.services, namespace=ns.platform, otel=otel),
        scrape_discovery=ScrapeDiscoveryArgs(
            scrape=scrape, cfg=cfg, watched_namespaces=watched_namespaces(ns), namespace=ns.monitoring,
            common_labels=labels,
        ),
        training_job=TrainingJobArgs(
            job=settings.training_job, cfg=cfg, namespace=ns.training, otel=otel, common_labels=labels
        ),
        gpu_poller=GpuPollerArgs(
            poller=settings.poller, namespace=ns.monitoring, service=cfg.gpu_poller_service,
            project=settings.project, stack=settings.stack, common_labels=labels,
        ),
        alert_rules=AlertRulesArgs(
            groups=gen.rule_groups, rules_file_yaml=gen.rules_yaml, mode=scrape.mode,
            operator_selector=scrape.operator_selector, namespace=ns.monitoring, common_labels=labels,
            shards=cfg.shards, tier_groups=gen.tier_groups, tier_yaml=gen.tier_yaml,
        ),
        alert_routing=AlertRoutingArgs(
            receivers=settings.alerting, cfg=cfg, mode=scrape.mode, operator_selector=scrape.operator_selector,
            namespace=ns.monitoring, common_labels=labels,
        ),
        grafana=GrafanaProvisioningArgs(
            datasources_yaml=generated.stack_datasources_yaml(settings), dashboards=gen.dashboards,
            folder=settings.grafana.folder, namespace=settings.grafana.namespace, common_labels=labels,
        ),
    )  # fmt: skip


def build(settings: Settings) -> None:
    """Every component, each with its Args."""
    args = component_args(settings)
    components.ServiceScrapeAnnotations("platform-services", args.service_scrape)
    components.ScrapeDiscovery("scrape-discovery", args.scrape_discovery)
    components.TrainingJobTemplate("training-job", args.training_job)
    components.GpuPoller("gpu-poller", args.gpu_poller)
    components.AlertRules("alert-rules", args.alert_rules)
    components.AlertRouting("alert-routing", args.alert_routing)
    components.GrafanaProvisioning("grafana", args.grafana)


def main() -> None:
    """Read and validate the stack config, then register every resource."""
    build(load_settings(pulumi_config_source(), pulumi_secret_reader()))
