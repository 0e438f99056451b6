"""GrafanaProvisioning: datasources and dashboards as ConfigMaps the Grafana sidecar loads.

- one datasources ConfigMap (label `grafana_datasource: "1"`): Prometheus, Loki and Tempo with
  fixed UIDs, cross-linked (observability.datasources);
- one ConfigMap per dashboard (label `grafana_dashboard: "1"`, annotation `grafana_folder: <folder>`
  for the sidecar's `folderAnnotation`), each checked against the 1 MiB object limit before
  anything is registered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata

TYPE = "foxhunt:observability:GrafanaProvisioning"
COMPONENT = "grafana"
DATASOURCE_LABEL = "grafana_datasource"
DASHBOARD_LABEL = "grafana_dashboard"
FOLDER_ANNOTATION = "grafana_folder"
DATASOURCES_NAME = "foxhunt-grafana-datasources"
DATASOURCES_KEY = "foxhunt-datasources.yaml"
OBJECT_LIMIT_BYTES = 1024 * 1024  # a ConfigMap (the whole object) must stay under 1 MiB


def dashboard_configmap_name(uid: str) -> str:
    return f"grafana-dashboard-{uid}"


def object_size(manifest: Mapping[str, object]) -> int:
    return len(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())


class DashboardTooLargeError(ValueError):
    pass


@dataclass(frozen=True)
class GrafanaProvisioningArgs:
    datasources_yaml: str  # observability.datasources
    dashboards: Mapping[str, str]  # uid -> dashboard JSON text (dashboards.to_json)
    folder: str
    namespace: str
    common_labels: Mapping[str, str]


class GrafanaProvisioning(pulumi.ComponentResource):
    def __init__(self, name: str, args: GrafanaProvisioningArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.datasources = k8s.core.v1.ConfigMap(
            f"{name}-datasources",
            metadata=metadata(
                args.common_labels, DATASOURCES_NAME, args.namespace, app="grafana-datasources", component=COMPONENT,
                extra_labels={DATASOURCE_LABEL: "1"},
            ),
            data={DATASOURCES_KEY: args.datasources_yaml},
            opts=child(self),
        )  # fmt: skip
        self.dashboards: dict[str, k8s.core.v1.ConfigMap] = {}
        for uid, text in sorted(args.dashboards.items()):
            meta = metadata(
                args.common_labels, dashboard_configmap_name(uid), args.namespace, app="grafana-dashboards",
                component=COMPONENT, extra_labels={DASHBOARD_LABEL: "1"}, annotations={FOLDER_ANNOTATION: args.folder},
            )  # fmt: skip
            data = {f"{uid}.json": text}
            size = object_size({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
            if size >= OBJECT_LIMIT_BYTES:
                raise DashboardTooLargeError(
                    f"dashboard {uid!r}: its ConfigMap is {size} bytes, over the 1 MiB Kubernetes object limit; "
                    "split the dashboard"
                )
            self.dashboards[uid] = k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{uid}", metadata=meta, data=data, opts=child(self, formerly=f"dashboard-{uid}")
            )
        self.register_outputs({"dashboards": sorted(self.dashboards)})
