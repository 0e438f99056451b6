"""Rendering: the interface the infra program calls, determinism, the JSON model and the README."""

from __future__ import annotations

import json
from importlib import metadata

import promql_parser as pp
from grafana_foundation_sdk.models.dashboard import Dashboard as SdkDashboard

import dashboards
from dashboards import readme
from dashboards.queries import panel_queries
from observability.promql.syntax import selector_uses
from tests import locks

UIDS = ["foxhunt-training-cockpit", "foxhunt-traces", "foxhunt-infra-cockpit", "ml-training-comprehensive"]


def test_build_all_returns_the_four_dashboards_by_uid(cfg):
    built = dashboards.build_all(cfg)
    assert list(built) == UIDS
    for uid, d in built.items():
        assert d["uid"] == uid and len(uid) <= 40
        assert isinstance(d, dict) and json.loads(dashboards.to_json(d)) == d  # plain JSON data


def test_rendering_is_deterministic(cfg):
    first = {uid: dashboards.to_json(d) for uid, d in dashboards.build_all(cfg).items()}
    second = {uid: dashboards.to_json(d) for uid, d in dashboards.build_all(cfg).items()}
    assert first == second
    for text in first.values():
        assert text.endswith("}\n")
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_classic_dashboard_model_of_current_grafana(dashboard):
    assert dashboard["schemaVersion"] == SdkDashboard().schema_version >= 39  # Grafana 11/12
    assert "panels" in dashboard and "templating" in dashboard and "rows" not in dashboard
    assert dashboard["annotations"]["list"][0]["builtIn"] == 1
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert rows and all(r["collapsed"] is False and r["panels"] == [] for r in rows)
    assert "foxhunt" in dashboard["tags"] and dashboard["links"][0]["tags"] == ["foxhunt"]


def test_datasource_variables_default_to_the_configured_uids(stack_dashboards, cfg):
    for d in stack_dashboards.values():
        for v in d["templating"]["list"]:
            if v["type"] == "datasource":
                assert v["current"]["value"] == getattr(cfg.datasource_uids, v["query"])


def test_heavy_histogram_quantiles_read_recording_rules(stack_dashboards):
    """No panel computes a quantile from raw `_bucket` series: those go through recording rules."""
    raw = []
    for d in stack_dashboards.values():
        for q in panel_queries(d):
            if q.datasource_type != "prometheus":
                continue
            for use in selector_uses(q.substituted):
                quantile = any(isinstance(a, pp.Call) and a.func.name == "histogram_quantile" for a in use.ancestors)
                if quantile and ":" not in use.name:
                    raw.append(f"{d['uid']} {q.panel_title}: {use.name}")
    assert raw == []


def test_readme_lists_every_panel_of_every_dashboard(default_dashboards):
    text = readme.render()
    for d in default_dashboards.values():
        assert f"## {d['title']}" in text
        for p in d["panels"]:
            if p["type"] != "row":
                assert f"| {p['title']} | {p['type']} |" in text


def test_sdk_is_pinned_to_a_plain_version():
    pinned = locks.pins(locks.DEPLOY_LOCK)["grafana-foundation-sdk"]
    assert "!" not in pinned
    assert metadata.version("grafana-foundation-sdk").lstrip("v") == pinned
