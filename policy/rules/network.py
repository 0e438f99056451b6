"""Every pod this project owns that serves a metrics port sits behind a NetworkPolicy: one that
selects it, restricts its ingress, and admits the metrics port only from selected pods (never from
everywhere, never from a whole namespace). Without one, any pod in the cluster can reach the
endpoint (and hold it busy); the platform services' Deployments are patched, not owned, and so are
not checked here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policy.manifests import PodTemplate, as_int, containers, mapping, pod_templates, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

PORT_ANNOTATION = "prometheus.io/port"


def metrics_ports(template: PodTemplate) -> tuple[set[int], set[str]]:
    """The ports a scraper reaches: every declared container port (numbers and names) and the
    annotated scrape port."""
    numbers: set[int] = set()
    names: set[str] = set()
    for container in containers(template, ("containers",)):
        for port in sequence(container.spec.get("ports")):
            number = as_int(mapping(port).get("containerPort"))
            if number is not None:
                numbers.add(number)
            name = string(mapping(port).get("name"))
            if name:
                names.add(name)
    annotated = as_int(template.annotations.get(PORT_ANNOTATION))
    if annotated is not None:
        numbers.add(annotated)
    return numbers, names


def selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) selects these labels."""
    for key, value in mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in sequence(selector.get("matchExpressions")):
        e = mapping(expression)
        key, operator = str(e.get("key")), e.get("operator")
        values = [str(v) for v in sequence(e.get("values"))]
        present = key in labels
        if operator == "In" and not (present and str(labels[key]) in values):
            return False
        if operator == "NotIn" and present and str(labels[key]) in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def restricts_ingress(spec: Mapping[str, Any]) -> bool:
    types = [str(t) for t in sequence(spec.get("policyTypes"))]
    return not types or "Ingress" in types  # no policyTypes: Ingress is implied


def opens_port(rule: Mapping[str, Any], numbers: set[int], names: set[str]) -> bool:
    ports = sequence(rule.get("ports"))
    if not ports:
        return True  # a rule without ports admits every port
    for port in ports:
        p = mapping(port).get("port")
        if p is None or as_int(p) in numbers or (isinstance(p, str) and p in names):
            return True
        end = as_int(mapping(port).get("endPort"))
        start = as_int(p)
        if start is not None and end is not None and any(start <= n <= end for n in numbers):
            return True
    return False


def peer_problem(peer: Mapping[str, Any]) -> str | None:
    """What is too wide about one `from` peer, or None."""
    if "ipBlock" in peer:
        return "admits an IP block (pod IPs change; select the scraping pods by label)"
    pods = peer.get("podSelector")
    if pods is None or not mapping(pods):
        where = "every namespace" if "namespaceSelector" in peer and not mapping(peer["namespaceSelector"]) else ""
        return f"admits every pod of {where or 'the namespace it names'} (an empty or missing podSelector)"
    return None


def _policies(objects: Sequence[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if o.kind == "NetworkPolicy" and not o.is_patch]


def check_network_coverage(
    objects: Sequence[KubeObject], ctx: PolicyContext
) -> Iterator[tuple[KubeObject | None, Finding]]:
    policies = _policies(objects)
    for obj in objects:
        if obj.is_patch:
            continue
        for template in pod_templates(obj):
            numbers, names = metrics_ports(template)
            if not numbers and not names:
                continue
            shown = ", ".join(str(n) for n in sorted(numbers)) or ", ".join(sorted(names))
            covering = [
                p
                for p in policies
                if p.namespace == obj.namespace
                and restricts_ingress(mapping(p.manifest.get("spec")))
                and selects(mapping(mapping(p.manifest.get("spec")).get("podSelector")), template.labels)
            ]
            if not covering:
                yield (
                    obj,
                    Finding(
                        template.field("metadata.labels"),
                        f"pods of {obj.kind} {obj.name} serve port {shown} but no NetworkPolicy in "
                        f"{obj.namespace or '?'} selects them: every pod of the cluster can reach it",
                        "add a NetworkPolicy that selects these pods, restricts Ingress and admits the metrics port "
                        "only from the stack's Prometheus pods",
                    ),
                )
                continue
            for policy in covering:
                for i, rule in enumerate(sequence(mapping(policy.manifest.get("spec")).get("ingress"))):
                    r = mapping(rule)
                    if not opens_port(r, numbers, names):
                        continue
                    peers = sequence(r.get("from"))
                    if not peers:
                        yield (
                            policy,
                            Finding(
                                f"spec.ingress[{i}].from",
                                f"admits port {shown} of {obj.kind} {obj.name} from anywhere (no `from`)",
                                "name the peers: the stack's Prometheus pods by namespace and pod labels",
                            ),
                        )
                        continue
                    for j, peer in enumerate(peers):
                        problem = peer_problem(mapping(peer))
                        if problem:
                            yield (
                                policy,
                                Finding(
                                    f"spec.ingress[{i}].from[{j}]",
                                    f"{problem}, on port {shown} of {obj.kind} {obj.name}",
                                    "select the peers by pod labels (and their namespace by name)",
                                ),
                            )


NETWORK_POLICY_COVERAGE = Policy(
    id="network-policy-coverage",
    description="Every owned pod with a metrics port is selected by a NetworkPolicy that restricts its ingress and "
    "admits the port only from selected pods.",
    enforcement=Enforcement.MANDATORY,
    remediation="Render a NetworkPolicy per owned workload (infra/components/network_policies.py) that admits the "
    "metrics port from the stack's Prometheus pods only.",
    stack_check=check_network_coverage,
    tags=("security", "network"),
)
