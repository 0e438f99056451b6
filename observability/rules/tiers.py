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

The tier of a rule is derived from its expression with a real PromQL parser (promql-parser):
`derive(expr, records)` follows which labels pin a scrape target through every selector,
aggregation, join and function. Every rule of `rule_groups(cfg)` gets a tier this way, so a new
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

import promql_parser as pp

from observability import catalog
from observability.catalog import Producer
from observability.partials import is_partial


class Tier(enum.Enum):
    SHARD = "shard"
    GLOBAL = "global"


# Labels that pin one scrape target, per producer of the series. `instance` and `pod` are target
# labels (scrape discovery sets them from the pod's address and name), unique per target. The GPU
# poller runs once per node (a DaemonSet), so `node` pins its target. A training job's job-level
# series (its loss, progress, NaN counts) are reported by one process of the job, so `job_id` pins
# their target; a multi-node job runs one pod per node, and the series every pod reports for
# itself (labelled with a GPU's `uuid` or a `rank`, `PER_POD_LABELS`) are not pinned by `job_id`:
# a job's aggregate over them combines the pods, which may be on several shards. A service's
# series have no such label of their own (replicas), and Tempo's metrics generator remote-writes
# its series instead of being scraped: nothing pins them. Any other producer (Prometheus' own
# series, an exporter reporting on many objects) is pinned by the target labels only.
_TARGET = "target"
TARGET_LABELS: tuple[str, ...] = ("instance", "pod")
PRODUCER_KEYS: Mapping[Producer, tuple[str, ...]] = {
    Producer.GPU_POLLER: ("node",),
    Producer.TRAINING_JOB: ("job_id",),
}
PER_POD_LABELS: tuple[str, ...] = ("uuid", "rank")
UNSCRAPED_PRODUCERS: frozenset[Producer] = frozenset({Producer.TEMPO_METRICS_GENERATOR})


@dataclass(frozen=True)
class Declared:
    tier: Tier
    why: str


# Rules whose tier cannot be derived (they read series outside the catalog), by rule name
# (`alert` or `record`), with the reason; `SHARD` declarations are checked (see module doc).
DECLARED: dict[str, Declared] = {}


# Labels that pin the shard of a series without pinning one target: the shards split targets by the
# node their pod runs on, and a container is only given GPUs of its own node, so a GPU's poller
# series and the `ml_training_job_gpu_info` of the training pod holding it (both labelled `uuid`)
# are scraped by the same shard. Joining them on `uuid` (a job's view of its GPUs, a per-GPU alert
# labelled with the job holding the GPU) is therefore computed on the shards, once.
_GPU = "gpu"
COLOCATED_KEYS: tuple[str, ...] = ("uuid",)
COLOCATED_PRODUCERS: frozenset[Producer] = frozenset({Producer.GPU_POLLER, Producer.TRAINING_JOB})


class TierError(ValueError):
    """A rule cannot be placed: its series are unknown, or it is declared onto a shard wrongly."""


# A key is (label, kind): the label pins one target of that kind. Two series with the same value
# of a key's label come from the same target only when both carry it as the same kind of key.
Key = tuple[str, str]


@dataclass(frozen=True)
class Locality:
    """What an expression's result depends on.

    `combines` is the reason when some result combines the series of several targets (then the
    rule belongs to the global tier); otherwise `keys` are the labels on every result that pin the
    one target it was computed from (empty for a constant: a number, `vector(1)`, `time()`).
    """

    keys: frozenset[Key] = frozenset()
    combines: str = ""
    constant: bool = False

    @property
    def local(self) -> bool:
        return not self.combines and bool(self.keys)


_CONSTANT = Locality(constant=True)


def _global(reason: str) -> Locality:
    return Locality(combines=reason)


def _series_keys() -> dict[str, frozenset[Key]]:
    keys: dict[str, frozenset[Key]] = {}
    for metric in catalog.ALL_METRICS:
        if metric.producer in UNSCRAPED_PRODUCERS:
            found: frozenset[Key] = frozenset()
        else:
            per_pod = metric.producer is Producer.TRAINING_JOB and any(p in metric.labels for p in PER_POD_LABELS)
            pinning = () if per_pod else PRODUCER_KEYS.get(metric.producer, ())
            own = [label for label in pinning if label in metric.labels]
            colocated = [
                label for label in COLOCATED_KEYS if label in metric.labels and metric.producer in COLOCATED_PRODUCERS
            ]
            found = frozenset(
                {
                    *((label, metric.producer.value) for label in own),
                    *((label, _GPU) for label in colocated),
                    *_target_keys(),
                }
            )
        for name in metric.series_names:
            keys[name] = found
    return keys


def _target_keys() -> frozenset[Key]:
    return frozenset((label, _TARGET) for label in TARGET_LABELS)


SERIES_KEYS: Mapping[str, frozenset[Key]] = _series_keys()

# Functions whose result says something about series that are absent, or about the whole input
# at once: on a shard they see only part of it.
_WHOLE_INPUT_FUNCTIONS = frozenset({"absent", "absent_over_time", "scalar"})
_CONSTANT_FUNCTIONS = frozenset({"time", "pi", "vector", "minute", "hour", "day_of_month", "day_of_week",
                                 "day_of_year", "days_in_month", "month", "year"})  # fmt: skip
_LABEL_WRITERS = frozenset({"label_replace", "label_join"})


def _selector_name(node: pp.VectorSelector) -> str | None:
    if node.name:
        return str(node.name)
    for m in node.matchers.matchers:
        if m.name == "__name__" and m.op == pp.MatchOp.Equal:
            return str(m.value)
    return None


class _Deriver:
    def __init__(self, records: Mapping[str, Locality]) -> None:
        self.records = records
        self.unknown: set[str] = set()

    def visit(self, node: pp.Expr) -> Locality:
        if isinstance(node, pp.NumberLiteral | pp.StringLiteral):
            return _CONSTANT
        if isinstance(node, pp.VectorSelector):
            return self._selector(node)
        if isinstance(node, pp.MatrixSelector):
            return self._selector(node.vector_selector)
        if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            return self.visit(node.expr)
        if isinstance(node, pp.Call):
            return self._call(node)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node)
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node)
        raise TierError(f"unexpected PromQL node {type(node).__name__}: {node}")

    def _selector(self, node: pp.VectorSelector) -> Locality:
        name = _selector_name(node)
        if name is not None and name in self.records:
            return self.records[name]
        if name is None or name not in SERIES_KEYS:
            self.unknown.add(name or str(node))
            return _global(f"reads {name or node}, which is neither a catalog metric nor a recorded series")
        keys = SERIES_KEYS[name]
        if not keys:
            return _global(f"{name} has no label that pins one scrape target (not scraped per target)")
        return Locality(keys)

    def _call(self, node: pp.Call) -> Locality:
        name = str(node.func.name)
        args = [a for a in node.args if isinstance(a, pp.Expr)]
        inner = [self.visit(a) for a in args]
        if name in _WHOLE_INPUT_FUNCTIONS:
            if all(i.constant for i in inner):
                return _CONSTANT
            return _global(f"{name}() judges the whole input, of which a shard holds a part")
        if name in _CONSTANT_FUNCTIONS and all(i.constant for i in inner):
            return _CONSTANT
        vectors = [i for i in inner if not i.constant]
        if not vectors:
            return _CONSTANT
        first = vectors[0]
        if first.combines:
            return first
        if name in _LABEL_WRITERS:
            written = args[1]
            target = str(written.val) if isinstance(written, pp.StringLiteral) else ""
            kept = frozenset(k for k in first.keys if k[0] != target)
            if not kept:
                return _global(f"{name}() overwrites {target}, the label that pinned the target")
            return Locality(kept)
        return first

    def _aggregate(self, node: pp.AggregateExpr) -> Locality:
        inner = self.visit(node.expr)
        op = str(node.op)
        if inner.combines:
            return inner
        if inner.constant:
            return _CONSTANT
        modifier = node.modifier
        if modifier is None:
            grouped: frozenset[Key] = frozenset()
        elif modifier.type == pp.AggModifierType.By:
            grouped = frozenset(k for k in inner.keys if k[0] in modifier.labels)
        else:
            grouped = frozenset(k for k in inner.keys if k[0] not in modifier.labels)
        if not grouped:
            labels = ", ".join(sorted({k[0] for k in inner.keys}))
            return _global(f"{op}() groups across scrape targets (its groups keep none of {labels})")
        # topk/bottomk/limitk keep every label of the series they pick; the others keep the groups'.
        return Locality(inner.keys if op in ("topk", "bottomk", "limitk") else grouped)

    def _binary(self, node: pp.BinaryExpr) -> Locality:
        lhs, rhs = self.visit(node.lhs), self.visit(node.rhs)
        for side in (lhs, rhs):
            if side.combines:
                return side
        if lhs.constant and rhs.constant:
            return _CONSTANT
        op = str(node.op).strip()
        modifier = node.modifier
        if lhs.constant or rhs.constant:
            vector = rhs if lhs.constant else lhs
            if op == "or":
                return _global("`or` with a constant vector yields a series on every shard")
            return vector
        matching = modifier.matching if modifier is not None else None
        common = lhs.keys & rhs.keys
        if matching is None:
            matched = common
        elif matching.type == pp.LabelModifierType.Include:
            matched = frozenset(k for k in common if k[0] in matching.labels)
        else:
            matched = frozenset(k for k in common if k[0] not in matching.labels)
        if not matched:
            return _global(f"`{op}` matches series of different scrape targets")
        if op == "or":
            return Locality(common)
        card = modifier.card if modifier is not None else pp.VectorMatchCardinality.OneToOne
        if card == pp.VectorMatchCardinality.OneToMany:
            return Locality(rhs.keys)
        if card == pp.VectorMatchCardinality.OneToOne and op not in ("and", "unless") and matching is not None:
            if matching.type == pp.LabelModifierType.Include:
                return Locality(frozenset(k for k in lhs.keys if k[0] in matching.labels))
            return Locality(frozenset(k for k in lhs.keys if k[0] not in matching.labels))
        return Locality(lhs.keys)


def derive(expr: str, records: Mapping[str, Locality] | None = None) -> tuple[Locality, frozenset[str]]:
    """The locality of `expr`'s results and the series it reads that nothing can place."""
    deriver = _Deriver(records or {})
    return deriver.visit(pp.parse(expr)), frozenset(deriver.unknown)


def locality_of(node: pp.Expr, records: Mapping[str, Locality]) -> Locality:
    """The locality of a parsed sub-expression's results (`derive` for a node of a parsed rule)."""
    return _Deriver(records).visit(node)


def rule_name(rule: Mapping[str, Any]) -> str:
    return str(rule.get("alert") or rule.get("record"))


def _derive_rule(rule: Mapping[str, Any], records: Mapping[str, Locality]) -> tuple[Locality, frozenset[str]]:
    """`derive` for a rule; a rule reading its own last value (a latch) reads a global record."""
    name = rule_name(rule)
    if "record" in rule and name not in records:
        own = {name: _global(f"{name} reads its own last value")}
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
    node = pp.parse(str(rule["expr"]))
    if not isinstance(node, pp.AggregateExpr) or str(node.op) not in PARTIAL_AGGREGATIONS:
        return f"is named as a partial but is not one of {', '.join(sorted(PARTIAL_AGGREGATIONS))}"
    inner = _Deriver(records).visit(node.expr)
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
                    else _global(f"reads {rule['record']}, recorded in the global tier")
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
                f"observability/catalog.py or declare the rule's tier in observability.rules.tiers.DECLARED"
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
