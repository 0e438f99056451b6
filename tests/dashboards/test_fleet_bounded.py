"""No dashboard target can return one series per GPU or per node: panels stay bounded at fleet scale.

The rule (`observability.promql.fleet_bound`, also the `fleet-bounded` lint rule): parse each Prometheus
target with the real PromQL parser (variables at their defaults, so `$node` is "All") and compute
which member labels (`node`, `uuid`, `pod`, `instance`: the labels that tell one of 1,000 nodes or
8,000 GPUs apart) its answer can keep. A selector of a GPU poller metric keeps them; a recorded
series keeps what its rule's expression keeps; functions keep their argument's; an aggregation
drops them unless its grouping keeps one (`sum by (node)` is 1,000 series, also a design bug at
fleet scale); `topk`/`bottomk`/`limitk` with a literal k <= MAX_TOPK and no member grouping bound
their answer; a whole expression that is a filter against a scalar (`... == 0`) returns only the
members in trouble, so a "failing nodes" table is allowed. A target that keeps any member label
fails. The first tests prove the rule bites on the expressions the fleet benchmark flagged.
"""

from __future__ import annotations

import pytest

from dashboards import lint
from dashboards.queries import panel_queries
from foxhunt_trainer.contract import catalog
from observability.promql import gauge_by
from observability.promql.fleet_bound import MAX_TOPK, FleetBound, fleet_sized
from observability.rules import dashboard_recording as rec

RECORDS = lint.recorded_expressions()
GPU = catalog.GPU_UTILIZATION_PERCENT.name
NVML = catalog.GPU_POLLER_NVML_UP.name
MEMORY_RATIO = (  # a per-GPU ratio
    f"{gauge_by(catalog.GPU_MEMORY_USED_BYTES, catalog.GPU)} / {gauge_by(catalog.GPU_MEMORY_TOTAL_BYTES, catalog.GPU)}"
)

UNBOUNDED = [
    # The expressions the 1,000-node benchmark returned thousands of series for.
    f'{GPU}{{node=~".*"}}',
    f"100 * {MEMORY_RATIO}",
    f"max by (node) ({NVML})",
    f'sum by (node, gpu_id, xid) (rate({catalog.GPU_XID_ERRORS_TOTAL.name}{{node=~".*"}}[1m]))',
    f"sum by (node) ({catalog.GPU_POWER_WATTS.name})",
    f"sum without (gpu_id) ({catalog.GPU_POWER_WATTS.name})",  # keeps node, uuid, pod
    f"max by (node, driver_version) ({catalog.GPU_DRIVER_INFO.name})",
    f"topk({MAX_TOPK + 1}, {GPU})",
    f"topk by (node) (1, {GPU})",  # one per node
    f"{GPU} > bool 90",  # `bool` keeps every series
    f"({GPU} > 90) * 2",  # a filter inside a larger expression is not the whole answer
    f"{GPU} and on () vector(1)",
    f"vector(1) or {GPU}",
    f"ceil({GPU})",
]
BOUNDED = [
    f"topk(5, {GPU})",
    f'bottomk(5, {GPU}{{node=~".*"}})',
    f"quantile(0.5, {GPU})",
    f"max({catalog.GPU_TEMPERATURE_CELSIUS.name})",
    f"sum by (error_type) (rate({catalog.GPU_ERRORS_TOTAL.name}[1m]))",
    f"count by (driver_version, nvml_version, cuda_driver_version) ({catalog.GPU_DRIVER_INFO.name})",
    f"sum by (gpu_id) ({GPU})",  # gpu_id runs 0-7 on every node: 8 series
    f"max by (node) ({NVML}) == 0",  # only the failing nodes
    f"count(max by (node) ({NVML}) == 0) or vector(0)",
    f"topk(5, 100 * {MEMORY_RATIO})",
    rec.GPU_ERRORS_RATE.record,
    rec.GPU_UTILIZATION_TOP.record,  # a recorded topk keeps GPU labels, 5 series
    f"sum by (le) (increase({catalog.TRAINING_ITERATION_SECONDS.bucket}[1m]))",  # not a poller metric
]


@pytest.mark.parametrize("expr", UNBOUNDED)
def test_a_per_gpu_or_per_node_answer_is_fleet_sized(expr):
    assert fleet_sized(expr, RECORDS), expr


@pytest.mark.parametrize("expr", BOUNDED)
def test_an_aggregated_or_topk_answer_is_bounded(expr):
    assert not fleet_sized(expr, RECORDS), FleetBound(RECORDS).member_labels(expr)


def test_a_recording_rule_cannot_hide_per_gpu_output():
    records = {"node_gpu:x:copy": GPU, "fleet:x:max": f"max({GPU})"}
    assert fleet_sized("node_gpu:x:copy", records)
    assert not fleet_sized("fleet:x:max", records)
    assert not fleet_sized("node_gpu:x:copy", {}), "an unknown series is not a poller metric"


def test_no_dashboard_target_returns_one_series_per_gpu_or_node(stack_dashboards):
    bound = FleetBound(RECORDS)
    unbounded = [
        (q.dashboard_uid, q.panel_title, q.ref_id, q.substituted, sorted(bound.member_labels(q.substituted)))
        for d in stack_dashboards.values()
        for q in panel_queries(d)
        if q.datasource_type == "prometheus" and bound.member_labels(q.substituted)
    ]
    assert unbounded == []


def test_every_gpu_poller_metric_is_still_read_by_some_target(default_dashboards):
    """Bounding must not drop a metric: each poller metric still reaches a panel (directly or
    through a recording rule)."""
    from observability.promql.syntax import series_names

    names: set[str] = set()
    pending = [
        q.substituted
        for d in default_dashboards.values()
        for q in panel_queries(d)
        if q.datasource_type == "prometheus"
    ]
    while pending:
        for name in series_names(pending.pop()):
            if name in RECORDS and name not in names:
                pending.append(RECORDS[name])
            names.add(name)
    missing = [m.name for m in catalog.by_producer(catalog.Producer.GPU_POLLER) if not set(m.series_names) & names]
    assert missing == []


def test_the_lint_rule_flags_an_unbounded_target(default_dashboards):
    dashboard = default_dashboards["ml-training-comprehensive"]
    assert lint.fleet_bounded(dashboard) == []
    gpu_panel = next(p for p in dashboard["panels"] if p["title"] == "GPU Utilization Timeline")
    gpu_panel["targets"][1]["expr"] = GPU
    assert [p.split(":", 1)[0] for p in lint.problems(dashboard)] == ["fleet-bounded"]
