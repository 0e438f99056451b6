"""`dashboards.queries`: Grafana's variable substitution and the list of every panel query."""

from __future__ import annotations

import pytest

from dashboards.queries import builtin_values, format_duration, panel_queries, substitute_variables, variable_names
from observability.promql.syntax import selector_uses


@pytest.mark.parametrize(
    "expr, values, expected",
    [
        ("rate(x[$__rate_interval])", None, "rate(x[1m])"),
        ("rate(x[${__rate_interval}])", {"__rate_interval": "2m"}, "rate(x[2m])"),
        ("increase(x[$__interval]) / $__interval_ms", None, "increase(x[15s]) / 15000"),
        (
            "sum_over_time(x[$__range]) / $__range_s",
            {"__range": "6h", "__range_s": "21600"},
            "sum_over_time(x[6h]) / 21600",
        ),
        (
            'x{a=~"$model", b=~"${job:regex}", c="[[fold]]"}',
            {"model": "dqn", "job": "j1", "fold": "3"},
            'x{a=~"dqn", b=~"j1", c="3"}',
        ),
        ('x{a=~"$model_type"}', {"model": "dqn"}, 'x{a=~".*"}'),  # $model_type is not $model
        ('x{a=~"$unknown"}', None, 'x{a=~".*"}'),
        ('x{a=~"^foo$"}', None, 'x{a=~"^foo$"}'),  # a regex anchor is not a variable
        ("x[$__rate_interval] offset $__interval", {"__interval": "30s", "__rate_interval": "2m"}, "x[2m] offset 30s"),
    ],
)
def test_substitute_variables(expr, values, expected):
    assert substitute_variables(expr, values) == expected


@pytest.mark.parametrize(
    "step, scrape, rate_interval",
    [("15s", "", "1m"), ("30s", "", "2m"), ("10s", "", "40s"), ("5m", "15s", "315s"), ("1m", "15s", "75s")],
)
def test_rate_interval_follows_grafana(step, scrape, rate_interval):
    """max($__interval + scrape interval, 4 x scrape interval), written as one exact unit."""
    assert builtin_values(step, "1h", scrape)["__rate_interval"] == rate_interval


def test_format_duration_is_exact():
    assert [format_duration(s) for s in (0.5, 15, 60, 90, 3600, 5400, 86400, 604800)] == [
        "500ms",
        "15s",
        "1m",
        "90s",
        "1h",
        "90m",
        "1d",
        "1w",
    ]


def test_variable_names():
    assert variable_names('rate(x{a=~"$model", b="${job:csv}"}[$__rate_interval])') == {
        "model",
        "job",
        "__rate_interval",
    }


def test_panel_queries_describe_every_target(stack_dashboards, cfg):
    for uid, dashboard in stack_dashboards.items():
        queries = panel_queries(dashboard)
        targets = [t for p in dashboard["panels"] for t in p.get("targets", [])]
        assert len(queries) == len(targets), uid
        assert len({(q.panel_id, q.ref_id) for q in queries}) == len(queries)
        for q in queries:
            assert q.dashboard_uid == uid
            assert q.datasource_uid == getattr(cfg.datasource_uids, q.datasource_type)
            assert q.step in (f"{cfg.scrape_interval_seconds}s",), (uid, q.panel_title, q.step)
            assert q.time_range in ("1h", "6h")
            if q.datasource_type == "prometheus":
                assert "$" not in q.substituted
                assert selector_uses(q.substituted)


def test_panel_queries_resolve_the_datasource_variables_of_the_config(variant_dashboards):
    """The concrete uid a datasource variable selects is what a tool must query."""
    uids = {q.datasource_uid for d in variant_dashboards.values() for q in panel_queries(d)}
    assert uids == {"prom-variant", "tempo-variant", "loki-variant"}


def test_instant_table_targets_are_marked_instant(default_dashboards):
    infra = default_dashboards["foxhunt-infra-cockpit"]
    instant = {q.panel_title for q in panel_queries(infra) if q.instant}
    assert instant == {
        "Targets Down",
        "Slowest Rule Groups (share of interval)",
        "Driver Versions",
        "NVML Up per Node",
        "Nodes with NVML Down",
        "GPUs per Node",
        "Slowest Collections",
        "Most Collection Failures",
        "GPUs with ECC Errors",
        "GPUs with XID Errors",
        "GPUs with Hardware Errors",
        "Highest Power Draw",
        "GPU-Hours by Verdict (24 h)",
        "Jobs Wasting the Most GPU-Hours",
        "GPU Models Without a Peak",
    }
    tables = {p["title"] for p in infra["panels"] if p["type"] == "table"}
    fleet_counts = {"Nodes with NVML Down", "GPUs per Node", "GPU-Hours by Verdict (24 h)"}
    assert tables | fleet_counts == instant, "tables and fleet counts show the state now"
