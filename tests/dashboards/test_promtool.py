"""Every PromQL expression of the dashboards, with Grafana's variables substituted, passes the real
Prometheus parser: each is wrapped as a recording rule and the file goes through `promtool check rules`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.queries import panel_queries, substitute_variables
from observability.rules import recording
from observability.rules.dashboard_recording import dashboard_recording_groups

pytestmark = pytest.mark.slow

LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def promtool_check(rules_file: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (Debian package prometheus; .ci/run installs it)"
    return subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60, check=False
    )


def write_groups(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    return path


def dashboard_query_groups(dashboards: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One group per dashboard; one rule per Prometheus target and per label_values variable."""
    groups = []
    for uid, dashboard in dashboards.items():
        prefix = f"dashboard_check:{uid.replace('-', '_')}"
        rules = []
        for q in panel_queries(dashboard):
            if q.datasource_type == "prometheus":
                rules.append({"record": f"{prefix}_panel_{q.panel_id}_{q.ref_id}:query", "expr": q.substituted})
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = LABEL_VALUES.match(variable["query"])
                assert match, f"{uid} ${variable['name']}: unexpected query {variable['query']!r}"
                selector = substitute_variables(match["selector"])
                record = f"{prefix}_variable_{variable['name']}:query"
                rules.append({"record": record, "expr": f"count({selector})"})
        groups.append({"name": uid, "rules": rules})
    return groups


def test_every_dashboard_query_passes_promtool(stack_dashboards, tmp_path):
    groups = dashboard_query_groups(stack_dashboards)
    assert sum(len(g["rules"]) for g in groups) > 60
    result = promtool_check(write_groups(tmp_path / "dashboard-queries.yaml", groups))
    assert result.returncode == 0 and not result.stderr, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in result.stdout


def test_dashboard_recording_rules_pass_promtool_with_the_alert_recording_rules(cfg, tmp_path):
    groups = [*recording.recording_groups(cfg), *dashboard_recording_groups(cfg)]
    result = promtool_check(write_groups(tmp_path / "recording.yaml", groups))
    assert result.returncode == 0 and not result.stderr, result.stdout + result.stderr


@pytest.mark.parametrize(
    "expr, error",
    [
        ("sum(rate(ml_training_data_batches_total[$__rate_interval]))", "duration"),
        ("histogram_quantile(0.95, sum by (le (x_bucket))", "parse error"),
    ],
)
def test_promtool_rejects_what_grafana_alone_could_run(expr, error, tmp_path):
    """The check has teeth: an unsubstituted variable or a syntax error fails it."""
    groups = [{"name": "broken", "rules": [{"record": "dashboard_check:broken:query", "expr": expr}]}]
    result = promtool_check(write_groups(tmp_path / "broken.yaml", groups))
    assert result.returncode != 0
    assert error in result.stdout + result.stderr


def test_rate_interval_substitutes_to_a_valid_duration_for_every_scrape_interval(stack_dashboards):
    for dashboard in stack_dashboards.values():
        for q in panel_queries(dashboard):
            window = q.variables["__rate_interval"]
            assert re.fullmatch(r"\d+(ms|s|m|h)", window), window
            if "$__rate_interval" in q.expr:
                assert f"[{window}]" in q.substituted
                assert "$" not in q.substituted
