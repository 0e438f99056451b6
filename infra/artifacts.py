"""Files the render writes besides the Kubernetes objects the program registers (rules, scrape
config, datasources, dashboards, the training Job template), built from the same Args and the
same generated content the components use."""

from __future__ import annotations

from infra.components.training_job import job_manifest, job_manifest_path
from infra.generated import generated, stack_datasources_yaml
from infra.program import component_args
from infra.result import dump_yaml
from infra.settings import Settings
from observability.alertmanager import ReceiverUrls, alertmanager_config_yaml
from observability.scrape_config import scrape_config_yaml

RULES_PATH = "prometheus/rules.yaml"
SCRAPE_CONFIG_PATH = "prometheus/scrape-config.yaml"
DATASOURCES_PATH = "grafana/datasources.yaml"
ALERTMANAGER_PATH = "alertmanager/alertmanager.yaml"


def secret_placeholder(key: str) -> str:
    """Stands for the Pulumi secret `key` in readable files: stable, and never a real value."""
    return f"https://pulumi-secret.invalid/{key}"


def alertmanager_yaml(settings: Settings) -> str:
    """The routing tree as Alertmanager loads it, readable; the receiver URLs are secrets, so the
    file names each one's Pulumi secret (https://pulumi-secret.invalid/<key>), never a value."""
    receivers = ReceiverUrls(
        page=secret_placeholder("alertPageWebhookUrl"),
        chat=secret_placeholder("alertChatWebhookUrl"),
        low_priority=secret_placeholder("alertLowPriorityWebhookUrl"),
    )
    header = (
        f"# Alertmanager routing of stack {settings.stack} ({settings.scrape.mode} mode). Receiver URLs are\n"
        "# Pulumi secrets: each URL below names the secret; the deployed Secret carries the value.\n"
    )
    return header + alertmanager_config_yaml(settings.observability_config(), receivers)


def artifact_files(settings: Settings) -> dict[str, str]:
    """Relative path under rendered/<stack>/ -> file text."""
    cfg = settings.observability_config()
    gen = generated(cfg)
    args = component_args(settings)
    files = {
        RULES_PATH: gen.rules_yaml,
        SCRAPE_CONFIG_PATH: scrape_config_yaml(cfg, list(args.scrape_discovery.watched_namespaces)),
        DATASOURCES_PATH: stack_datasources_yaml(settings),
        ALERTMANAGER_PATH: alertmanager_yaml(settings),
        job_manifest_path(args.training_job): dump_yaml(job_manifest(args.training_job)),
    }
    files.update({f"dashboards/{uid}.json": text for uid, text in gen.dashboards.items()})
    return files
