"""The Pulumi program as a function of the typed settings, so tests can run it once per stack."""

from __future__ import annotations

import json
import os

import pulumi

from infra import artifacts, components
from infra.kube_provider import guard_live_run, kubernetes_provider
from infra.outputs import export_stack_outputs
from infra.settings import Settings, load_settings, pulumi_config_source, pulumi_secret_reader
from observability.datasources import datasources_yaml


def main() -> None:
    """Read and validate the stack config, then register every resource."""
    settings = load_settings(pulumi_config_source(), pulumi_secret_reader())
    if not _under_mocks():
        # A live `pulumi preview`/`up`: refuse a provider that would use another cluster.
        guard_live_run(settings, pulumi.Config("kubernetes").get("context"), os.environ)
    build(settings)


def _under_mocks() -> bool:
    """The offline render and the tests run the program under the SDK's mock monitor."""
    from pulumi.runtime import mocks
    from pulumi.runtime import settings as runtime_settings

    return isinstance(runtime_settings.SETTINGS.monitor, mocks.MockMonitor)


def build(settings: Settings) -> None:
    """Every component, driven by the typed settings; generated content shared with the render."""
    cfg = settings.observability_config()
    gen = artifacts.generated(cfg)
    # Every component's Kubernetes resources go through the stack's own provider (its children
    # inherit it), never the ambient default provider.
    opts = pulumi.ResourceOptions(providers=[kubernetes_provider(settings)])
    components.ServiceScrapeAnnotations("platform-services", settings, opts=opts)
    scrape = components.ScrapeDiscovery("scrape-discovery", settings, cfg, opts=opts)
    components.TrainingJobTemplate("training-job", settings, cfg, opts=opts)
    poller = components.GpuPoller("gpu-poller", settings, cfg, opts=opts)
    rules = components.AlertRules("alert-rules", settings, gen.rule_groups, gen.rules_yaml, opts=opts)
    routing = components.AlertRouting("alert-routing", settings, cfg, opts=opts)
    components.GrafanaProvisioning(
        "grafana",
        settings,
        datasources_yaml(cfg, artifacts.datasource_endpoints(settings)),
        gen.dashboards,
        opts=opts,
    )
    export_stack_outputs(
        settings,
        poller_image=poller.image_ref,
        dashboard_titles={uid: json.loads(text)["title"] for uid, text in gen.dashboards.items()},
        rules=rules.resource,
        alert_groups=sum(1 for g in gen.rule_groups if any("alert" in r for r in g["rules"])),
        alerts=sum(1 for g in gen.rule_groups for r in g["rules"] if "alert" in r),
        alertmanager=routing.resources,
        scrape=scrape.resource,
    )
