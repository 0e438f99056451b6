"""Rule tiers: which rules every scrape shard evaluates, and which run once in the global tier.

With scraping sharded by `hashmod` (on the node each target's pod runs on), each shard holds the
series of some targets and none of the others. A rule gives the same answer on the shards as on one server only
if every result it computes reads the series of one scrape target: a per-GPU alert on the GPU
poller's own series (the poller of a node is one target), a training job's rules over its own
series (one job is one target), anything grouped by the target's `pod` or `instance`. Those run on
every shard (`Tier.SHARD`): each shard computes them for its own targets and no result exists
twice. Everything that combines targets runs once, in the global tier (`Tier.GLOBAL`), over the
series every shard remote-writes to it: fleet medians and sums, top-k, allocation totals,
per-model and per-service aggregates (a service has several replicas, each its own target),
`absent()`, constant vectors, and joins of one target's series with another's (a training job's
info series with the GPU series of the pollers on its nodes, which other shards scrape).

The tier of a rule is derived from its expression: `observability.promql.locality.derive(expr,
records)` follows which labels pin a scrape target through every selector, aggregation, join and
function, with a real PromQL parser. Every rule of `rule_groups(cfg)` gets a tier this way, so a new
rule needs nothing to be placed. A rule that reads series the derivation cannot place (a series
outside the metric catalog and not recorded by a rule) must be declared in `DECLARED` with the
reason; a declaration of `SHARD` is checked against the derivation and refused when the rule
combines targets (declaring `GLOBAL` is always safe: the global tier sees every series).

`split_groups(groups)` splits rule groups into the two tiers (a group with rules of both keeps
its name in both files); `tier_files(cfg)` renders `rules-shard.yaml` and `rules-global.yaml`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observability.partials import is_partial
from observability.promql.locality import Locality, combining, derive, locality_of
from observability.promql.syntax import outer_aggregation


class Tier(enum.Enum):
    SHARD = "shard"
    GLOBAL = "global"


@dataclass(frozen=True)
class Declared:
    tier: Tier
    why: str


# Rules whose tier cannot be derived (they read series outside the catalog), by rule name
# (`alert` or `record`), with the reason; `SHARD` declarations are checked (see module doc).
DECLARED: dict[str, Declared] = {
    name: Declared(Tier.GLOBAL, "reads each shard replica's heartbeat partial, which only the global tier holds")
    for name in ("PrometheusReplicaDown", "PrometheusShardDown")
}


class TierError(ValueError):
    """A rule cannot be placed: its series are unknown, or it is declared onto a shard wrongly."""


def rule_name(rule: Mapping[str, Any]) -> str:
    return str(rule.get("alert") or rule.get("record"))


def _derive_rule(rule: Mapping[str, Any], records: Mapping[str, Locality]) -> tuple[Locality, frozenset[str]]:
    """`derive` for a rule; a rule reading its own last value (a latch) reads a global record."""
    name = rule_name(rule)
    if "record" in rule and name not in records:
        own = {name: combining(f"{name} reads its own last value")}
        return derive(str(rule["expr"]), {**records, **own})
    return derive(str(rule["expr"]), records)


@dataclass(frozen=True)
class Placement:
    """Where one rule runs and why."""

    group: str
    name: str
    tier: Tier
    reason: str


def _tier_of(locality: Locality) -> tuple[Tier, str]:
    if locality.local:
        labels = ", ".join(sorted({k[0] for k in locality.keys}))
        return Tier.SHARD, f"every result keeps {labels}, which pins the shard that scrapes its series"
    if locality.constant:
        return Tier.GLOBAL, "a constant result would exist once per shard"
    return Tier.GLOBAL, locality.combines


def place(groups: Sequence[Mapping[str, Any]], declared: Mapping[str, Declared] | None = None) -> list[Placement]:
    """The tier of every rule of `groups`, in order; raises `TierError` naming every rule that
    cannot be placed (unknown series and no declaration, or declared onto a shard wrongly)."""
    return _place(groups, DECLARED if declared is None else declared)[0]


def recorded_localities(
    groups: Sequence[Mapping[str, Any]], declared: Mapping[str, Declared] | None = None
) -> dict[str, Locality]:
    """Each recorded series of `groups` and what it depends on where the tiers record it."""
    return _place(groups, DECLARED if declared is None else declared)[1]


# Partials (`observability.partials`, written by `observability.rules.pushdown`): each is one of
# these aggregations over series of one shard.
PARTIAL_AGGREGATIONS = frozenset({"sum", "count", "min", "max", "group", "topk", "bottomk", "count_values"})


def _partial_problem(rule: Mapping[str, Any], records: Mapping[str, Locality]) -> str:
    """Why a partial is not one shard's part of a composable aggregation (empty: it is)."""
    top = outer_aggregation(str(rule["expr"]))
    if top is None or top[0] not in PARTIAL_AGGREGATIONS:
        return f"is named as a partial but is not one of {', '.join(sorted(PARTIAL_AGGREGATIONS))}"
    inner = locality_of(top[1], records)
    if not inner.local:
        return f"is named as a partial but what it aggregates is not one shard's: {_tier_of(inner)[1]}"
    return ""


def shard_tier_problems(
    shard_groups: Sequence[Mapping[str, Any]],
    all_groups: Sequence[Mapping[str, Any]],
    declared: Mapping[str, Declared] | None = None,
) -> list[str]:
    """Every rule of a shard-tier rules file that combines scrape targets (empty: none).

    Checks the file as it will be loaded, independently of how it was split: each rule is derived
    again, reading the records of `all_groups` as the tiers record them. A partial must aggregate
    one shard's series with an aggregation that composes."""
    declared = DECLARED if declared is None else declared
    records = recorded_localities(all_groups, declared)
    problems = []
    for group in shard_groups:
        for rule in group["rules"]:
            name = rule_name(rule)
            if "record" in rule and is_partial(name):
                problem = _partial_problem(rule, records)
                if problem:
                    problems.append(f"{group['name']}/{name} {problem}")
                continue
            locality, unknown = _derive_rule(rule, records)
            if unknown and name in declared and declared[name].tier is Tier.SHARD:
                continue
            if not locality.local:
                reason = _tier_of(locality)[1]
                problems.append(f"{group['name']}/{name} is on the shards but {reason}: it belongs in the global tier")
    return problems


def _place(
    groups: Sequence[Mapping[str, Any]], declared: Mapping[str, Declared]
) -> tuple[list[Placement], dict[str, Locality]]:
    rules = [(str(g["name"]), r) for g in groups for r in g["rules"]]
    records: dict[str, Locality] = {}
    pending = list(rules)
    placements: dict[int, Placement] = {}
    problems: list[str] = []
    # Records may read records of other groups: place them until nothing changes.
    while pending:
        progressed = False
        waiting = []
        for group, rule in pending:
            locality, unknown = _derive_rule(rule, records)
            blocked = unknown & {rule_name(r) for _, r in pending if "record" in r}
            if blocked:
                waiting.append((group, rule))
                continue
            progressed = True
            placements[id(rule)] = _decide(group, rule, locality, unknown, declared, problems)
            if "record" in rule:
                placed = placements[id(rule)]
                records[str(rule["record"])] = (
                    locality
                    if placed.tier is Tier.SHARD
                    else combining(f"reads {rule['record']}, recorded in the global tier")
                )
        if not progressed:
            names = ", ".join(rule_name(r) for _, r in waiting)
            raise TierError(f"recording rules read each other in a cycle: {names}")
        pending = waiting
    if problems:
        raise TierError("rules that cannot be placed in a tier:\n" + "\n".join(f"  - {p}" for p in problems))
    return [placements[id(rule)] for _, rule in rules], records


def _decide(
    group: str,
    rule: Mapping[str, Any],
    locality: Locality,
    unknown: frozenset[str],
    declared: Mapping[str, Declared],
    problems: list[str],
) -> Placement:
    name = rule_name(rule)
    tier, reason = _tier_of(locality)
    declaration = declared.get(name)
    if declaration is None:
        if unknown:
            problems.append(
                f"{group}/{name} reads {', '.join(sorted(unknown))}, outside the metric catalog: add the series to "
                f"foxhunt_trainer/contract/catalog.py or declare the rule's tier in observability.rules.tiers.DECLARED"
            )
        return Placement(group, name, tier, reason)
    if declaration.tier is Tier.SHARD and not unknown and tier is Tier.GLOBAL:
        problems.append(f"{group}/{name} is declared for the shards but {reason}: it must run in the global tier")
    return Placement(group, name, declaration.tier, f"declared: {declaration.why}")


def split_groups(
    groups: Sequence[Mapping[str, Any]], placements: Iterable[Placement] | None = None
) -> dict[Tier, list[dict[str, Any]]]:
    """The groups of each tier, each with only its rules (in order); groups left empty are dropped."""
    placed = list(place(groups) if placements is None else placements)
    tiers = iter(p.tier for p in placed)
    out: dict[Tier, list[dict[str, Any]]] = {Tier.SHARD: [], Tier.GLOBAL: []}
    for group in groups:
        by_tier: dict[Tier, list[Any]] = {Tier.SHARD: [], Tier.GLOBAL: []}
        for rule in group["rules"]:
            by_tier[next(tiers)].append(rule)
        for tier, rules in by_tier.items():
            if rules:
                out[tier].append({**group, "rules": rules})
    return out
