"""Partial aggregation pushed down to the shards: the global tier combines what each shard computed.

A global-tier rule that sums, counts or takes the minimum, maximum or top-k of series each shard
holds a part of (every GPU of the fleet, every GPU of a job, every replica of a service) would read
every one of those series in the global tier, and a fleet read grows with the fleet. Instead, each
such aggregation is computed on every shard as a *partial* over the shard's own targets (a
recording rule of the shard tier), and the global rule combines the partials, which are a handful
of series per shard whatever the fleet's size:

| aggregation over shard-local series | partial on each shard          | the global rule reads              |
|-------------------------------------|--------------------------------|------------------------------------|
| `sum`, `count`                      | the same aggregation           | `sum` of the partials              |
| `min`, `max`, `group`               | the same aggregation           | the same aggregation of them       |
| `avg`                               | `sum` and `count`              | summed sums over summed counts     |
| `topk`, `bottomk`                   | the same (k per shard)         | the same over the shards' k        |
| `count_values`                      | the same                       | `sum` by the value label           |

A ratio of sums (`sum(a) / sum(b)`) is two sums and composes term by term; a histogram quantile
composes through its summed buckets. A quantile over series does not compose: a fleet-wide one
over a metric in percent, Celsius or hertz is estimated from the shards' value histograms
(`distribution.py`: within one bucket of the exact value), any other is reported.

What is rewritten is derived from each rule's expression (`observability.promql.locality.derive`
says which sub-expressions read series of one shard only), never declared: `push_down(tiers,
groups)` takes the two tiers of `tiers.split_groups` and returns them with the partials added to
the shard tier (in the group of the rule that reads them, after that group's shard-tier rules,
whose records they may read) and the global rules reading them. A partial is named
`shard_<labels>:<metric>:<operation>` (`shard:` when it keeps no label): the shards' remote write
gives every partial a `shard` label (`observability.partials`, `prometheus_config`), so the
partials of two shards are two series, and the global rules aggregate that label away.

`composability_problems(groups)` names every global rule that still reads per-GPU series itself
after the rewrite, and says how to write it so that it composes; the tests fail on
any (a new fleet recording that does not compose is caught before it reaches a 10,000-node fleet).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import promql_parser as pp

from foxhunt_trainer.contract import catalog
from observability.partials import PARTIAL_LEVEL, SHARD_LABEL, is_partial
from observability.promql.locality import Locality, locality_of
from observability.promql.syntax import children, walk
from observability.rules.distribution import GRIDS_BY_UNIT, ValueGrid, fleet_quantile, value_histogram
from observability.rules.tiers import PARTIAL_AGGREGATIONS, Tier, recorded_localities, rule_name

# Aggregation -> the aggregation that combines the partials.
_COMBINE: Mapping[str, str] = {
    "sum": "sum",
    "count": "sum",
    "min": "min",
    "max": "max",
    "group": "group",
    "topk": "topk",
    "bottomk": "bottomk",
    "count_values": "sum",
}
assert frozenset(_COMBINE) == PARTIAL_AGGREGATIONS
# How to write an aggregation that does not compose.
NOT_COMPOSABLE: Mapping[str, str] = {
    "quantile": (
        "a fleet-wide quantile over a catalog metric in percent, Celsius or hertz is estimated from "
        "the shards' value histograms (observability.rules.distribution); give the metric's unit a "
        "grid in distribution.GRIDS_BY_UNIT, or record a histogram and take histogram_quantile over "
        "its summed buckets (per group: `sum by (..., le)`)"
    ),
    "stddev": "record sum(x), sum(x * x) and count(x) (they compose) and compute the deviation from them",
    "stdvar": "record sum(x), sum(x * x) and count(x) (they compose) and compute the variance from them",
    "limitk": "use topk or bottomk (they compose)",
    "limit_ratio": "use topk or bottomk (they compose)",
}
# Series of which a fleet has one per GPU: the global tier must not read them itself. (A job's
# per-rank series are read there by the rules that compare a job's ranks with each other, such as
# its median step time, which does not compose across the shards its pods run on: they stay
# global, at a cost that grows with the ranks of the running jobs; docs/scaling.md.)
FLEET_SCALE_LABELS: tuple[str, ...] = ("uuid", "gpu_id")


@dataclass(frozen=True)
class Partial:
    """A recording rule of the shard tier: one shard's part of a global aggregation."""

    record: str
    expr: str

    def to_rule(self) -> dict[str, Any]:
        return {"record": self.record, "expr": pp.parse(self.expr).prettify()}


@dataclass(frozen=True)
class Rewritten:
    expr: str
    partials: tuple[Partial, ...]
    # Each aggregation pushed down, as written, and what the global rule reads instead.
    combined: tuple[tuple[str, str], ...] = ()


def _selector_names(node: pp.Expr) -> list[str]:
    names = []
    for n in walk(node):
        if isinstance(n, pp.VectorSelector):
            if n.name:
                names.append(str(n.name))
            else:
                names += [str(m.value) for m in n.matchers.matchers if m.name == "__name__"]
    return names


def _metric_part(name: str) -> str:
    parts = name.split(":")
    return parts[1] if len(parts) == 3 else name.replace(":", "_")


_RATES = frozenset({"rate", "irate", "increase", "delta", "idelta", "deriv"})


def _rate_window(node: pp.Expr) -> str:
    """`_rate5m` when `node` is (or wraps, unchanged in shape) a rate over a range, else ""."""
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    if isinstance(node, pp.Call) and str(node.func.name) in _RATES:
        text = str(node)
        window = text[text.rindex("[") + 1 : text.rindex("]")]
        return f"_{node.func.name}{window}"
    return ""


def _modifier(node: pp.AggregateExpr) -> tuple[str, tuple[str, ...]]:
    """("by" | "without" | "", labels)."""
    if node.modifier is None:
        return "", ()
    kind = "by" if node.modifier.type == pp.AggModifierType.By else "without"
    return kind, tuple(str(label) for label in node.modifier.labels)


def _aggregation(op: str, kind: str, labels: Sequence[str], inner: str, param: str = "") -> str:
    grouping = f" {kind} ({', '.join(labels)})" if kind else ""
    args = f"{param}, {inner}" if param else inner
    return f"{op}{grouping} ({args})"


class _Namer:
    """Partial names: `shard_<labels>:<metric>:<operation>`, the same for the same expression."""

    def __init__(self, taken: set[str]) -> None:
        self._by_expr: dict[str, str] = {}
        self._taken = taken

    def claim(self, key: str, name: str) -> str | None:
        """`name` for the partial identified by `key`, unless another partial has it."""
        if key in self._by_expr:
            return self._by_expr[key]
        if name in self._taken:
            return None
        self._taken.add(name)
        self._by_expr[key] = name
        return name

    def name(self, expr: str, labels: str, metric: str, operation: str, owner: str) -> str:
        canonical = str(pp.parse(expr))
        if canonical in self._by_expr:
            return self._by_expr[canonical]
        level = f"{PARTIAL_LEVEL}_{labels}" if labels else PARTIAL_LEVEL
        candidates = (
            f"{level}:{metric}:{operation}",
            f"{level}:{metric}:{operation}_for_{owner}",
            f"{level}:{metric}:{operation}_{hashlib.blake2b(canonical.encode(), digest_size=3).hexdigest()}",
        )
        name = next(c for c in candidates if c not in self._taken)
        self._taken.add(name)
        self._by_expr[canonical] = name
        return name


def _owner_token(rule: Mapping[str, Any]) -> str:
    name = rule_name(rule)
    if "record" in rule and len(name.split(":")) == 3:
        return name.split(":")[2]
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).strip("_")


class _Rewriter:
    def __init__(self, records: Mapping[str, Locality], namer: _Namer) -> None:
        self.records = records
        self.namer = namer

    def rewrite(self, rule: Mapping[str, Any]) -> Rewritten:
        root = pp.parse(str(rule["expr"]))
        replacements: dict[str, str] = {}
        partials: list[Partial] = []
        self._record = str(rule["record"]) if "record" in rule else ""
        self._root = root
        self._visit(root, _owner_token(rule), replacements, partials)
        if not replacements:
            return Rewritten(str(rule["expr"]), ())
        text = str(root)
        for old in sorted(replacements, key=len, reverse=True):
            text = text.replace(old, replacements[old])
        return Rewritten(pp.parse(text).prettify(), tuple(dict.fromkeys(partials)), tuple(replacements.items()))

    def _visit(self, node: pp.Expr, owner: str, replacements: dict[str, str], partials: list[Partial]) -> None:
        if isinstance(node, pp.SubqueryExpr):
            return  # a partial would be sampled at the shards' evaluations, not at the subquery's steps
        if isinstance(node, pp.AggregateExpr):
            if SHARD_LABEL in _modifier(node)[1]:
                return  # it reads the partials per shard, as only the global tier labels them
            op = str(node.op)
            inner = locality_of(node.expr, self.records)
            if inner.local and (op in _COMBINE or op == "avg"):
                replacements[str(node)] = self._combine(node, op, owner, partials)
                return
            grid = _grid(node) if inner.local and op == "quantile" else None
            if grid is not None:
                replacements[str(node)] = self._quantile(node, grid, owner, partials)
                return
        for child in children(node):
            self._visit(child, owner, replacements, partials)

    def _partial(self, expr: str, kind: str, labels: Sequence[str], metric: str, operation: str, owner: str) -> str:
        level = "_".join(labels) if kind == "by" else (f"without_{'_'.join(labels)}" if kind else "")
        return self.namer.name(expr, level, metric, operation, owner)

    def _after_record(self, node: pp.AggregateExpr, suffix: str = "") -> str | None:
        """The partial's name after the record it is the whole expression of (`shard_<level>:<metric>:<ops>`)."""
        parts = self._record.split(":")
        if len(parts) != 3 or str(node) != str(self._root):
            return None
        level = PARTIAL_LEVEL if parts[0] == "fleet" else f"{PARTIAL_LEVEL}_{parts[0]}"
        return self.namer.claim(str(node) + suffix, f"{level}:{parts[1]}:{parts[2]}{suffix}")

    def _quantile(self, node: pp.AggregateExpr, grid: ValueGrid, owner: str, partials: list[Partial]) -> str:
        """A fleet-wide quantile from the shards' value histograms (`distribution`)."""
        names = _selector_names(node.expr)
        metric = _metric_part(names[0])
        expr = value_histogram(str(node.expr), grid)
        name = self._after_record(node, "_histogram") or self._partial(expr, "", (), metric, "histogram", owner)
        partials.append(Partial(name, expr))
        return fleet_quantile(str(node.param), name, grid)

    def _combine(self, node: pp.AggregateExpr, op: str, owner: str, partials: list[Partial]) -> str:
        kind, labels = _modifier(node)
        inner = str(node.expr)
        names = _selector_names(node.expr)
        metric = _metric_part(names[0]) if names else "value"
        window = _rate_window(node.expr)
        if window:
            metric = metric.removesuffix("_total")
        # The partials carry `shard` in the global tier: `by` drops it, `without` must name it.
        combine_kind, combine_labels = (kind, labels) if kind == "by" else ("without", (SHARD_LABEL,))
        if kind == "":
            combine_kind, combine_labels = "", ()
        if op == "avg":
            parts = []
            for part in ("sum", "count"):
                expr = _aggregation(part, kind, labels, inner)
                name = self._after_record(node, f"_{part}") or self._partial(
                    expr, kind, labels, metric, part + window, owner
                )
                partials.append(Partial(name, expr))
                parts.append(_aggregation("sum", combine_kind, combine_labels, name))
            return f"({parts[0]} / {parts[1]})"
        param = str(node.param) if node.param is not None else ""
        expr = _aggregation(op, kind, labels, inner, param)
        operation = {"topk": f"top{param}", "bottomk": f"bottom{param}"}.get(op, op)
        if op == "count_values":
            value_label = str(node.param.val) if isinstance(node.param, pp.StringLiteral) else "value"
            operation = f"count_values_{value_label}"
            if kind == "by":
                combine_labels = (*labels, value_label)
            elif kind == "":
                combine_kind, combine_labels = "by", (value_label,)
        name = self._after_record(node) or self._partial(expr, kind, labels, metric, operation + window, owner)
        partials.append(Partial(name, expr))
        if op in ("topk", "bottomk"):
            # The series a shard picked keep their own labels (one target's, on one shard): the
            # shards' picks never collide once `shard` is aggregated away.
            picked = f"max without ({SHARD_LABEL}) ({name})"
            return _aggregation(op, kind, labels, picked, param)
        return _aggregation(_COMBINE[op], combine_kind, combine_labels, name)


def rewrites(
    tiers: Mapping[Tier, Sequence[Mapping[str, Any]]], groups: Sequence[Mapping[str, Any]]
) -> dict[str, Rewritten]:
    """Each global rule of `tiers` (as `split_groups` returns them) that combines partials, by name."""
    records = recorded_localities(groups)
    taken = {rule_name(r) for g in groups for r in g["rules"] if "record" in r}
    rewriter = _Rewriter(records, _Namer(taken))
    out = {}
    for group in tiers[Tier.GLOBAL]:
        for rule in group["rules"]:
            rewritten = rewriter.rewrite(rule)
            if rewritten.partials:
                out[rule_name(rule)] = rewritten
    return out


def _grid(node: pp.AggregateExpr) -> ValueGrid | None:
    """The value grid of a fleet-wide quantile over catalog series of one unit (None: no grid)."""
    if node.modifier is not None and (node.modifier.type != pp.AggModifierType.By or node.modifier.labels):
        return None
    units = set()
    for name in _selector_names(node.expr):
        try:
            units.add(catalog.by_name(name).unit)
        except KeyError:
            return None
    if len(units) != 1:
        return None
    return GRIDS_BY_UNIT.get(units.pop())


def push_down(
    tiers: Mapping[Tier, Sequence[Mapping[str, Any]]], groups: Sequence[Mapping[str, Any]]
) -> dict[Tier, list[dict[str, Any]]]:
    """The tiers with every composable aggregation of a global rule pushed down (module doc).

    `groups` are all the rule groups the tiers were split from (for the records' localities)."""
    records = recorded_localities(groups)
    taken = {rule_name(r) for g in groups for r in g["rules"] if "record" in r}
    rewriter = _Rewriter(records, _Namer(taken))
    shard = [dict(g, rules=list(g["rules"])) for g in tiers[Tier.SHARD]]
    out_global = []
    for group in tiers[Tier.GLOBAL]:
        rules, partials = [], []
        for rule in group["rules"]:
            rewritten = rewriter.rewrite(rule)
            rules.append({**rule, "expr": rewritten.expr} if rewritten.partials else dict(rule))
            partials += [p for p in rewritten.partials if p not in partials]
        out_global.append({**group, "rules": rules})
        if not partials:
            continue
        home = next((g for g in shard if g["name"] == group["name"]), None)
        if home is None:
            home = {**group, "rules": []}
            shard.append(home)
        known = {rule_name(r) for r in home["rules"]}
        home["rules"] += [p.to_rule() for p in partials if p.record not in known]
    order = [str(g["name"]) for g in groups]
    shard.sort(key=lambda g: order.index(str(g["name"])) if g["name"] in order else len(order))
    return {Tier.SHARD: shard, Tier.GLOBAL: out_global}


def _fleet_scale_series() -> frozenset[str]:
    return frozenset(
        name
        for metric in catalog.ALL_METRICS
        if any(label in metric.labels for label in FLEET_SCALE_LABELS)
        for name in metric.series_names
    )


FLEET_SCALE_SERIES: frozenset[str] = _fleet_scale_series()


def _fleet_scale_records(groups: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Records of the shard tier that keep a GPU (one series per GPU)."""
    records = recorded_localities(groups)
    return frozenset(
        name
        for name, locality in records.items()
        if locality.local
        and any(label in FLEET_SCALE_LABELS or label == "node" for label, _ in locality.keys)
        and not is_partial(name)
    )


def global_reads(rule: Mapping[str, Any]) -> frozenset[str]:
    """The series names a rule's expression selects."""
    return frozenset(_selector_names(pp.parse(str(rule["expr"]))))


def composability_problems(
    tiers: Mapping[Tier, Sequence[Mapping[str, Any]]], groups: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Every global rule of `tiers` (as `push_down` returns them) that reads per-GPU series itself,
    with how to write it so that it composes (empty: none)."""
    fleet_scale = FLEET_SCALE_SERIES | _fleet_scale_records(groups)
    records = recorded_localities(groups)
    problems = []
    for group in tiers[Tier.GLOBAL]:
        for rule in group["rules"]:
            read = sorted(global_reads(rule) & fleet_scale)
            if not read:
                continue
            how = _how_to_compose(pp.parse(str(rule["expr"])), records)
            problems.append(
                f"{group['name']}/{rule_name(rule)} reads {', '.join(read)} (one series per GPU) in the "
                f"global tier, which would read the whole fleet every evaluation: {how}"
            )
    return problems


def _how_to_compose(root: pp.Expr, records: Mapping[str, Locality]) -> str:
    for node in walk(root):
        if isinstance(node, pp.AggregateExpr) and str(node.op) in NOT_COMPOSABLE:
            return f"{node.op}() does not compose across shards; {NOT_COMPOSABLE[str(node.op)]}"
        if isinstance(node, pp.SubqueryExpr):
            return (
                "an aggregation inside a subquery is not pushed down; record the aggregation first and read the record"
            )
    return (
        "aggregate the series before anything combines them across shards (sum, count, min, max, avg, topk, "
        "bottomk or count_values over an expression that reads one shard's series, e.g. grouped by a job or a "
        "GPU model after joining on uuid), so that each shard computes a partial and the global tier combines them"
    )
