"""Deduplicating what replicas wrote: one answer per series however many Prometheus replicas sent it.

Two replicas of a shard scrape the same targets and evaluate the same rules; each remote-writes its
copy to the global tier, where the copies differ only in the replica label (the replicas' external
label, `cfg.replica_label`). Summed as they are, every fleet and per-job figure would count each
shard twice. `deduplicate(expr, label)` rewrites an expression so that it reads one copy:

- a vector selector `x` reads the freshest copy of each series, the greatest value where copies
  are equally fresh:
  `max without (R) (x and (timestamp(x) >= ignoring (R) group_left () max without (R) (timestamp(x))))`.
  A replica killed without a chance to mark its series stale leaves its last samples readable for
  the lookback (5 minutes); the freshest copy is the surviving replica's, not the dead one's;
- a function over a range (`rate(x[5m])`, `max_over_time(x[1h])`, ...) is taken per copy and the
  copies' results reduced with `max without (R)`: a replica that missed samples (it was down, or
  restarted) has a rate extrapolated over fewer of them, or a lower count, never a higher one;
- `timestamp(x)` is the greatest of the copies' timestamps; `absent(x)` and `absent_over_time`
  are left alone (a series is absent only when no replica wrote it);
- an expression that names the replica label itself (a health rule counting the replicas of a
  shard) is left as written: it reads the copies on purpose.

Series without the replica label (the global tier's own records, Tempo's span metrics) pass
through unchanged. `replica_problems(expr, label)` names what cannot be deduplicated this way (the
metric name is dropped by `max without`, so an expression grouping or matching on `__name__` would
lose it), with how to write it instead; the render fails on any.
"""

from __future__ import annotations

import promql_parser as pp

from observability.promql.syntax import children

# Range functions left to read every copy: a series is absent only when no replica wrote it.
_KEEP_ALL_COPIES = frozenset({"absent", "absent_over_time"})
# Functions whose result describes the samples themselves: reduced over the copies after them.
_OF_SAMPLES = frozenset({"timestamp"})
METRIC_NAME = "__name__"


def freshest(selector: str, label: str) -> str:
    """The freshest copy of each series `selector` reads (the greatest value among equally fresh)."""
    stamp = f"timestamp({selector})"
    return (
        f"max without ({label}) ({selector} and ({stamp} >= ignoring ({label}) group_left () "
        f"max without ({label}) ({stamp})))"
    )


def reduced(expr: str, label: str) -> str:
    return f"max without ({label}) ({expr})"


def names_label(root: pp.Expr, label: str) -> bool:
    """Whether `root` names `label` (in a grouping, a vector matching or a matcher)."""
    return label in _labels_named(root)


def _labels_named(root: pp.Expr) -> set[str]:
    named: set[str] = set()
    for node in _walk(root):
        if isinstance(node, pp.AggregateExpr) and node.modifier is not None:
            named.update(str(label) for label in node.modifier.labels)
        elif isinstance(node, pp.BinaryExpr) and node.modifier is not None:
            matching = node.modifier.matching
            if matching is not None:
                named.update(str(label) for label in matching.labels)
            named.update(str(label) for label in node.modifier.group_labels or ())
        elif isinstance(node, pp.VectorSelector):
            named.update(str(m.name) for m in node.matchers.matchers)
            if node.matchers.or_matchers:
                named.update(str(m.name) for group in node.matchers.or_matchers for m in group)
        elif isinstance(node, pp.StringLiteral):
            named.add(str(node.val))
    return named


def _walk(node: pp.Expr) -> list[pp.Expr]:
    out = [node]
    for child in children(node):
        out += _walk(child)
    return out


def _unparenthesized_parent(ancestors: list[pp.Expr]) -> pp.Expr | None:
    for node in reversed(ancestors):
        if not isinstance(node, pp.ParenExpr):
            return node
    return None


def _selector_contexts(root: pp.Expr) -> list[tuple[str, str]]:
    """For each vector selector, left to right: (its text, what to do with it)."""
    out: list[tuple[str, str]] = []

    def visit(node: pp.Expr, ancestors: list[pp.Expr]) -> None:
        if isinstance(node, pp.VectorSelector):
            parent = _unparenthesized_parent(ancestors)
            if isinstance(parent, pp.MatrixSelector):
                out.append((str(node), "range"))
            elif isinstance(parent, pp.Call) and str(parent.func.name) in _KEEP_ALL_COPIES:
                out.append((str(node), "keep"))
            elif isinstance(parent, pp.Call) and str(parent.func.name) in _OF_SAMPLES:
                out.append((str(node), "of-samples"))
            else:
                out.append((str(node), "freshest"))
            return
        for child in children(node):
            visit(child, [*ancestors, node])

    visit(root, [])
    return out


def deduplicate(expr: str, label: str, *, pretty: bool = False) -> str:
    """`expr` reading one copy of each series the replicas wrote (module doc), printed on one line
    or, `pretty`, as promql-parser prettifies it; Grafana variables must be substituted or
    protected first."""
    root = pp.parse(expr)
    if names_label(root, label):
        return root.prettify() if pretty else expr
    contexts = iter(_selector_contexts(root))

    def post(node: pp.Expr) -> pp.Expr | None:
        if isinstance(node, pp.VectorSelector):
            text, what = next(contexts)
            if text != str(node):
                raise AssertionError(f"selector order: {text!r} != {str(node)!r} in {expr!r}")
            return pp.parse(freshest(str(node), label)) if what == "freshest" else None
        if isinstance(node, pp.Call):
            name = str(node.func.name)
            args = [a for a in node.args if isinstance(a, pp.Expr)]
            ranged = any(isinstance(_strip(a), pp.MatrixSelector) for a in args)
            if (ranged and name not in _KEEP_ALL_COPIES) or (
                name in _OF_SAMPLES and args and isinstance(_strip(args[0]), pp.VectorSelector)
            ):
                return pp.parse(reduced(str(node), label))
        return None

    rewritten = pp.transform(root, post_visit=post)
    return rewritten.prettify() if pretty else str(rewritten)


def _strip(node: pp.Expr) -> pp.Expr:
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    return node


def replica_problems(expr: str, label: str) -> list[str]:
    """What in `expr` the deduplication cannot keep, with how to write it (empty: nothing)."""
    root = pp.parse(expr)
    if names_label(root, label):
        return []
    if METRIC_NAME in _labels_named(root):
        return [
            f"it matches or groups on {METRIC_NAME}, which the deduplication of the replicas' copies "
            f"(max without ({label})) drops: select each metric by name in a rule of its own, or name "
            f"{label} in the expression and deduplicate the copies yourself"
        ]
    return []
