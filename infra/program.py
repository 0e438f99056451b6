"""The Pulumi program as a function of the typed settings, so tests can run it once per stack."""

from __future__ import annotations

from infra import artifacts, components
from infra.settings import Settings, load_settings, pulumi_config_source, pulumi_secret_reader
from observability.datasources import datasources_yaml


def main() -> None:
    """Read and validate the stack config, then register every resource."""
    settings = load_settings(pulumi_config_source(), pulumi_secret_reader())
    build(settings)


def build(settings: Settings) -> None:
    """Every component, driven by the typed settings; generated content shared with the render."""
    cfg = settings.observability_config()
    gen = artifacts.generated(cfg)
    components.ServiceScrapeAnnotations("platform-services", settings)
    components.ScrapeDiscovery("scrape-discovery", settings, cfg)
    components.TrainingJobTemplate("training-job", settings, cfg)
    components.GpuPoller("gpu-poller", settings, cfg)
    components.AlertRules("alert-rules", settings, gen.rule_groups, gen.rules_yaml)
    components.AlertRouting("alert-routing", settings, cfg)
    components.GrafanaProvisioning(
        "grafana",
        settings,
        datasources_yaml(cfg, artifacts.datasource_endpoints(settings)),
        gen.dashboards,
    )
