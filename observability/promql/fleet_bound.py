"""Whether a PromQL expression can return one series per GPU or per node (unbounded at fleet scale).

A panel that draws 8,000 GPUs (or 1,000 nodes) is slow to query and unreadable, so every
dashboard expression must answer with a number of series that does not grow with the fleet.
`fleet_sized(expr, records)` walks the parsed expression and tells whether its answer can carry
one series per fleet member, i.e. whether it keeps a label that tells GPUs or nodes apart:

- a selector of a GPU poller metric (every one carries `node`, the per-GPU ones also `gpu_id` and
  `uuid`) is fleet sized, and so is a recorded series whose rule's expression is (followed
  through `records`, so a recording rule cannot hide per-GPU output);
- functions keep their argument's series (`rate`, `ceil`, `label_replace`, ...);
- `topk`/`bottomk`/`limitk` with a literal k of at most `MAX_TOPK` and no fleet-sized grouping
  bound their answer, whatever they read;
- every other aggregation bounds it unless its grouping keeps a member label (`by (node)`,
  `without (gpu_id)`, ...);
- a whole expression that is a comparison without `bool` against a scalar is a filter
  (`max by (node) (nvml_up) == 0`): it returns only the members in trouble, which is what a
  "failing nodes" table shows, so it counts as bounded (inside a larger expression it does not);
- `and`/`unless` return a subset of their left side, `or` and arithmetic the union of both.

Expressions must be plain PromQL (substitute Grafana variables first, `dashboards.queries`).
"""

from __future__ import annotations

from collections.abc import Mapping

import promql_parser as pp

from foxhunt_trainer.contract import catalog
from observability.promql.syntax import metric_name

# Labels that tell one GPU or node (or the poller pod on it) from another. `gpu_id` alone is not
# one (it runs 0-7 on every node), `node` is.
MEMBER_LABELS = frozenset({"node", "uuid", "pod", "instance"})
# The largest k of a topk/bottomk/limitk a panel may draw.
MAX_TOPK = 20
BOUNDING_AGGREGATIONS = frozenset({"topk", "bottomk", "limitk"})
SET_SUBSET = frozenset({"and", "unless"})
COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})


def _series_name(node: pp.VectorSelector) -> str:
    return metric_name(node) or ""


def _is_scalar(node: pp.Expr) -> bool:
    if isinstance(node, pp.NumberLiteral):
        return True
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr):
        return _is_scalar(node.expr)
    if isinstance(node, pp.Call):
        return bool(node.func.return_type == pp.ValueType.Scalar)
    if isinstance(node, pp.BinaryExpr):
        return _is_scalar(node.lhs) and _is_scalar(node.rhs)
    return False


def _is_filter(node: pp.Expr) -> bool:
    """A comparison without `bool` between a vector and a scalar: it drops the series that fail it."""
    if not isinstance(node, pp.BinaryExpr) or str(node.op) not in COMPARISONS:
        return False
    if node.modifier is not None and node.modifier.return_bool:
        return False
    return _is_scalar(node.lhs) != _is_scalar(node.rhs)


def _grouping_keeps_member(modifier: pp.AggModifier | None, labels: frozenset[str]) -> bool:
    """Whether an aggregation's grouping keeps a member label of its input's `labels`."""
    if modifier is None:
        return False
    if modifier.type == pp.AggModifierType.By:
        return bool(MEMBER_LABELS & set(modifier.labels))
    return bool(MEMBER_LABELS & (labels - set(modifier.labels)))


class FleetBound:
    """The analysis, with the recording rules (record -> expression) an expression may read."""

    def __init__(self, records: Mapping[str, str]) -> None:
        self._records = dict(records)
        self._recorded: dict[str, frozenset[str]] = {}

    def member_labels(self, expr: str) -> frozenset[str]:
        """The member labels (`MEMBER_LABELS`) the answer of `expr` can keep; empty when bounded."""
        root = pp.parse(expr)
        while isinstance(root, pp.ParenExpr):
            root = root.expr
        if _is_filter(root):
            return frozenset()
        return self._labels(root)

    def _series_labels(self, name: str) -> frozenset[str]:
        if name in self._records:
            if name not in self._recorded:
                self._recorded[name] = frozenset()  # a cycle reads as bounded; promtool rejects it anyway
                self._recorded[name] = self.member_labels(self._records[name])
            return self._recorded[name]
        try:
            metric = catalog.by_name(name)
        except KeyError:
            return frozenset()
        if metric.producer is not catalog.Producer.GPU_POLLER:
            return frozenset()
        # The poller's own labels plus the scrape target labels of the poller pod.
        return frozenset(MEMBER_LABELS & {*metric.labels, "pod", "instance"})

    def _labels(self, node: pp.Expr) -> frozenset[str]:
        if isinstance(node, pp.VectorSelector):
            return self._series_labels(_series_name(node))
        if isinstance(node, pp.MatrixSelector):
            return self._labels(node.vector_selector)
        if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            return self._labels(node.expr)
        if isinstance(node, pp.Call):
            found: frozenset[str] = frozenset()
            for arg in node.args:
                if isinstance(arg, pp.Expr):
                    found |= self._labels(arg)
            return found
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate_labels(node)
        if isinstance(node, pp.BinaryExpr):
            return self._binary_labels(node)
        return frozenset()  # number and string literals

    def _aggregate_labels(self, node: pp.AggregateExpr) -> frozenset[str]:
        inner = self._labels(node.expr)
        if not inner:
            return inner
        op = str(node.op)
        if op in BOUNDING_AGGREGATIONS:
            k = node.param.val if isinstance(node.param, pp.NumberLiteral) else None
            if k is not None and k <= MAX_TOPK and not _grouping_keeps_member(node.modifier, inner):
                return frozenset()
            return inner
        if not _grouping_keeps_member(node.modifier, inner):
            return frozenset()
        modifier = node.modifier
        if modifier is not None and modifier.type == pp.AggModifierType.By:
            return inner & set(modifier.labels)
        return inner - set(modifier.labels if modifier is not None else ())

    def _binary_labels(self, node: pp.BinaryExpr) -> frozenset[str]:
        op = str(node.op)
        lhs, rhs = self._labels(node.lhs), self._labels(node.rhs)
        if op in SET_SUBSET:
            return lhs
        return lhs | rhs


def fleet_sized(expr: str, records: Mapping[str, str]) -> bool:
    """Whether `expr` can return one series per GPU or node of the fleet."""
    return bool(FleetBound(records).member_labels(expr))
