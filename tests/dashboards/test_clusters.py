"""The `$cluster` variable: with several clusters every Prometheus query filters by it, with one
the dashboards are exactly as before. Checked with a real PromQL parser and promtool."""

from __future__ import annotations

import dataclasses
from typing import Any

import promql_parser as pp
import pytest

from dashboards import build_all
from dashboards.clusters import CLUSTER_VARIABLE, filter_by_cluster
from dashboards.queries import panel_queries, substitute_variables
from observability.config import ObservabilityConfig
from observability.promql.syntax import children, selector_uses
from tests.dashboards.test_promtool import LABEL_VALUES, dashboard_query_groups, promtool_check, write_groups

ONE = ObservabilityConfig(cluster="eu-1", clusters=("eu-1",))
TWO = dataclasses.replace(ONE, clusters=("eu-1", "us-1"))


def _shape(expr: str) -> list[str]:
    """Node types and selector names of an expression, depth first: its structure without matchers."""
    out: list[str] = []

    def visit(node: pp.Expr) -> None:
        out.append(type(node).__name__ + (f":{node.name}" if isinstance(node, pp.VectorSelector) else ""))
        for child in children(node):
            visit(child)

    visit(pp.parse(expr))
    return out


def _prometheus_queries(dashboard: dict[str, Any]) -> list[Any]:
    return [q for q in panel_queries(dashboard) if q.datasource_type == "prometheus"]


def test_one_cluster_leaves_every_dashboard_as_it_was() -> None:
    assert build_all(ONE) == build_all(ObservabilityConfig())
    for dashboard in build_all(ONE).values():
        assert all(v["name"] != CLUSTER_VARIABLE for v in dashboard["templating"]["list"])


def test_several_clusters_filter_every_selector_of_every_query_by_the_variable() -> None:
    single, multi = build_all(ONE), build_all(TWO)
    checked = 0
    for uid, dashboard in multi.items():
        variables = [v for v in dashboard["templating"]["list"] if v["name"] == CLUSTER_VARIABLE]
        assert len(variables) == 1, uid
        assert variables[0]["current"]["value"] == "eu-1" and variables[0]["includeAll"]
        before, after = _prometheus_queries(single[uid]), _prometheus_queries(dashboard)
        assert len(before) == len(after)
        for old, new in zip(before, after, strict=True):
            expr = substitute_variables(new.expr, {CLUSTER_VARIABLE: "eu-1"})
            uses = selector_uses(expr)
            assert uses and all("cluster" in u.matcher_labels for u in uses), (uid, new.panel_title, new.expr)
            assert _shape(expr) == _shape(old.substituted), (uid, new.panel_title)
            checked += 1
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query" and variable["name"] != CLUSTER_VARIABLE:
                selector = LABEL_VALUES.match(variable["query"])
                assert selector is not None
                assert "cluster" in selector_uses(substitute_variables(selector["selector"]))[0].matcher_labels
    assert checked > 60


@pytest.mark.slow
def test_the_filtered_queries_pass_promtool(tmp_path: Any) -> None:
    groups = dashboard_query_groups(build_all(TWO))
    result = promtool_check(write_groups(tmp_path / "cluster-queries.yaml", groups))
    assert result.returncode == 0 and not result.stderr, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("expr", "filtered"),
    [
        ("up == 0", 'up{cluster=~"$cluster"} == 0'),
        (
            'sum by (le) (increase(x_bucket{job=~"$job"}[$__rate_interval]))',
            'sum by (le)(increase(x_bucket{job=~"$job",cluster=~"$cluster"}[$__rate_interval]))',
        ),
        ("fleet:x:sum offset 5m", 'fleet:x:sum{cluster=~"$cluster"} offset 5m'),
        ('{__name__="x"}', '{__name__="x",cluster=~"$cluster"}'),
        ('a{cluster="b"} / b', 'a{cluster="b"} / b{cluster=~"$cluster"}'),
    ],
)
def test_filter_by_cluster(expr: str, filtered: str) -> None:
    assert filter_by_cluster(expr) == filtered
