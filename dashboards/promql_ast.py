"""Reading PromQL with a real parser (promql-parser, bindings of the Rust crate).

Used by the README generator and the tests to find which series an expression reads and in
which context (inside `rate`, under `histogram_quantile`, ...), never with regular expressions.
Expressions must be plain PromQL: substitute Grafana variables first (`dashboards.queries`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import promql_parser as pp


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


def _selector_name(selector: pp.VectorSelector) -> str:
    if selector.name:
        return selector.name
    for m in selector.matchers.matchers:
        if m.name == "__name__" and m.op == pp.MatchOp.Equal:
            return m.value
    raise ValueError(f"selector without a metric name: {selector}")


def selector_uses(expr: str) -> list[SelectorUse]:
    """Every vector selector in `expr`, depth first, left to right."""
    found: list[SelectorUse] = []

    def visit(node: pp.Expr, ancestors: tuple[pp.Expr, ...]) -> None:
        if isinstance(node, pp.VectorSelector):
            parent = ancestors[-1] if ancestors else None
            window = parent.range if isinstance(parent, pp.MatrixSelector) else None
            labels = tuple(m.name for m in node.matchers.matchers if m.name != "__name__")
            found.append(SelectorUse(_selector_name(node), ancestors, window, labels))
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
