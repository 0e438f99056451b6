"""The infra cockpit's "Monitoring Health" row: what the health alerts watch, fleet-bounded."""

from __future__ import annotations

from typing import Any

from dashboards import infra_cockpit
from dashboards.lint import recorded_expressions
from dashboards.queries import panel_queries
from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql.fleet_bound import fleet_sized
from observability.rules import project_group_names

ROW = "Monitoring Health"
PANELS = [
    "Pollers Up vs GPU Nodes",
    "Nodes with NVML Down",
    "GPUs Enumerated vs Answering",
    "Slowest Rule Groups (share of interval)",
    "Poller Scrape Duration",
]


def _row(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = dashboard["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == ROW)
    out = []
    for panel in panels[start + 1 :]:
        if panel["type"] == "row":
            break
        out.append(panel)
    return out


def _queries(cfg: ObservabilityConfig) -> dict[str, list[str]]:
    dashboard = infra_cockpit.build(cfg)
    titles = {p["title"] for p in _row(dashboard)}
    out: dict[str, list[str]] = {}
    for query in panel_queries(dashboard):
        if query.panel_title in titles:
            out.setdefault(query.panel_title, []).append(query.substituted)
    return out


def test_the_row_has_its_panels_in_order() -> None:
    assert [p["title"] for p in _row(infra_cockpit.build(ObservabilityConfig()))] == PANELS


def test_gpu_nodes_come_from_capacity_only_with_kube_state_metrics() -> None:
    capacity = catalog.KUBE_NODE_STATUS_CAPACITY.name
    without = _queries(ObservabilityConfig())
    with_ksm = _queries(ObservabilityConfig(kube_state_metrics=True))
    assert not any(capacity in q for qs in without.values() for q in qs)
    assert any(capacity in q for q in with_ksm["Pollers Up vs GPU Nodes"])
    assert any(capacity in q for q in with_ksm["GPUs Enumerated vs Answering"])


def test_rule_group_panel_reads_every_project_group_and_only_those() -> None:
    cfg = ObservabilityConfig()
    (query,) = _queries(cfg)["Slowest Rule Groups (share of interval)"]
    assert query.startswith("topk(5, ")
    for name in project_group_names(cfg):
        assert name.replace(".", "[.]") in query


def test_no_panel_of_the_row_draws_a_series_per_node() -> None:
    for cfg in (ObservabilityConfig(), ObservabilityConfig(kube_state_metrics=True)):
        for title, queries in _queries(cfg).items():
            for query in queries:
                assert not fleet_sized(query, recorded_expressions()), (title, query)
