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

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import Settings

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


class GrafanaProvisioning(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        settings: Settings,
        datasources_yaml: str,
        dashboards: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`dashboards`: uid -> dashboard JSON text (dashboards.to_json)."""
        super().__init__(TYPE, name, None, opts)
        namespace = settings.grafana.namespace
        self.datasources = k8s.core.v1.ConfigMap(
            "grafana-datasources",
            metadata=metadata(
                settings, DATASOURCES_NAME, namespace, app="grafana-datasources", component=COMPONENT,
                extra_labels={DATASOURCE_LABEL: "1"},
            ),
            data={DATASOURCES_KEY: datasources_yaml},
            opts=child(self),
        )  # fmt: skip
        self.dashboards: dict[str, k8s.core.v1.ConfigMap] = {}
        for uid, text in sorted(dashboards.items()):
            meta = metadata(
                settings, dashboard_configmap_name(uid), namespace, app="grafana-dashboards", component=COMPONENT,
                extra_labels={DASHBOARD_LABEL: "1"}, annotations={FOLDER_ANNOTATION: settings.grafana.folder},
            )  # fmt: skip
            data = {f"{uid}.json": text}
            size = object_size({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
            if size >= OBJECT_LIMIT_BYTES:
                raise DashboardTooLargeError(
                    f"dashboard {uid!r}: its ConfigMap is {size} bytes, over the 1 MiB Kubernetes object limit; "
                    "split the dashboard"
                )
            self.dashboards[uid] = k8s.core.v1.ConfigMap(f"dashboard-{uid}", metadata=meta, data=data, opts=child(self))
        self.register_outputs({"dashboards": sorted(self.dashboards)})
