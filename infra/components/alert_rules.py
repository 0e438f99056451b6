"""AlertRules: the alert and recording rule groups onto the cluster.

- scrape mode `operator`: a PrometheusRule custom resource, labelled with the stack's operator
  selector so the Prometheus custom resource loads it;
- scrape mode `annotations` (a classic Prometheus): a ConfigMap holding the rules file under
  `foxhunt-rules.yaml`, to be mounted into Prometheus and listed in its `rule_files`.

Both carry the same groups as `rendered/<stack>/prometheus/rules.yaml` (observability.rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import ScrapeMode

TYPE = "foxhunt:observability:AlertRules"
APP = "foxhunt-rules"
COMPONENT = "alerting"
OBJECT_NAME = "foxhunt-ml-rules"
CONFIGMAP_KEY = "foxhunt-rules.yaml"


@dataclass(frozen=True)
class AlertRulesArgs:
    groups: Sequence[dict[str, Any]]  # the rule groups (observability.rules)
    rules_file_yaml: str  # the same groups as a Prometheus rules file
    mode: ScrapeMode
    operator_selector: Mapping[str, str]
    namespace: str
    common_labels: Mapping[str, str]


class AlertRules(pulumi.ComponentResource):
    def __init__(self, name: str, args: AlertRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.resource: pulumi.CustomResource
        if args.mode == "operator":
            self.resource = k8s.apiextensions.CustomResource(
                name,
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=metadata(
                    args.common_labels, OBJECT_NAME, args.namespace, app=APP, component=COMPONENT,
                    extra_labels=args.operator_selector,
                ),
                spec={"groups": list(args.groups)},
                opts=child(self),
            )  # fmt: skip
        else:
            self.resource = k8s.core.v1.ConfigMap(
                name,
                metadata=metadata(args.common_labels, OBJECT_NAME, args.namespace, app=APP, component=COMPONENT),
                data={CONFIGMAP_KEY: args.rules_file_yaml},
                opts=child(self),
            )
        self.register_outputs({"groups": len(args.groups)})
