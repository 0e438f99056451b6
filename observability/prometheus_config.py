"""What each Prometheus server of a stack is configured with: external labels, rules, remote write.

The project does not run Prometheus itself; it renders what each server must be given, so that the
stack's `cluster` becomes every server's `cluster` external label and a sharded stack's servers
load the right files (docs/scaling.md):

- `server_configs(cfg, ...)`: complete `prometheus.yml` files for annotations mode, each with the
  shard's scrape config inlined (any Prometheus 2.x loads it; `promtool check config` checks it).
  One shard: `prometheus.yml` (every rule). Several: `prometheus-shard-<i>.yml` (its scrape config,
  the shard tier, remote write to the global tier) and `prometheus-global.yml` (the global tier,
  no fleet scraping, started with `--web.enable-remote-write-receiver`).
- `operator_specs(cfg, ...)`: the fields the Prometheus Operator's Prometheus resources must set:
  the scraping resource (`shards`, `externalLabels`, the PodMonitor and rule selectors, remote
  write) and, when sharded, the global tier's.

Every server keeps exemplars (the training jobs' `trace_id` exemplars, which Grafana links to
Tempo): the files say it needs `--enable-feature=exemplar-storage`, the operator fields set
`enableFeatures`, and the shards' remote write sends exemplars on to the global tier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from observability.config import ObservabilityConfig, RemoteWrite
from observability.partials import PARTIAL_SERIES_REGEX, SHARD_LABEL
from observability.scrape_config import EXEMPLAR_STORAGE_FEATURE, annotation_scrape_configs, requirement_comment

CLUSTER_LABEL = "cluster"
# The label of the PrometheusRules of each tier, which the Prometheus resources select by.
TIER_LABEL = "foxhunt.io/rule-tier"
REMOTE_WRITE_PATH = "/api/v1/write"  # a Prometheus receiver's (Mimir: /api/v1/push)
# What the Prometheus Operator's config reloader replaces with the shard's number in the config
# it generates (the whole file is expanded, remote write included).
OPERATOR_SHARD = "$(SHARD)"


def write_relabel_configs(cfg: ObservabilityConfig, shard: str, forwarded: Sequence[str]) -> list[dict[str, Any]]:
    """The shards' remote-write relabelling: every partial gets the shard's `shard` label (the
    partials of two shards are two series in the global tier); with `remoteWrite: aggregates`,
    only the partials and the `forwarded` series (`dashboards.global_tier_series`) are written."""
    configs: list[dict[str, Any]] = [
        {"source_labels": ["__name__"], "regex": PARTIAL_SERIES_REGEX, "target_label": SHARD_LABEL,
         "replacement": shard},
    ]  # fmt: skip
    if cfg.remote_write is RemoteWrite.AGGREGATES:
        names = "|".join(re.escape(name) for name in sorted(set(forwarded)))
        configs.append({"source_labels": ["__name__"], "regex": f"{PARTIAL_SERIES_REGEX}|{names}", "action": "keep"})
    return configs


@dataclass(frozen=True)
class RuleFiles:
    """The rules files as the servers find them (the rules ConfigMap's keys, mounted)."""

    whole: str
    shard: str
    global_tier: str


def external_labels(cfg: ObservabilityConfig) -> dict[str, str]:
    """Every server's external labels: the stack's cluster (none without a cluster name)."""
    return {CLUSTER_LABEL: cfg.cluster} if cfg.cluster else {}


def _global_section(cfg: ObservabilityConfig) -> dict[str, Any]:
    section: dict[str, Any] = {
        "scrape_interval": f"{cfg.scrape_interval_seconds}s",
        "evaluation_interval": f"{cfg.evaluation_interval_seconds}s",
    }
    labels = external_labels(cfg)
    if labels:
        section["external_labels"] = labels
    return section


def config_file_name(shard: int | None, shards: int) -> str:
    """`prometheus.yml` with one shard; `prometheus-shard-<i>.yml`, `prometheus-global.yml` (None)."""
    if shards == 1:
        return "prometheus.yml"
    return "prometheus-global.yml" if shard is None else f"prometheus-shard-{shard}.yml"


def server_configs(
    cfg: ObservabilityConfig,
    namespaces: Sequence[str],
    remote_write_url: str,
    rule_files: RuleFiles,
    forwarded: Sequence[str] = (),
) -> dict[str, str]:
    """File name -> `prometheus.yml` text of every server of the stack (annotations mode)."""
    if cfg.shards == 1:
        document = {
            "global": _global_section(cfg),
            "rule_files": [rule_files.whole],
            "scrape_configs": annotation_scrape_configs(cfg, namespaces),
        }
        return {config_file_name(0, 1): requirement_comment() + _dump(document)}
    files = {}
    for shard in range(cfg.shards):
        document = {
            "global": _global_section(cfg),
            "rule_files": [rule_files.shard],
            "scrape_configs": annotation_scrape_configs(cfg, namespaces, shard),
            "remote_write": [
                {
                    "url": remote_write_url,
                    "send_exemplars": True,
                    "write_relabel_configs": write_relabel_configs(cfg, str(shard), forwarded),
                }
            ],
        }
        files[config_file_name(shard, cfg.shards)] = requirement_comment() + _dump(document)
    global_tier = {"global": _global_section(cfg), "rule_files": [rule_files.global_tier]}
    files[config_file_name(None, cfg.shards)] = requirement_comment() + _dump(global_tier)
    return files


def operator_specs(
    cfg: ObservabilityConfig, operator_selector: Mapping[str, str], remote_write_url: str, forwarded: Sequence[str] = ()
) -> dict[str, Any]:
    """The Prometheus resources' spec fields this stack relies on (operator mode), by resource."""
    selector = dict(sorted(operator_selector.items()))
    scraping: dict[str, Any] = {
        "enableFeatures": [EXEMPLAR_STORAGE_FEATURE],
        "externalLabels": external_labels(cfg),
        "podMonitorSelector": {"matchLabels": selector},
        "ruleSelector": {"matchLabels": selector},
    }
    if cfg.shards == 1:
        return {"prometheus": scraping}
    scraping["shards"] = cfg.shards
    scraping["ruleSelector"] = {"matchLabels": {**selector, TIER_LABEL: "shard"}}
    relabel = [
        {_CAMEL.get(k, k): v for k, v in c.items()} for c in write_relabel_configs(cfg, OPERATOR_SHARD, forwarded)
    ]
    scraping["remoteWrite"] = [{"url": remote_write_url, "sendExemplars": True, "writeRelabelConfigs": relabel}]
    global_tier = {
        "enableFeatures": [EXEMPLAR_STORAGE_FEATURE],
        "enableRemoteWriteReceiver": True,
        "externalLabels": external_labels(cfg),
        "podMonitorSelector": None,
        "ruleSelector": {"matchLabels": {**selector, TIER_LABEL: "global"}},
    }
    return {"prometheus-shards": scraping, "prometheus-global": global_tier}


def operator_specs_yaml(
    cfg: ObservabilityConfig, operator_selector: Mapping[str, str], remote_write_url: str, forwarded: Sequence[str] = ()
) -> str:
    return _dump(operator_specs(cfg, operator_selector, remote_write_url, forwarded))


# The operator's RelabelConfig spells the Prometheus fields in camel case.
_CAMEL = {"source_labels": "sourceLabels", "target_label": "targetLabel"}


def _dump(document: Any) -> str:
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=10_000)
    return text
