"""The Pulumi program as a function of the typed settings, so tests can run it once per stack.

`component_args(settings)` is the one place that slices the settings (and the content generated
from them) into each component's typed Args; `build` hands every component its Args.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pulumi
from pulumi.runtime import mocks
from pulumi.runtime import settings as runtime_settings

from infra import components, generated_content
from infra.components import (
    AlertRoutingArgs,
    AlertRulesArgs,
    GpuPollerArgs,
    GrafanaProvisioningArgs,
    NetworkIsolationArgs,
    OtelExport,
    OwnedPods,
    ScrapeCredentialsArgs,
    ScrapeDiscoveryArgs,
    ServiceScrapeArgs,
    TrainingJobArgs,
    gpu_poller,
    training_job,
)
from infra.components.scrape_credentials import exporter_web
from infra.components.scrape_discovery import watched_namespaces
from infra.components.training_job import usage
from infra.kube_provider import guard_live_run, kubernetes_provider
from infra.outputs import export_stack_outputs
from infra.settings import Settings, load_settings, pulumi_config_source, pulumi_secret_reader
from observability.scrape_config import critical_scrape_annotations


@dataclass(frozen=True)
class ComponentArgs:
    service_scrape: ServiceScrapeArgs
    scrape_discovery: ScrapeDiscoveryArgs
    training_job: TrainingJobArgs
    gpu_poller: GpuPollerArgs
    alert_rules: AlertRulesArgs
    alert_routing: AlertRoutingArgs
    grafana: GrafanaProvisioningArgs
    network: NetworkIsolationArgs
    scrape_credentials: ScrapeCredentialsArgs | None  # with scrapeSecurity


def component_args(settings: Settings) -> ComponentArgs:
    """Every component's Args, from the settings and the content generated from them."""
    cfg = settings.observability_config()
    gen = generated_content.generated(cfg)
    ns = settings.namespaces
    labels = settings.common_labels
    otel = OtelExport(environment=settings.environment, otlp_grpc_endpoint=settings.endpoints.tempo_otlp_grpc)
    scrape = settings.scrape
    security = cfg.scrape_security
    poller_web_secret = f"{gpu_poller.CONTAINER}-web-config"
    training_web_secret = f"{settings.training_job.name}-web-config"
    training = TrainingJobArgs(
        job=settings.training_job, cfg=cfg, namespace=ns.training, otel=otel, common_labels=labels,
        web=exporter_web(security, training_web_secret) if security else None,
    )  # fmt: skip
    poller = GpuPollerArgs(
        poller=settings.poller, namespace=ns.monitoring, service=cfg.gpu_poller_service,
        project=settings.project, stack=settings.stack, common_labels=labels,
        critical_scrape=critical_scrape_annotations(cfg),
        web=exporter_web(security, poller_web_secret) if security else None,
    )  # fmt: skip
    owned = (
        OwnedPods(
            name=gpu_poller.CONTAINER, app=cfg.gpu_poller_service, namespace=ns.monitoring,
            pod_selector=gpu_poller.selector_labels(poller), metrics_port=settings.poller.port, egress=False,
        ),
        OwnedPods(
            name=settings.training_job.name, app=cfg.training_job_service, namespace=ns.training,
            pod_selector=training_job.pod_selector(training), metrics_port=settings.training_job.metrics_port,
            metrics_ports=settings.training_job.processes_per_node,
            egress=True, peers_within=True,
        ),
    )  # fmt: skip
    return ComponentArgs(
        service_scrape=ServiceScrapeArgs(
            services=settings.services, namespace=ns.platform, otel=otel,
            critical_services=(cfg.training_service,), critical_scrape=critical_scrape_annotations(cfg),
        ),
        scrape_discovery=ScrapeDiscoveryArgs(
            scrape=scrape, cfg=cfg, watched_namespaces=watched_namespaces(ns), namespace=ns.monitoring,
            common_labels=labels,
        ),
        training_job=training,
        gpu_poller=poller,
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
            datasources_yaml=generated_content.stack_datasources_yaml(settings), dashboards=gen.dashboards,
            folder=cfg.grafana_folder, namespace=settings.grafana.namespace, common_labels=labels,
        ),
        network=NetworkIsolationArgs(
            pods=owned, prometheus_namespace=scrape.prometheus_namespace,
            prometheus_pod_selector=scrape.prometheus_pod_selector, common_labels=labels,
        ),
        scrape_credentials=ScrapeCredentialsArgs(
            security=security, credential=settings.scrape_credential,
            prometheus_namespace=scrape.prometheus_namespace,
            web_config_secrets={ns.monitoring: poller_web_secret, ns.training: training_web_secret},
            common_labels=labels,
        ) if security else None,
    )  # fmt: skip


def build(settings: Settings) -> None:
    """Every component, each with its Args, through the stack's own Kubernetes provider (children
    inherit it; the ambient default provider is never used); then the stack outputs."""
    args = component_args(settings)
    opts = pulumi.ResourceOptions(providers=[kubernetes_provider(settings)])
    components.ServiceScrapeAnnotations("platform-services", args.service_scrape, opts)
    scrape = components.ScrapeDiscovery("scrape-discovery", args.scrape_discovery, opts)
    components.TrainingJobTemplate("training-job", args.training_job, opts)
    poller = components.GpuPoller("gpu-poller", args.gpu_poller, opts)
    rules = components.AlertRules("alert-rules", args.alert_rules, opts)
    routing = components.AlertRouting("alert-routing", args.alert_routing, opts)
    components.GrafanaProvisioning("grafana", args.grafana, opts)
    components.NetworkIsolation("network", args.network, opts)
    if args.scrape_credentials is not None:
        components.ScrapeCredentials("scrape-credentials", args.scrape_credentials, opts)
    groups = args.alert_rules.groups
    export_stack_outputs(
        settings,
        poller_image=poller.image_ref,
        dashboard_titles={uid: json.loads(text)["title"] for uid, text in args.grafana.dashboards.items()},
        rules=rules.resource,
        alert_groups=sum(1 for g in groups if any("alert" in r for r in g["rules"])),
        alerts=sum(1 for g in groups for r in g["rules"] if "alert" in r),
        alertmanager=routing.resources,
        scrape=scrape.resource,
        training_job_command=usage(args.training_job),
    )


def _under_mocks() -> bool:
    """The offline render and the tests run the program under the SDK's mock monitor."""
    return isinstance(runtime_settings.SETTINGS.monitor, mocks.MockMonitor)


def main() -> None:
    """Read and validate the stack config, then register every resource."""
    settings = load_settings(pulumi_config_source(), pulumi_secret_reader())
    if not _under_mocks():
        # A live `pulumi preview`/`up`: refuse a provider that would use another cluster.
        guard_live_run(settings, pulumi.Config("kubernetes").get("context"), os.environ)
    build(settings)
