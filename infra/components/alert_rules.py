"""AlertRules: the alert and recording rule groups onto the cluster.

- scrape mode `operator`: a PrometheusRule custom resource, labelled with the stack's operator
  selector so the Prometheus custom resource loads it;
- scrape mode `annotations` (a classic Prometheus): a ConfigMap holding the rules file under
  `foxhunt-rules.yaml`, to be mounted into Prometheus and listed in its `rule_files`.

Both carry the same groups as `rendered/<stack>/prometheus/rules.yaml` (observability.rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import Settings

TYPE = "foxhunt:observability:AlertRules"
APP = "foxhunt-rules"
COMPONENT = "alerting"
OBJECT_NAME = "foxhunt-ml-rules"
CONFIGMAP_KEY = "foxhunt-rules.yaml"


class AlertRules(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        settings: Settings,
        groups: Sequence[dict[str, Any]],
        rules_file_yaml: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        namespace = settings.namespaces.monitoring
        self.resource: pulumi.CustomResource
        if settings.scrape.mode == "operator":
            self.resource = k8s.apiextensions.CustomResource(
                "foxhunt-ml-rules",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=metadata(
                    settings, OBJECT_NAME, namespace, app=APP, component=COMPONENT,
                    extra_labels=settings.scrape.operator_selector,
                ),
                spec={"groups": list(groups)},
                opts=child(self),
            )  # fmt: skip
        else:
            self.resource = k8s.core.v1.ConfigMap(
                "foxhunt-ml-rules",
                metadata=metadata(settings, OBJECT_NAME, namespace, app=APP, component=COMPONENT),
                data={CONFIGMAP_KEY: rules_file_yaml},
                opts=child(self),
            )
        self.register_outputs({"groups": len(groups)})
