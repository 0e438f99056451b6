"""NetworkIsolation: a NetworkPolicy for every pod this project owns.

- GPU poller (DaemonSet): ingress to its metrics port only from the stack's Prometheus pods
  (`scrape.prometheusPods`: their namespace by name and their pod labels); no egress at all (NVML
  is a local library; the poller calls nothing over the network).
- Training jobs (the template's pods): ingress to the metrics ports (one per local rank when
  torchrun runs) only from the same Prometheus pods, and from the other pods of the training
  template in their namespace on every port (the ranks of a multi-node job meet at the static
  rendezvous of index 0 and run collectives over ports NCCL and gloo pick); egress stays open
  (data, checkpoints, the OTLP endpoint). A NetworkPolicy cannot say "pods of the same Job" for
  Jobs created later from a template, so the ranks' rule admits every pod of the template.

Kubelet probes come from the node and are not subject to NetworkPolicies on the common CNIs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata

TYPE = "foxhunt:observability:NetworkIsolation"
COMPONENT = "network"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace


@dataclass(frozen=True)
class OwnedPods:
    """Pods of one workload: what selects them, the port scrapers reach, and what else they need."""

    name: str  # of the NetworkPolicy (the workload's name)
    app: str  # the `app.kubernetes.io/name` of the policy's own labels
    namespace: str
    pod_selector: Mapping[str, str]
    metrics_port: int
    egress: bool  # False: every egress is denied
    metrics_ports: int = 1  # consecutive metrics ports from metrics_port (one per local rank)
    peers_within: bool = False  # ingress on every port from the other pods the selector selects


@dataclass(frozen=True)
class NetworkIsolationArgs:
    pods: tuple[OwnedPods, ...]
    prometheus_namespace: str
    prometheus_pod_selector: Mapping[str, str]
    common_labels: Mapping[str, str]


def prometheus_peer(args: NetworkIsolationArgs) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: args.prometheus_namespace}},
        "podSelector": {"matchLabels": dict(args.prometheus_pod_selector)},
    }


def network_policy_spec(pods: OwnedPods, args: NetworkIsolationArgs) -> dict[str, Any]:
    selector = {"matchLabels": dict(pods.pod_selector)}
    port: dict[str, Any] = {"protocol": "TCP", "port": pods.metrics_port}
    if pods.metrics_ports > 1:
        port["endPort"] = pods.metrics_port + pods.metrics_ports - 1
    ingress: list[dict[str, Any]] = [{"from": [prometheus_peer(args)], "ports": [port]}]
    if pods.peers_within:
        ingress.append({"from": [{"podSelector": selector}]})
    spec: dict[str, Any] = {
        "podSelector": selector,
        "policyTypes": ["Ingress"] if pods.egress else ["Ingress", "Egress"],
        "ingress": ingress,
    }
    if not pods.egress:
        spec["egress"] = []
    return spec


class NetworkIsolation(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkIsolationArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{pods.name}",
                metadata=metadata(args.common_labels, pods.name, pods.namespace, app=pods.app, component=COMPONENT),
                spec=network_policy_spec(pods, args),
                opts=child(self),
            )
            for pods in args.pods
        ]
        self.register_outputs({})
