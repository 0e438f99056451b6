"""AlertRules: the alert and recording rule groups onto the cluster.

- scrape mode `operator`: a PrometheusRule custom resource, labelled with the stack's operator
  selector so the Prometheus custom resource loads it;
- scrape mode `annotations` (a classic Prometheus): a ConfigMap holding the rules file under
  `foxhunt-rules.yaml`, to be mounted into Prometheus and listed in its `rule_files`.

Both carry the same groups as `rendered/<stack>/prometheus/rules.yaml` (observability.rules).

With more than one scrape shard the rules travel split into their two tiers (docs/scaling.md):
two PrometheusRules, `foxhunt-ml-rules-shard` and `foxhunt-ml-rules-global`, labelled
`foxhunt.io/rule-tier: shard|global` besides the operator selector, so the shards' Prometheus
resource selects one and the global tier the other; or one ConfigMap with the keys
`foxhunt-rules-shard.yaml` and `foxhunt-rules-global.yaml` (the content of
`rendered/<stack>/prometheus/rules-shard.yaml` and `rules-global.yaml`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import ScrapeMode
from observability.prometheus_config import TIER_LABEL, RuleFiles
from observability.rules import Tier

TYPE = "foxhunt:observability:AlertRules"
APP = "foxhunt-rules"
COMPONENT = "alerting"
OBJECT_NAME = "foxhunt-ml-rules"
CONFIGMAP_KEY = "foxhunt-rules.yaml"


def tier_object_name(tier: Tier) -> str:
    return f"{OBJECT_NAME}-{tier.value}"


def tier_configmap_key(tier: Tier) -> str:
    return f"foxhunt-rules-{tier.value}.yaml"


# The ConfigMap's keys, as a Prometheus that mounts it next to its config finds them.
RULE_FILES = RuleFiles(CONFIGMAP_KEY, tier_configmap_key(Tier.SHARD), tier_configmap_key(Tier.GLOBAL))


@dataclass(frozen=True)
class AlertRulesArgs:
    groups: Sequence[dict[str, Any]]  # the rule groups (observability.rules)
    rules_file_yaml: str  # the same groups as a Prometheus rules file
    mode: ScrapeMode
    operator_selector: Mapping[str, str]
    namespace: str
    common_labels: Mapping[str, str]
    shards: int = 1
    # The groups of each tier and their rules files: delivered instead when shards > 1.
    tier_groups: Mapping[Tier, Sequence[dict[str, Any]]] | None = None
    tier_yaml: Mapping[Tier, str] | None = None


class AlertRules(pulumi.ComponentResource):
    def __init__(self, name: str, args: AlertRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.resources: list[pulumi.CustomResource] = []
        sharded = args.shards > 1
        if sharded and (args.tier_groups is None or args.tier_yaml is None):
            raise ValueError(f"{args.shards} scrape shards need the rules split into tiers (tier_groups, tier_yaml)")
        if args.mode == "operator" and sharded:
            assert args.tier_groups is not None
            for tier in Tier:
                labels = {TIER_LABEL: tier.value}
                groups = args.tier_groups[tier]
                self.resources.append(
                    self._prometheus_rule(f"{name}-{tier.value}", args, tier_object_name(tier), groups, labels)
                )
        elif args.mode == "operator":
            self.resources.append(self._prometheus_rule(name, args, OBJECT_NAME, args.groups, {}, formerly=OBJECT_NAME))
        else:
            if sharded:
                assert args.tier_yaml is not None
                data = {tier_configmap_key(tier): args.tier_yaml[tier] for tier in Tier}
            else:
                data = {CONFIGMAP_KEY: args.rules_file_yaml}
            self.resources.append(
                k8s.core.v1.ConfigMap(
                    name,
                    metadata=metadata(args.common_labels, OBJECT_NAME, args.namespace, app=APP, component=COMPONENT),
                    data=data,
                    opts=child(self, formerly=OBJECT_NAME),
                )
            )
        self.resource = self.resources[0]
        self.register_outputs({"groups": len(args.groups), "objects": len(self.resources)})

    def _prometheus_rule(
        self,
        resource_name: str,
        args: AlertRulesArgs,
        object_name: str,
        groups: Sequence[dict[str, Any]],
        tier_labels: Mapping[str, str],
        formerly: str | None = None,
    ) -> pulumi.CustomResource:
        rule: pulumi.CustomResource = k8s.apiextensions.CustomResource(
            resource_name,
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata=metadata(
                args.common_labels, object_name, args.namespace, app=APP, component=COMPONENT,
                extra_labels={**args.operator_selector, **tier_labels},
            ),
            spec={"groups": list(groups)},
            opts=child(self, formerly=formerly),
        )  # fmt: skip
        return rule
