"""Lint rules over the rendered JSON of every dashboard of every stack, and proof each rule bites."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dashboards import lint


def test_rendered_dashboard_passes_every_lint_rule(dashboard):
    assert lint.problems(dashboard) == []


def _first(dashboard: dict[str, Any], panel_type: str | None = None, datasource: str = "prometheus") -> dict[str, Any]:
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        if (panel_type is None or panel["type"] == panel_type) and panel["datasource"]["type"] == datasource:
            found: dict[str, Any] = panel
            return found
    raise AssertionError(f"no {panel_type} panel on {dashboard['uid']}")


def _rules_hit(dashboard: dict[str, Any]) -> set[str]:
    return {problem.split(":", 1)[0] for problem in lint.problems(dashboard)}


def _break_description(d):
    _first(d)["description"] = ""


def _break_unit(d):
    del _first(d, "timeseries")["fieldConfig"]["defaults"]["unit"]


def _break_overlap(d):
    a, b = [p for p in d["panels"] if p["type"] != "row"][:2]
    b["gridPos"] = dict(a["gridPos"])


def _break_width(d):
    _first(d)["gridPos"]["x"] = 20


def _break_ids(d):
    a, b = [p for p in d["panels"] if p["type"] != "row"][:2]
    b["id"] = a["id"]


def _break_ref_id(d):
    _first(d)["targets"][0].pop("refId")


def _break_datasource(d):
    _first(d)["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prometheus"}


def _break_datasource_variable(d):
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "datasource"]


def _break_rate_window(d):
    _first(d)["targets"][0]["expr"] = "sum(rate(ml_training_data_batches_total[5m]))"


def _break_counter(d):
    _first(d)["targets"][0]["expr"] = "sum(ml_training_data_batches_total)"


def _break_counter_in_over_time(d):
    _first(d)["targets"][0]["expr"] = "max_over_time(ml_checkpoint_saves_total[$__rate_interval])"


def _break_histogram_le(d):
    _first(d)["targets"][0]["expr"] = (
        "histogram_quantile(0.9, sum by (job) (rate(ml_training_iteration_seconds_bucket[$__rate_interval])))"
    )


def _break_histogram_outside_quantile(d):
    _first(d, "timeseries")["targets"][0]["expr"] = (
        "sum by (le) (model_type:ml_training_data_loading_seconds_bucket:rate5m)"
    )


def _break_variable(d):
    _first(d)["targets"][0]["expr"] = 'ml_training_loss{model_type=~"$nonexistent"}'


def _break_syntax(d):
    _first(d)["targets"][0]["expr"] = "sum by (le (ml_training_loss)"


def _break_uid(d):
    d["uid"] = "x" * 41


def _break_expanded_row(d):
    row = d["panels"][0]
    row["panels"] = [dict(_first(d))]


BREAKAGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "panel-description": _break_description,
    "panel-units": _break_unit,
    "grid-positions": _break_overlap,
    "grid-positions/width": _break_width,
    "panel-ids": _break_ids,
    "target-refid": _break_ref_id,
    "datasource-variable": _break_datasource,
    "datasource-variable/missing": _break_datasource_variable,
    "rate-interval": _break_rate_window,
    "counter-under-rate": _break_counter,
    "counter-under-rate/over_time": _break_counter_in_over_time,
    "histogram-quantile-le": _break_histogram_le,
    "histogram-quantile-le/outside": _break_histogram_outside_quantile,
    "template-variables": _break_variable,
    "promql-parses": _break_syntax,
    "dashboard-metadata": _break_uid,
    "rows": _break_expanded_row,
}


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_each_lint_rule_catches_its_violation(case, default_dashboards):
    dashboard = default_dashboards["foxhunt-training-cockpit"]
    assert lint.problems(dashboard) == []
    BREAKAGES[case](dashboard)
    rule = case.split("/")[0]
    assert rule in _rules_hit(dashboard), lint.problems(dashboard)


def test_tempo_and_loki_targets_use_their_datasource_variables(default_dashboards):
    traces = default_dashboards["foxhunt-traces"]
    kinds = {p["datasource"]["type"]: p["datasource"]["uid"] for p in traces["panels"] if p["type"] != "row"}
    assert kinds == {"prometheus": "${datasource}", "tempo": "${tempo}", "loki": "${loki}"}
    _first(traces, "logs", "loki")["targets"][0]["datasource"] = {"type": "loki", "uid": "${datasource}"}
    assert "datasource-variable" in _rules_hit(traces)


def test_grid_is_filled_row_by_row_without_gaps_between_rows(dashboard):
    """Each row panel sits right below the lowest panel above it."""
    bottom = 0
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        if panel["type"] == "row":
            assert (g["x"], g["y"], g["w"], g["h"]) == (0, bottom, 24, 1)
        bottom = max(bottom, g["y"] + g["h"])
