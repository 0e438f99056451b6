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

High availability (`prometheus.replicas` > 1): every scraping server runs as that many replicas,
each with the same configuration but its own `replica_label` external label (`<file>-replica-<r>`
in annotations mode; the operator's `replicas` and `replicaExternalLabelName`), so that the global
tier tells their copies apart and deduplicates them (`observability.promql.replicas`), and every
server drops the label from its alerts (`alert_relabel_configs`; the operator adds the same), so that
two replicas' alerts are one alert to Alertmanager. Every server sends to every Alertmanager peer
(`cfg.alertmanager_peers`); `alertmanager_cluster(cfg, mode)` renders the peers' gossip flags, or
the operator's Alertmanager resource fields.

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
# The Prometheus Operator's replica label: kube-prometheus runs 2 replicas, each labelled with its pod.
DEFAULT_REPLICA_LABEL = "prometheus_replica"
MAX_REPLICAS = 10
# Labels the fleet's series already carry (target labels, the shards' and the stack's own): a
# replica label must be none of them.
TAKEN_LABELS = frozenset(
    {CLUSTER_LABEL, SHARD_LABEL, "job", "instance", "namespace", "pod", "node", "service", "container", "le"}
)
ALERTMANAGER_WEB_PORT = 9093
ALERTMANAGER_CLUSTER_PORT = 9094
PROMETHEUS_WEB_PORT = 9090
# kube-prometheus' Prometheus resource: pods `prometheus-k8s-<i>` behind the headless Service
# `prometheus-operated`, scraped by its ServiceMonitor `prometheus-k8s` as the job of that name. The
# replicas of an unsharded pair read each other's `up` in that job: in operator mode kube-prometheus
# scrapes it, in annotations mode every replica's config scrapes its peers under the same name.
PROMETHEUS_NAME = "k8s"
PROMETHEUS_REPLICAS_JOB = f"prometheus-{PROMETHEUS_NAME}"


def alertmanager_peer_addresses(name: str, namespace: str, replicas: int) -> tuple[str, ...]:
    """The web addresses of the operator's Alertmanager `name` (pods `alertmanager-<name>-<i>`
    behind the headless Service `alertmanager-operated`), as kube-prometheus names them."""
    host = f"alertmanager-operated.{namespace}.svc:{ALERTMANAGER_WEB_PORT}"
    return tuple(f"alertmanager-{name}-{i}.{host}" for i in range(replicas))


def prometheus_peer_addresses(name: str, namespace: str, replicas: int) -> tuple[str, ...]:
    """The web addresses of the operator's Prometheus `name` (pods `prometheus-<name>-<i>` behind
    the headless Service `prometheus-operated`), as kube-prometheus names them."""
    host = f"prometheus-operated.{namespace}.svc:{PROMETHEUS_WEB_PORT}"
    return tuple(f"prometheus-{name}-{i}.{host}" for i in range(replicas))


def peer_scrape_configs(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """On an unsharded replicated stack, the job by which each replica scrapes every replica of the
    pair (itself included), so that a survivor sees a peer's `up` drop to 0; otherwise none."""
    if cfg.shards > 1 or cfg.prometheus_replicas == 1 or not cfg.prometheus_peers:
        return []
    return [
        {
            "job_name": PROMETHEUS_REPLICAS_JOB,
            "scrape_interval": f"{cfg.scrape_interval_seconds}s",
            "scrape_timeout": f"{min(cfg.scrape_interval_seconds, 10)}s",
            "static_configs": [{"targets": list(cfg.prometheus_peers)}],
        }
    ]


def replica_value(replica: int) -> str:
    """The replica label's value on replica `replica` of a server (annotations mode)."""
    return f"replica-{replica}"


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


def external_labels(cfg: ObservabilityConfig, replica: int | None = None) -> dict[str, str]:
    """A server's external labels: the stack's cluster (none without a cluster name) and, on
    replica `replica` of a replicated server, the replica label."""
    labels = {CLUSTER_LABEL: cfg.cluster} if cfg.cluster else {}
    if replica is not None and cfg.prometheus_replicas > 1:
        labels[cfg.replica_label] = replica_value(replica)
    return labels


def _global_section(cfg: ObservabilityConfig, replica: int | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {
        "scrape_interval": f"{cfg.scrape_interval_seconds}s",
        "evaluation_interval": f"{cfg.evaluation_interval_seconds}s",
    }
    labels = external_labels(cfg, replica)
    if labels:
        section["external_labels"] = labels
    return section


def alert_relabel_configs(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """What every server does to its alerts before sending them: drop the replica label, so that the
    replicas' copies of an alert have one label set and Alertmanager notifies once."""
    if cfg.prometheus_replicas == 1:
        return []
    return [{"action": "labeldrop", "regex": re.escape(cfg.replica_label)}]


def alerting_section(cfg: ObservabilityConfig) -> dict[str, Any]:
    """Every Alertmanager peer of the cluster as one target group (Prometheus sends each alert to
    every peer; the peers' gossip delivers one notification), and the alerts' relabelling."""
    section: dict[str, Any] = {}
    relabel = alert_relabel_configs(cfg)
    if relabel:
        section["alert_relabel_configs"] = relabel
    if cfg.alertmanager_peers:
        section["alertmanagers"] = [{"static_configs": [{"targets": list(cfg.alertmanager_peers)}]}]
    return section


def config_file_name(shard: int | None, shards: int, replica: int | None = None, replicas: int = 1) -> str:
    """`prometheus.yml` with one shard; `prometheus-shard-<i>.yml`, `prometheus-global.yml` (None);
    with replicas, each scraping server's file per replica (`prometheus-replica-<r>.yml`,
    `prometheus-shard-<i>-replica-<r>.yml`); the global tier is one writer."""
    base = "prometheus-global" if shard is None else f"prometheus-shard-{shard}"
    if shards == 1:
        base = "prometheus"
    if replicas > 1 and replica is not None and (shard is not None or shards == 1):
        base += f"-replica-{replica}"
    return f"{base}.yml"


def server_configs(
    cfg: ObservabilityConfig,
    namespaces: Sequence[str],
    remote_write_url: str,
    rule_files: RuleFiles,
    forwarded: Sequence[str] = (),
) -> dict[str, str]:
    """File name -> `prometheus.yml` text of every server of the stack (annotations mode)."""
    replicas = range(cfg.prometheus_replicas)
    alerting = alerting_section(cfg)
    files = {}
    if cfg.shards == 1:
        for replica in replicas:
            document: dict[str, Any] = {"global": _global_section(cfg, replica), "rule_files": [rule_files.whole]}
            if alerting:
                document["alerting"] = alerting
            document["scrape_configs"] = annotation_scrape_configs(cfg, namespaces) + peer_scrape_configs(cfg)
            name = config_file_name(0, 1, replica, cfg.prometheus_replicas)
            files[name] = requirement_comment() + _dump(document)
        return files
    for shard in range(cfg.shards):
        for replica in replicas:
            document = {"global": _global_section(cfg, replica), "rule_files": [rule_files.shard]}
            if alerting:
                document["alerting"] = alerting
            document["scrape_configs"] = annotation_scrape_configs(cfg, namespaces, shard)
            document["remote_write"] = [
                {
                    "url": remote_write_url,
                    "send_exemplars": True,
                    "write_relabel_configs": write_relabel_configs(cfg, str(shard), forwarded),
                }
            ]
            name = config_file_name(shard, cfg.shards, replica, cfg.prometheus_replicas)
            files[name] = requirement_comment() + _dump(document)
    global_tier: dict[str, Any] = {"global": _global_section(cfg), "rule_files": [rule_files.global_tier]}
    if alerting:
        global_tier["alerting"] = alerting
    files[config_file_name(None, cfg.shards)] = requirement_comment() + _dump(global_tier)
    return files


def alertmanager_cluster(cfg: ObservabilityConfig, mode: str) -> dict[str, Any]:
    """The Alertmanager cluster: in annotations mode each peer's address and the gossip flags it
    runs with (every other peer as `--cluster.peer`); in operator mode the Alertmanager resource's
    fields (the operator wires the peers of its StatefulSet itself)."""
    if mode == "operator":
        return {"alertmanager": {"replicas": cfg.alertmanager_replicas}}
    peers = []
    hosts = [address.rsplit(":", 1)[0] for address in cfg.alertmanager_peers]
    for i, address in enumerate(cfg.alertmanager_peers):
        others = [f"--cluster.peer={host}:{ALERTMANAGER_CLUSTER_PORT}" for j, host in enumerate(hosts) if j != i]
        listen = f"0.0.0.0:{ALERTMANAGER_CLUSTER_PORT}" if len(hosts) > 1 else ""
        peers.append({"address": address, "args": [f"--cluster.listen-address={listen}", *others]})
    return {"peers": peers}


def alertmanager_cluster_yaml(cfg: ObservabilityConfig, mode: str) -> str:
    return _dump(alertmanager_cluster(cfg, mode))


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
    if cfg.prometheus_replicas > 1:
        # The operator labels each replica with its pod name under this label and drops the label
        # from the alerts it sends (its generated alert_relabel_configs).
        scraping["replicas"] = cfg.prometheus_replicas
        scraping["replicaExternalLabelName"] = cfg.replica_label
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
