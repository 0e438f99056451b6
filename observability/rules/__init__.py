"""Alert and recording rules of the ML training platform (the monitoring report's alerts, one module
per group, plus GPUMemoryExhaustionPredicted; per-job GPU views in `jobs`), and the monitoring's own
health alerts (`ml_monitoring_health`). Counts are never written down: enumerate `ALERTS_BY_GROUP`.

Public interface:
- `rule_groups(cfg)`: every rule group (recording groups, the dashboards' recording groups, the
  alert groups, the health group; `ml_gpu_resources` records its per-GPU inputs at its head) as
  plain dicts in Prometheus rule-file shape, in a fixed order.
- `rules_file_yaml(cfg)` (`rules_yaml_of(groups)` for groups built already): the whole rules file
  as YAML (what `rendered/<stack>/prometheus/rules.yaml` holds and `promtool check rules` loads).
- `alert_groups(cfg)` / `alert_rules(cfg)`: the typed alerts, for runbooks, policies and tests.
- `ALERT_NAMES`, `ALERT_GROUP_NAMES`, `ALERTS_BY_GROUP`: names to enumerate without a config (the
  rules behind them are built on first use, not when the package is imported).
- `tier_rule_groups(cfg)` / `tier_rules_yaml(cfg)`: the same rules split into the shard tier and
  the global tier (`observability.rules.tiers`: every rule's tier derived from its expression),
  what `rules-shard.yaml` and `rules-global.yaml` hold. Together they are exactly `rule_groups`,
  except that the global tier's records carry the stack's `cluster` as a rule label.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from observability.config import ObservabilityConfig
from observability.prometheus_config import external_labels
from observability.promql import duration
from observability.promql.replicas import deduplicate, replica_problems
from observability.rules import (
    distributed,
    efficiency,
    goodput,
    gpu,
    health,
    jobs,
    pipeline,
    quality,
    storage,
    training,
)
from observability.rules.dashboard_recording import dashboard_recording_groups
from observability.rules.detection import CRITICAL_DETECTION_ALERTS, detection_budget
from observability.rules.pushdown import push_down
from observability.rules.recording import RECORDING_RULES as _ALERT_RECORDING_RULES
from observability.rules.recording import recording_groups
from observability.rules.render import dump_groups
from observability.rules.rule_types import AlertRule, RecordingRule, RunbookQuery, Severity
from observability.rules.tiers import Tier, rule_name, split_groups

__all__ = [
    "ALERTS_BY_GROUP",
    "ALERT_GROUP_NAMES",
    "ALERT_NAMES",
    "CRITICAL_DETECTION_ALERTS",
    "RECORDING_RULES",
    "AlertRule",
    "RecordingRule",
    "ReplicaError",
    "RunbookQuery",
    "Severity",
    "Tier",
    "alert_groups",
    "alert_rules",
    "critical_group_names",
    "distributed",
    "efficiency",
    "goodput",
    "gpu",
    "group_inputs",
    "jobs",
    "rule_groups",
    "rules_file_yaml",
    "rules_yaml_of",
    "tier_rule_groups",
    "tier_rules_yaml",
]

_ALERT_GROUP_BUILDERS: tuple[tuple[str, Callable[[ObservabilityConfig], tuple[AlertRule, ...]]], ...] = (
    (training.PERFORMANCE_GROUP, training.performance_alerts),
    (training.AVAILABILITY_GROUP, training.availability_alerts),
    (gpu.GROUP, gpu.gpu_alerts),
    (quality.GROUP, quality.quality_alerts),
    (pipeline.GROUP, pipeline.pipeline_alerts),
    (storage.GROUP, storage.storage_alerts),
    (efficiency.GROUP, efficiency.efficiency_alerts),
    (distributed.GROUP, distributed.alerts),
    (health.GROUP, lambda cfg: health.health_alerts(cfg, project_group_names(cfg))),
)


# Recording rules at the head of an alert group, read by its alerts in the same evaluation.
_GROUP_INPUTS: dict[str, Callable[[ObservabilityConfig], tuple[RecordingRule, ...]]] = {
    gpu.GROUP: gpu.input_rules,
    distributed.GROUP: distributed.input_rules,
    health.GROUP: health.input_rules,
}


def group_inputs(group: str, cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The recording rules at the head of alert group `group` (its alerts read them in the same evaluation)."""
    build = _GROUP_INPUTS.get(group)
    return build(cfg) if build is not None else ()


def project_group_names(cfg: ObservabilityConfig) -> list[str]:
    """The name of every rule group the project renders (what the health group watches)."""
    return [
        *(group["name"] for group in recording_groups(cfg)),
        *(group["name"] for group in jobs.job_groups(cfg)),
        *(group["name"] for group in goodput.goodput_groups(cfg)),
        *(group["name"] for group in dashboard_recording_groups(cfg)),
        *(name for name, _ in _ALERT_GROUP_BUILDERS),
    ]


def alert_groups(cfg: ObservabilityConfig) -> list[tuple[str, tuple[AlertRule, ...]]]:
    """The alert groups, in a fixed order, then the health group, each with its alerts.

    Raises ValueError when the config's intervals make the 30-second detection promise impossible,
    or when a threshold names an alert that no group has.
    """
    detection_budget(cfg)
    groups = [(name, build(cfg)) for name, build in _ALERT_GROUP_BUILDERS]
    names = {alert.name for _, alerts in groups for alert in alerts}
    orphans = [f"{t.name} belongs to alert {t.alert}, which no rule group has" for t in cfg.thresholds
               if t.alert and t.alert not in names]  # fmt: skip
    if orphans:
        raise ValueError(f"thresholds.yaml: {'; '.join(orphans)}: name the alert whose expression compares with it")
    return groups


def alert_rules(cfg: ObservabilityConfig) -> list[AlertRule]:
    return [alert for _, alerts in alert_groups(cfg) for alert in alerts]


def _holds_critical(alerts: tuple[AlertRule, ...]) -> bool:
    return any(alert.name in CRITICAL_DETECTION_ALERTS for alert in alerts)


def critical_group_names(cfg: ObservabilityConfig) -> tuple[str, ...]:
    """The alert groups holding a critical-detection alert: they run at the critical evaluation interval."""
    return tuple(name for name, alerts in alert_groups(cfg) if _holds_critical(alerts))


def _interval_seconds(alerts: tuple[AlertRule, ...], cfg: ObservabilityConfig) -> int:
    return cfg.critical_evaluation_interval_seconds if _holds_critical(alerts) else cfg.evaluation_interval_seconds


def rule_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """Every rule group, recording groups first, as Prometheus rule-file dicts (fixed order)."""
    detection_budget(cfg)
    alerting = [
        {
            "name": name,
            "interval": duration(_interval_seconds(alerts, cfg)),
            "rules": [
                *(rule.to_rule() for rule in group_inputs(name, cfg)),
                *(alert.to_rule(cfg) for alert in alerts),
            ],
        }
        for name, alerts in alert_groups(cfg)
    ]
    groups = [
        *recording_groups(cfg),
        *jobs.job_groups(cfg),
        *goodput.goodput_groups(cfg),
        *dashboard_recording_groups(cfg),
        *alerting,
    ]
    records = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    orphans = [f"{t.name} belongs to record {t.record}, which no rule group has" for t in cfg.thresholds
               if t.record and t.record not in records]  # fmt: skip
    if orphans:
        raise ValueError(f"thresholds.yaml: {'; '.join(orphans)}: name the rule whose expression compares with it")
    return groups


def rules_file_yaml(cfg: ObservabilityConfig) -> str:
    """The whole rules file (`groups:` ...) as YAML, byte-identical for equal configs."""
    return dump_groups(rule_groups(cfg))


def tier_rule_groups(
    cfg: ObservabilityConfig, groups: Sequence[dict[str, Any]] | None = None
) -> dict[Tier, list[dict[str, Any]]]:
    """The rule groups of each tier (a group with rules of both tiers is in both, same name), split
    from `groups` (the config's `rule_groups`, built here when not given).

    The global tier's recording rules carry the stack's external labels (`cluster`) as rule
    labels: a Prometheus never adds its external labels to the series it records itself, while
    every series the shards remote-write to it carries them, so without the rule labels a
    dashboard filtered by `$cluster` would find the global tier's own records in no cluster."""
    groups = list(groups) if groups is not None else rule_groups(cfg)
    tiers = push_down(split_groups(groups), groups)
    if cfg.replicated:
        tiers[Tier.GLOBAL] = deduplicated_groups(tiers[Tier.GLOBAL], cfg.replica_label)
    labels = external_labels(cfg)
    if labels:
        tiers[Tier.GLOBAL] = [
            {**group, "rules": [{**r, "labels": {**r.get("labels", {}), **labels}} if "record" in r else r
                                for r in group["rules"]]}
            for group in tiers[Tier.GLOBAL]
        ]  # fmt: skip
    return tiers


class ReplicaError(ValueError):
    """A global rule reads the replicas' copies in a way their deduplication cannot keep."""


def deduplicated_groups(groups: Sequence[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """The global tier's groups reading one copy of what the shards' replicas wrote
    (`observability.promql.replicas`); a rule the deduplication cannot keep fails with how to write it."""
    problems = [
        f"{group['name']}/{rule_name(rule)}: {problem}"
        for group in groups
        for rule in group["rules"]
        for problem in replica_problems(str(rule["expr"]), label)
    ]
    if problems:
        raise ReplicaError(
            "global rules that would count each replica's copy (prometheus.replicas > 1):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return [
        {**group, "rules": [{**rule, "expr": deduplicate(str(rule["expr"]), label, pretty=True)}
                            for rule in group["rules"]]}
        for group in groups
    ]  # fmt: skip


def tier_rules_yaml(cfg: ObservabilityConfig) -> dict[Tier, str]:
    """The rules file of each tier, byte-identical for equal configs."""
    return {tier: dump_groups(groups) for tier, groups in tier_rule_groups(cfg).items()}


def rules_yaml_of(groups: Sequence[dict[str, Any]]) -> str:
    """A rules file (`groups:` ...) of `groups` as YAML: what `rules_file_yaml` writes for a config's."""
    return dump_groups(list(groups))


ALERT_GROUP_NAMES: tuple[str, ...] = tuple(name for name, _ in _ALERT_GROUP_BUILDERS)

if TYPE_CHECKING:  # built on first use (module __getattr__), not when the package is imported
    # Every recording rule that alerts and the per-job views read (the dashboards' own are in
    # dashboard_recording); the price-dependent ones as the default config renders them.
    RECORDING_RULES: tuple[RecordingRule, ...]
    # The alerts of each group and every alert's name, as the default config builds them.
    ALERTS_BY_GROUP: dict[str, tuple[str, ...]]
    ALERT_NAMES: tuple[str, ...]


@functools.cache
def _default_names() -> dict[str, Any]:
    """The names to enumerate without a config, from the default config's rules (built once)."""
    cfg = ObservabilityConfig()
    by_group = {name: tuple(alert.name for alert in alerts) for name, alerts in alert_groups(cfg)}
    return {
        "RECORDING_RULES": (
            *_ALERT_RECORDING_RULES,
            *gpu.input_rules(cfg),
            *distributed.input_rules(cfg),
            *jobs.job_rules(cfg),
            *goodput.goodput_rules(cfg),
        ),
        "ALERTS_BY_GROUP": by_group,
        "ALERT_NAMES": tuple(name for names in by_group.values() for name in names),
    }


def __getattr__(name: str) -> Any:
    if name in ("RECORDING_RULES", "ALERTS_BY_GROUP", "ALERT_NAMES"):
        return _default_names()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
