"""Files the render writes besides the Kubernetes objects (rules, scrape config, datasources,
dashboards, the training Job template), built by the same functions the components use.

`generated(cfg)` runs the expensive generators (rule groups, dashboards) once per config and is
shared by the program (ConfigMaps, PrometheusRule) and these files, so both always agree.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dashboards
from infra.components.scrape_discovery import watched_namespaces
from infra.components.training_job import job_manifest, job_manifest_path
from infra.settings import Settings
from observability import rules
from observability.alertmanager import ReceiverUrls, alertmanager_config_yaml
from observability.config import ObservabilityConfig
from observability.datasources import DatasourceEndpoints, datasources_yaml
from observability.scrape_config import scrape_config_yaml

RULES_PATH = "prometheus/rules.yaml"
SCRAPE_CONFIG_PATH = "prometheus/scrape-config.yaml"
DATASOURCES_PATH = "grafana/datasources.yaml"
ALERTMANAGER_PATH = "alertmanager/alertmanager.yaml"
# The CrossGuard pack's config (`--policy-pack-config`): the policies' stack context, derived from
# the stack's settings here and nowhere else.
PACK_CONFIG_PATH = "policy/pack-config.json"


@dataclass(frozen=True)
class Generated:
    rule_groups: tuple[dict[str, Any], ...]
    rules_yaml: str
    dashboards: Mapping[str, str]  # uid -> dashboard JSON text


@functools.lru_cache(maxsize=8)
def generated(cfg: ObservabilityConfig) -> Generated:
    return Generated(
        rule_groups=tuple(rules.rule_groups(cfg)),
        rules_yaml=rules.rules_file_yaml(cfg),
        dashboards={uid: dashboards.to_json(d) for uid, d in sorted(dashboards.build_all(cfg).items())},
    )


def datasource_endpoints(settings: Settings) -> DatasourceEndpoints:
    e = settings.endpoints
    return DatasourceEndpoints(prometheus=e.prometheus, loki=e.loki, tempo=e.tempo_query)


def secret_placeholder(key: str) -> str:
    """Stands for the Pulumi secret `key` in readable files: stable, and never a real value."""
    return f"https://pulumi-secret.invalid/{key}"


def alertmanager_yaml(settings: Settings, cfg: ObservabilityConfig) -> str:
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
    return header + alertmanager_config_yaml(cfg, receivers)


def pack_config_json(settings: Settings) -> str:
    from infra.policy_context import context_from_settings
    from policy.pack_config import context_to_config

    return json.dumps(context_to_config(context_from_settings(settings)), indent=2, sort_keys=True) + "\n"


def artifact_files(settings: Settings) -> dict[str, str]:
    """Relative path under rendered/<stack>/ -> file text."""
    from infra.render import dump_yaml

    cfg = settings.observability_config()
    gen = generated(cfg)
    files = {
        RULES_PATH: gen.rules_yaml,
        SCRAPE_CONFIG_PATH: scrape_config_yaml(cfg, watched_namespaces(settings)),
        DATASOURCES_PATH: datasources_yaml(cfg, datasource_endpoints(settings)),
        ALERTMANAGER_PATH: alertmanager_yaml(settings, cfg),
        PACK_CONFIG_PATH: pack_config_json(settings),
        job_manifest_path(settings): dump_yaml(job_manifest(settings, cfg)),
    }
    files.update({f"dashboards/{uid}.json": text for uid, text in gen.dashboards.items()})
    return files
