"""ScrapeDiscovery: what makes Prometheus act on the `prometheus.io/*` annotations.

- scrape mode `annotations`: the pod-role scrape config (observability.scrape_config), delivered
  as the object the stack names: a ConfigMap (key `scrape-config.yaml`, a `scrape_configs:`
  document for Prometheus' `scrape_config_files`) or the operator's additional-scrape-configs
  Secret (key `prometheus-additional.yaml`, a bare list, for `additionalScrapeConfigs`).
- scrape mode `operator`: a PodMonitor with the same relabelling, labelled with the stack's
  operator selector so the Prometheus custom resource picks it up. `scrape.delivery` and
  `scrape.objectName` are not used in this mode (a second job would scrape every pod twice).

Watched namespaces: platform (services), training (jobs) and monitoring (the GPU poller).

With more than one scrape shard (`prometheus.shards`), the ConfigMap or Secret holds one key per
shard (`scrape-config-shard-<i>.yaml`, `prometheus-additional-shard-<i>.yaml`): shard i loads its
own, which keeps only the targets `hashmod` of their pod's node assigns it. The operator shards
the PodMonitor itself when the Prometheus resource sets `spec.shards`; the PodMonitor hands it
the pod's node name as the key to hash (docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import Namespaces, ScrapeSettings
from observability import scrape_config
from observability.config import ObservabilityConfig

TYPE = "foxhunt:observability:ScrapeDiscovery"
APP = "scrape-discovery"
COMPONENT = "monitoring"


def watched_namespaces(ns: Namespaces) -> tuple[str, ...]:
    return tuple(sorted({ns.platform, ns.training, ns.monitoring}))


@dataclass(frozen=True)
class ScrapeDiscoveryArgs:
    scrape: ScrapeSettings
    cfg: ObservabilityConfig  # the scrape config is generated from it
    watched_namespaces: tuple[str, ...]
    namespace: str  # where the scrape config object lives (monitoring)
    common_labels: Mapping[str, str]


class ScrapeDiscovery(pulumi.ComponentResource):
    def __init__(self, name: str, args: ScrapeDiscoveryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        cfg, scrape, namespaces = args.cfg, args.scrape, list(args.watched_namespaces)
        requirements = scrape_config.prometheus_requirement_annotations()
        self.resource: pulumi.CustomResource
        if scrape.mode == "operator":
            self.resource = k8s.apiextensions.CustomResource(
                f"{name}-podmonitor",
                api_version="monitoring.coreos.com/v1",
                kind="PodMonitor",
                metadata=metadata(
                    args.common_labels, scrape_config.POD_MONITOR_NAME, args.namespace, app=APP, component=COMPONENT,
                    extra_labels=scrape.operator_selector, annotations=requirements,
                ),
                spec=scrape_config.pod_monitor_spec(cfg, namespaces),
                opts=child(self, formerly="annotated-pods-podmonitor"),
            )  # fmt: skip
        elif scrape.delivery == "secret":
            self.resource = k8s.core.v1.Secret(
                f"{name}-config",
                metadata=metadata(
                    args.common_labels,
                    scrape.object_name,
                    args.namespace,
                    app=APP,
                    component=COMPONENT,
                    annotations=requirements,
                ),
                type="Opaque",
                string_data=scrape_config.shard_scrape_configs(cfg, namespaces, scrape_config.SECRET_KEY),
                opts=child(self, formerly="annotation-scrape-config"),
            )
        else:
            self.resource = k8s.core.v1.ConfigMap(
                f"{name}-config",
                metadata=metadata(
                    args.common_labels,
                    scrape.object_name,
                    args.namespace,
                    app=APP,
                    component=COMPONENT,
                    annotations=requirements,
                ),
                data=scrape_config.shard_scrape_configs(cfg, namespaces, scrape_config.CONFIGMAP_KEY),
                opts=child(self, formerly="annotation-scrape-config"),
            )
        self.register_outputs({"mode": scrape.mode})
