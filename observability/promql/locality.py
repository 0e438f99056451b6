"""Where an expression's results come from, with sharded scraping in mind: which labels on each
result pin the one scrape target it was computed from, or why a result combines several targets.

With scraping sharded by `hashmod` (on the node each target's pod runs on), each shard holds the
series of some targets and none of the others; an expression gives the same answer on the shards
as on one server only if every result it computes reads the series of one scrape target.
`derive(expr, records)` follows the labels that pin a target through every selector, aggregation,
join and function, with a real PromQL parser (promql-parser); the rule tiers
(`observability.rules.tiers`) place rules by it, and the global tier's dashboards
(`dashboards.global_tier`) find the per-GPU records with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import promql_parser as pp

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Producer
from observability.promql.syntax import metric_name


class LocalityError(ValueError):
    """An expression holds a node the derivation does not know."""


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


# Labels that pin the shard of a series without pinning one target: the shards split targets by the
# node their pod runs on, and a container is only given GPUs of its own node, so a GPU's poller
# series and the `ml_training_job_gpu_info` of the training pod holding it (both labelled `uuid`)
# are scraped by the same shard. Joining them on `uuid` (a job's view of its GPUs, a per-GPU alert
# labelled with the job holding the GPU) is therefore computed on the shards, once.
_GPU = "gpu"
COLOCATED_KEYS: tuple[str, ...] = ("uuid",)
COLOCATED_PRODUCERS: frozenset[Producer] = frozenset({Producer.GPU_POLLER, Producer.TRAINING_JOB})


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


CONSTANT = Locality(constant=True)


def combining(reason: str) -> Locality:
    """The locality of a result that combines the series of several targets, and why."""
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


class _Deriver:
    def __init__(self, records: Mapping[str, Locality]) -> None:
        self.records = records
        self.unknown: set[str] = set()

    def visit(self, node: pp.Expr) -> Locality:
        if isinstance(node, pp.NumberLiteral | pp.StringLiteral):
            return CONSTANT
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
        raise LocalityError(f"unexpected PromQL node {type(node).__name__}: {node}")

    def _selector(self, node: pp.VectorSelector) -> Locality:
        name = metric_name(node)
        if name is not None and name in self.records:
            return self.records[name]
        if name is None or name not in SERIES_KEYS:
            self.unknown.add(name or str(node))
            return combining(f"reads {name or node}, which is neither a catalog metric nor a recorded series")
        keys = SERIES_KEYS[name]
        if not keys:
            return combining(f"{name} has no label that pins one scrape target (not scraped per target)")
        return Locality(keys)

    def _call(self, node: pp.Call) -> Locality:
        name = str(node.func.name)
        args = [a for a in node.args if isinstance(a, pp.Expr)]
        inner = [self.visit(a) for a in args]
        if name in _WHOLE_INPUT_FUNCTIONS:
            if all(i.constant for i in inner):
                return CONSTANT
            return combining(f"{name}() judges the whole input, of which a shard holds a part")
        if name in _CONSTANT_FUNCTIONS and all(i.constant for i in inner):
            return CONSTANT
        vectors = [i for i in inner if not i.constant]
        if not vectors:
            return CONSTANT
        first = vectors[0]
        if first.combines:
            return first
        if name in _LABEL_WRITERS:
            written = args[1]
            target = str(written.val) if isinstance(written, pp.StringLiteral) else ""
            kept = frozenset(k for k in first.keys if k[0] != target)
            if not kept:
                return combining(f"{name}() overwrites {target}, the label that pinned the target")
            return Locality(kept)
        return first

    def _aggregate(self, node: pp.AggregateExpr) -> Locality:
        inner = self.visit(node.expr)
        op = str(node.op)
        if inner.combines:
            return inner
        if inner.constant:
            return CONSTANT
        modifier = node.modifier
        if modifier is None:
            grouped: frozenset[Key] = frozenset()
        elif modifier.type == pp.AggModifierType.By:
            grouped = frozenset(k for k in inner.keys if k[0] in modifier.labels)
        else:
            grouped = frozenset(k for k in inner.keys if k[0] not in modifier.labels)
        if not grouped:
            labels = ", ".join(sorted({k[0] for k in inner.keys}))
            return combining(f"{op}() groups across scrape targets (its groups keep none of {labels})")
        # topk/bottomk/limitk keep every label of the series they pick; the others keep the groups'.
        return Locality(inner.keys if op in ("topk", "bottomk", "limitk") else grouped)

    def _binary(self, node: pp.BinaryExpr) -> Locality:
        lhs, rhs = self.visit(node.lhs), self.visit(node.rhs)
        for side in (lhs, rhs):
            if side.combines:
                return side
        if lhs.constant and rhs.constant:
            return CONSTANT
        op = str(node.op).strip()
        modifier = node.modifier
        if lhs.constant or rhs.constant:
            vector = rhs if lhs.constant else lhs
            if op == "or":
                return combining("`or` with a constant vector yields a series on every shard")
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
            return combining(f"`{op}` matches series of different scrape targets")
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
