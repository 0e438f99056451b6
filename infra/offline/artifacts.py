"""Files the render writes besides the Kubernetes objects the program registers (rules, scrape
config, datasources, dashboards, the training Job template), built from the same Args and the
same generated content the components use."""

from __future__ import annotations

import dashboards
from infra.components.alert_rules import RULE_FILES
from infra.components.training_job import job_manifest, job_manifest_path
from infra.generated_content import generated, stack_datasources_yaml
from infra.offline.result import dump_yaml
from infra.program import component_args
from infra.settings import RECEIVER_KEYS, AlertingReceivers, Settings
from observability.alertmanager import ReceiverUrls, alertmanager_config_yaml
from observability.notifications import TEMPLATE_FILE, template_text
from observability.prometheus_config import alertmanager_cluster_yaml, operator_specs_yaml, server_configs
from observability.rules import Tier
from observability.scrape_config import shard_key, shard_scrape_configs

RULES_PATH = "prometheus/rules.yaml"
# The same rules, split into the tier every scrape shard evaluates and the global tier.
TIER_RULES_PATHS = {Tier.SHARD: "prometheus/rules-shard.yaml", Tier.GLOBAL: "prometheus/rules-global.yaml"}
SCRAPE_CONFIG_PATH = "prometheus/scrape-config.yaml"  # one per shard with several shards
DATASOURCES_PATH = "grafana/datasources.yaml"
ALERTMANAGER_PATH = "alertmanager/alertmanager.yaml"
ALERTMANAGER_TEMPLATE_PATH = f"alertmanager/{TEMPLATE_FILE}"
# The Alertmanager cluster: each peer's gossip flags, or the operator's Alertmanager fields.
ALERTMANAGER_CLUSTER_PATH = "alertmanager/cluster.yaml"


def secret_placeholder(key: str) -> str:
    """Stands for the Pulumi secret `key` in readable files: stable, and never a real value."""
    return f"https://pulumi-secret.invalid/{key}"


def alertmanager_yaml(settings: Settings) -> str:
    """The routing tree as Alertmanager loads it, readable; the receivers' credentials are secrets,
    so the file names each one's Pulumi secret (https://pulumi-secret.invalid/<key>), never a value."""
    alerting = settings.alerting
    given = dict(zip(RECEIVER_KEYS, _credentials(alerting), strict=True))

    def placeholder(key: str) -> str | None:
        return secret_placeholder(key) if given[key] is not None else None

    receivers = ReceiverUrls(
        page=placeholder("alertPageWebhookUrl"),
        chat=placeholder("alertChatWebhookUrl"),
        low_priority=placeholder("alertLowPriorityWebhookUrl"),
        heartbeat=placeholder("alertHeartbeatUrl"),
        slack_api_url=placeholder("alertSlackApiUrl"),
        pagerduty_routing_key=(
            "pulumi-secret.invalid/alertPagerDutyRoutingKey" if given["alertPagerDutyRoutingKey"] is not None else None
        ),
    )
    header = (
        f"# Alertmanager routing of stack {settings.stack} ({settings.scrape.mode} mode). Receiver credentials\n"
        "# are Pulumi secrets: each one below names its secret; the deployed Secret carries the value.\n"
        f"# The notification texts are in {TEMPLATE_FILE}, beside this file.\n"
    )
    return header + alertmanager_config_yaml(settings.observability_config(), receivers)


def _credentials(alerting: AlertingReceivers) -> tuple[object, ...]:
    """The receivers' secrets in RECEIVER_KEYS order (None: not used by this stack)."""
    return (
        alerting.page_webhook_url,
        alerting.chat_webhook_url,
        alerting.low_priority_webhook_url,
        alerting.heartbeat_url,
        alerting.slack_api_url,
        alerting.pagerduty_routing_key,
    )


# What the stack's Prometheus servers must be given: their configs (annotations mode) or the
# Prometheus resources' fields (operator mode).
SERVER_CONFIG_DIR = "prometheus"
OPERATOR_SPECS_PATH = "prometheus/operator-prometheus-specs.yaml"


def scrape_config_paths(shards: int) -> list[str]:
    """`prometheus/scrape-config.yaml`, or `prometheus/scrape-config-shard-<i>.yaml` per shard."""
    return [shard_key(SCRAPE_CONFIG_PATH, i, shards) for i in range(shards)]


def artifact_files(settings: Settings) -> dict[str, str]:
    """Relative path under rendered/<stack>/ -> file text."""
    cfg = settings.observability_config()
    gen = generated(cfg)
    args = component_args(settings)
    files = {
        RULES_PATH: gen.rules_yaml,
        **{TIER_RULES_PATHS[tier]: text for tier, text in gen.tier_yaml.items()},
        **shard_scrape_configs(cfg, list(args.scrape_discovery.watched_namespaces), SCRAPE_CONFIG_PATH),
        DATASOURCES_PATH: stack_datasources_yaml(settings),
        ALERTMANAGER_PATH: alertmanager_yaml(settings),
        ALERTMANAGER_TEMPLATE_PATH: template_text(),
        ALERTMANAGER_CLUSTER_PATH: alertmanager_cluster_yaml(cfg, settings.scrape.mode),
        job_manifest_path(args.training_job): dump_yaml(job_manifest(args.training_job)),
    }
    files.update({f"dashboards/{uid}.json": text for uid, text in gen.dashboards.items()})
    files.update(prometheus_server_files(settings))
    return files


def prometheus_server_files(settings: Settings) -> dict[str, str]:
    """Each Prometheus server's config (annotations mode), or the fields the operator's Prometheus
    resources must set (operator mode): external labels, shards, rule selection, remote write."""
    cfg = settings.observability_config()
    remote_write = settings.prometheus.remote_write_url
    forwarded = dashboards.global_tier_series(cfg) if cfg.shards > 1 else ()
    if settings.scrape.mode == "operator":
        selector = settings.scrape.operator_selector
        return {OPERATOR_SPECS_PATH: operator_specs_yaml(cfg, selector, remote_write, forwarded)}
    namespaces = list(component_args(settings).scrape_discovery.watched_namespaces)
    configs = server_configs(cfg, namespaces, remote_write, RULE_FILES, forwarded)
    return {f"{SERVER_CONFIG_DIR}/{name}": text for name, text in configs.items()}
