"""Reading PromQL with a real parser (promql-parser, bindings of the Rust crate).

Which series an expression reads and in which context (inside `rate`, under
`histogram_quantile`, ...), never with regular expressions: the dashboards' lint and README, the
rule tiers (`observability.promql.locality`), the runbooks and the tests read expressions with it.
Expressions must be plain PromQL: substitute Grafana variables first (`dashboards.queries`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import promql_parser as pp

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import MetricType


@dataclass(frozen=True)
class SelectorUse:
    """One vector selector in an expression, with the nodes around it (outermost first)."""

    name: str
    ancestors: tuple[pp.Expr, ...]
    range: timedelta | None  # the window when the selector sits in a range selector
    matcher_labels: tuple[str, ...] = ()  # label names the selector matches on (not __name__)

    def enclosing_calls(self) -> list[str]:
        return [a.func.name for a in self.ancestors if isinstance(a, pp.Call)]

    def direct_function(self) -> str | None:
        """The function the selector (or its range selector) is an argument of, if any."""
        for node in reversed(self.ancestors):
            if isinstance(node, pp.MatrixSelector | pp.ParenExpr):
                continue
            return node.func.name if isinstance(node, pp.Call) else None
        return None


def children(node: pp.Expr) -> list[pp.Expr]:
    if isinstance(node, pp.AggregateExpr):
        param = [node.param] if isinstance(node.param, pp.Expr) else []
        return [*param, node.expr]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.Call):
        return [a for a in node.args if isinstance(a, pp.Expr)]
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return [node.expr]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def walk(node: pp.Expr) -> Iterator[pp.Expr]:
    """`node` and every expression below it, depth first, left to right."""
    yield node
    for child in children(node):
        yield from walk(child)


def metric_name(selector: pp.VectorSelector) -> str | None:
    """The series name a selector reads (`name{...}` or `{__name__="name"}`); None without one."""
    if selector.name:
        return str(selector.name)
    for m in selector.matchers.matchers:
        if m.name == "__name__" and m.op == pp.MatchOp.Equal:
            return str(m.value)
    return None


def _named(selector: pp.VectorSelector) -> str:
    name = metric_name(selector)
    if name is None:
        raise ValueError(f"selector without a metric name: {selector}")
    return name


def selector_uses(expr: str) -> list[SelectorUse]:
    """Every vector selector in `expr`, depth first, left to right."""
    found: list[SelectorUse] = []

    def visit(node: pp.Expr, ancestors: tuple[pp.Expr, ...]) -> None:
        if isinstance(node, pp.VectorSelector):
            parent = ancestors[-1] if ancestors else None
            window = parent.range if isinstance(parent, pp.MatrixSelector) else None
            labels = tuple(m.name for m in node.matchers.matchers if m.name != "__name__")
            found.append(SelectorUse(_named(node), ancestors, window, labels))
            return
        for child in children(node):
            visit(child, (*ancestors, node))

    visit(pp.parse(expr), ())
    return found


def series_names(expr: str) -> set[str]:
    """Names of every series `expr` reads."""
    return {use.name for use in selector_uses(expr)}


def aggregation_keeps(node: pp.AggregateExpr, label: str) -> bool:
    """Whether an aggregation's result still carries `label`."""
    modifier = node.modifier
    if modifier is None:
        return False
    if modifier.type == pp.AggModifierType.By:
        return label in modifier.labels
    return label not in modifier.labels


def outer_aggregation(expr: str) -> tuple[str, pp.Expr] | None:
    """The operator and the argument of an expression that is one aggregation at its top
    (`sum by (job) (rate(x[5m]))` -> ("sum", `rate(x[5m])`)); None for any other expression."""
    node = pp.parse(expr)
    if not isinstance(node, pp.AggregateExpr):
        return None
    return str(node.op), node.expr


def quantile_depth(use: SelectorUse) -> int | None:
    """How many nodes above the selector its `histogram_quantile` sits (None when under none)."""
    return next(
        (i for i, a in enumerate(use.ancestors) if isinstance(a, pp.Call) and a.func.name == "histogram_quantile"),
        None,
    )


def keeps_le(use: SelectorUse, outermost: int = 0) -> bool:
    """Whether every aggregation between the selector and `ancestors[outermost]` keeps `le`."""
    return all(aggregation_keeps(a, "le") for a in use.ancestors[outermost:] if isinstance(a, pp.AggregateExpr))


# --- what the catalog says about a series name ------------------------------------------------------
def is_counter_series(name: str) -> bool:
    """A catalog counter, or a series of a catalog histogram (`_bucket`, `_sum`, `_count`)."""
    try:
        metric = catalog.by_name(name)
    except KeyError:
        return False
    return metric.type is MetricType.COUNTER or (metric.type is MetricType.HISTOGRAM and name != metric.name)


def is_bucket_series(name: str) -> bool:
    """Raw `_bucket` series of a catalog histogram, or a recording of bucket rates."""
    if ":" in name:
        return name.split(":")[1].endswith("_bucket")
    return name.endswith("_bucket") and is_counter_series(name)
