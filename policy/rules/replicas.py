"""Prometheus replicas for high availability: each replica tells its copies apart, and alerts do not.

Replicas of one Prometheus (kube-prometheus runs 2) scrape the same targets and evaluate the same
rules. Each must carry its own value of a replica label as an external label, so that what they
remote-write stays two copies the global tier can deduplicate, and each must drop that label from
its alerts, so that Alertmanager sees one alert, not one per replica, and notifies once.

- A `Prometheus` resource (the Prometheus Operator's) with more than one replica must keep its
  replica label: `replicaExternalLabelName: ""` turns it off, and the label must not be overridden
  by `externalLabels`. The operator drops the label from alerts itself.
- The rendered server configs (`prometheus/prometheus-*replica-<r>.yml`, annotations mode) must each
  carry the replica label, with a different value per replica of a server, drop it in
  `alerting.alert_relabel_configs`, and send to Alertmanager; the rendered operator fields
  (`prometheus/operator-prometheus-specs.yaml`) must keep the replica label of a replicated resource.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from policy.manifests import as_int, mapping, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

OPERATOR_DEFAULT_LABEL = "prometheus_replica"
_REPLICA_FILE = re.compile(r"^prometheus/(?P<server>prometheus(-shard-\d+)?)-replica-(?P<replica>\d+)\.yml$")
OPERATOR_SPECS = "prometheus/operator-prometheus-specs.yaml"


def _replicas(value: Any) -> int:
    return as_int(value) or 1


def spec_findings(spec: Mapping[str, Any], prefix: str) -> Iterator[Finding]:
    """A Prometheus resource's spec: a replicated one keeps its replica label."""
    replicas = _replicas(spec.get("replicas"))
    if replicas < 2:
        return
    label = spec.get("replicaExternalLabelName", OPERATOR_DEFAULT_LABEL)
    if not isinstance(label, str) or not label:
        yield Finding(
            f"{prefix}.replicaExternalLabelName",
            f"{replicas} replicas carry no replica label: their remote-written copies are one series "
            "twice over (counted twice by the global tier), and nothing tells their alerts' sources apart",
            f"remove replicaExternalLabelName (the operator's {OPERATOR_DEFAULT_LABEL}) or give it a label name",
        )
    elif label in mapping(spec.get("externalLabels")):
        yield Finding(
            f"{prefix}.externalLabels.{label}",
            f"externalLabels sets the replica label {label} to one value for every replica",
            f"remove {label} from externalLabels: the operator gives each replica its own value",
        )


def check_prometheus(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    if obj.kind == "Prometheus":
        yield from spec_findings(mapping(obj.manifest.get("spec")), "spec")


def _drops(relabel: Any, label: str) -> bool:
    for item in sequence(relabel):
        rule = mapping(item)
        regex = string(rule.get("regex"))
        if rule.get("action") == "labeldrop" and regex is not None:
            try:
                if re.fullmatch(regex, label):
                    return True
            except re.error:
                continue
    return False


def _server_findings(name: str, document: Mapping[str, Any], label: str | None) -> Iterator[Finding]:
    labels = mapping(mapping(document.get("global")).get("external_labels"))
    if label is None or label not in labels:
        yield Finding(
            "global.external_labels",
            "a replica's config carries no replica label: its copies cannot be told from the other replica's",
            "give every replica an external label naming it (prometheus.replicaLabel), one value per replica",
        )
        return
    alerting = mapping(document.get("alerting"))
    if not _drops(alerting.get("alert_relabel_configs"), label):
        yield Finding(
            "alerting.alert_relabel_configs",
            f"alerts keep the replica label {label}: Alertmanager receives one alert per replica and notifies twice",
            f"add alert_relabel_configs: [{{action: labeldrop, regex: {label}}}]",
        )
    if not sequence(alerting.get("alertmanagers")):
        yield Finding(
            "alerting.alertmanagers",
            "the replica sends its alerts to no Alertmanager",
            "list every Alertmanager peer of the cluster under alerting.alertmanagers",
        )


def _replica_label(documents: list[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The label whose value differs between the replicas of one server (None: none does)."""
    if len(documents) < 2:
        return None
    label_sets = [mapping(mapping(d.get("global")).get("external_labels")) for _, d in documents]
    for name in label_sets[0]:
        values = [labels.get(name) for labels in label_sets]
        if all(v is not None for v in values) and len(set(values)) == len(values):
            return str(name)
    return None


def replica_file_findings(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    servers: dict[str, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for name, text in files.items():
        match = _REPLICA_FILE.match(name)
        if match is None:
            continue
        try:
            document = mapping(yaml.safe_load(text))
        except yaml.YAMLError:
            continue
        servers[match["server"]].append((name, document))
    for documents in servers.values():
        label = _replica_label(documents)
        for name, document in documents:
            yield from ((name, finding) for finding in _server_findings(name, document, label))
    if OPERATOR_SPECS in files:
        try:
            specs = mapping(yaml.safe_load(files[OPERATOR_SPECS]))
        except yaml.YAMLError:
            return
        for resource, spec in specs.items():
            yield from ((OPERATOR_SPECS, f) for f in spec_findings(mapping(spec), str(resource)))


PROMETHEUS_REPLICAS = Policy(
    id="prometheus-replicas",
    description=(
        "Replicated Prometheus servers carry a replica label, one value per replica, and drop it from their "
        "alerts (sent to every Alertmanager peer), so the global tier deduplicates their copies and Alertmanager "
        "notifies once."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation=(
        "Keep the replica external label on every replica (prometheus.replicaLabel; the operator's "
        "replicaExternalLabelName) and drop it in alert_relabel_configs."
    ),
    check=check_prometheus,
    file_check=replica_file_findings,
    tags=("alerting", "high-availability"),
)
