"""Content generated from the stack's observability config (rule groups, the rules file,
dashboards, the datasources file), built once per config and shared by the program (ConfigMaps,
PrometheusRule) and the rendered files, so both always agree."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dashboards
from infra.settings import Settings
from observability import rules
from observability.config import ObservabilityConfig
from observability.datasources import DatasourceEndpoints, datasources_yaml


@dataclass(frozen=True)
class Generated:
    rule_groups: tuple[dict[str, Any], ...]
    rules_yaml: str
    dashboards: Mapping[str, str]  # uid -> dashboard JSON text
    # The same rules split into the shard tier and the global tier (docs/scaling.md).
    tier_groups: Mapping[rules.Tier, tuple[dict[str, Any], ...]]
    tier_yaml: Mapping[rules.Tier, str]


@functools.lru_cache(maxsize=8)
def generated(cfg: ObservabilityConfig) -> Generated:
    """Everything generated for `cfg`, the rule groups built once and every rules file from them."""
    groups = rules.rule_groups(cfg)
    tiers = rules.tier_rule_groups(cfg, groups)
    return Generated(
        rule_groups=tuple(groups),
        rules_yaml=rules.rules_yaml_of(groups),
        dashboards={uid: dashboards.to_json(d) for uid, d in sorted(dashboards.build_all(cfg).items())},
        tier_groups={tier: tuple(tier_groups) for tier, tier_groups in tiers.items()},
        tier_yaml={tier: rules.rules_yaml_of(tier_groups) for tier, tier_groups in tiers.items()},
    )


def datasource_endpoints(settings: Settings) -> DatasourceEndpoints:
    e = settings.endpoints
    return DatasourceEndpoints(prometheus=e.prometheus, loki=e.loki, tempo=e.tempo_query)


def stack_datasources_yaml(settings: Settings) -> str:
    return datasources_yaml(settings.observability_config(), datasource_endpoints(settings))
