"""docs/runbooks.md: one section per alert, reachable from runbook_url, with actions and queries."""

from __future__ import annotations

import re
import subprocess
from urllib.parse import urlsplit

import pytest
import yaml

from infra import REPO_ROOT
from observability.config import ObservabilityConfig
from observability.rules import ALERT_NAMES, alert_rules, gpu, group_inputs
from observability.rules.detection import CRITICAL_DETECTION_ALERTS, detection_budget
from observability.rules.runbooks import render_runbooks
from tests.rules.promtool_harness import alert_rule_dicts, promtool

CFG = ObservabilityConfig()
DOC = REPO_ROOT / "docs" / "runbooks.md"


def github_anchors(markdown: str) -> dict[str, str]:
    """Anchor -> heading text, as GitHub renders them (duplicates get -1, -2, ...)."""
    anchors: dict[str, str] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else re.match(r"^(#{1,6}) (.+?)\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(2).lower()).replace(" ", "-")
            base, n = slug, 0
            while slug in anchors:
                n += 1
                slug = f"{base}-{n}"
            anchors[slug] = match.group(2)
    return anchors


def section(markdown: str, heading: str) -> str:
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^#{{1,3}} |\Z)", markdown, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no section for {heading}"
    return match.group(1)


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_runbook_url_points_at_an_existing_section(alert):
    url = alert_rule_dicts(CFG)[alert]["annotations"]["runbook_url"]
    parts = urlsplit(url)
    assert url.startswith(CFG.runbook_base_url)
    assert parts.path.endswith("docs/runbooks.md")
    anchors = github_anchors(DOC.read_text(encoding="utf-8"))
    assert parts.fragment in anchors, f"{alert}: #{parts.fragment} is not a heading of docs/runbooks.md"
    assert anchors[parts.fragment] == alert


def test_runbook_url_follows_the_configured_base():
    cfg = ObservabilityConfig(runbook_base_url="https://docs.example.invalid/runbooks")
    url = alert_rule_dicts(cfg)["GPUErrorsDetected"]["annotations"]["runbook_url"]
    assert url == "https://docs.example.invalid/runbooks#gpuerrorsdetected"


@pytest.mark.parametrize("alert", alert_rules(CFG), ids=lambda a: a.name)
def test_section_has_the_actions_impact_and_queries(alert):
    text = section(DOC.read_text(encoding="utf-8"), alert.name)
    for i, step in enumerate(alert.action, start=1):
        assert f"{i}. {step}" in text
    assert alert.impact in text
    assert f"`{alert.severity.value}`" in text
    assert len(alert.queries) >= 2
    recorded = [r for r in group_inputs(alert.group, CFG) if f"`{r.record}`: {r.help}" in text]
    assert text.count("```promql") == 1 + len(recorded) + len(alert.queries)
    for rule in recorded:  # a recorded series the section explains is shown with its expression
        assert "\n".join(f"  {line}" for line in rule.expr.splitlines()) in text


def test_alerts_that_read_their_groups_recorded_inputs_show_them():
    text = DOC.read_text(encoding="utf-8")
    for name, records in {
        "GPUErrorsDetected": (gpu.ERRORS_NONZERO, gpu.ERRORS_INCREASED),
        "GPUMemoryExhaustionPredicted": (gpu.MEMORY_RATIO_WATCHED, gpu.EXHAUSTION_PREDICTED),
        "GPUTemperatureHigh": (gpu.TEMPERATURE_TOO_HOT,),
        "GPUMemoryExhausted": (gpu.MEMORY_RATIO_WATCHED, gpu.MEMORY_RATIO_HIGH),
    }.items():
        shown = section(text, name)
        assert all(f"- `{record}`:" in shown for record in records), name
    assert "at its head" not in section(text, "GPUUtilizationLow")


def test_the_expected_action_text_is_kept():
    rules = alert_rule_dicts(CFG)
    assert rules["TrainingNaNDetected"]["annotations"]["action"] == (
        "1. Stop training immediately 2. Check learning rate 3. Review data normalization 4. Inspect gradient clipping"
    )
    assert (
        rules["TrainingNaNDetected"]["annotations"]["impact"]
        == "Training unstable - model will produce invalid results"
    )
    assert rules["TrainingSlowdown"]["annotations"]["action"] == (
        "1. Check GPU utilization 2. Profile data loading 3. Review batch size"
    )
    assert rules["TrainingSlowdown"]["annotations"]["impact"] == "Training will take much longer than expected"


@pytest.mark.slow
def test_every_query_in_the_runbooks_parses(tmp_path):
    """promtool parses every PromQL block of the document (as recording rules)."""
    blocks = re.findall(r"```promql\n(.*?)\n\s*```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) >= 22 * 3
    rules = []
    for i, block in enumerate(blocks):
        query = "\n".join(line.strip() for line in block.splitlines())
        if query.endswith("]"):  # a range selector to graph: parse it inside a function
            query = f"count_over_time({query})"
        rules.append({"record": f"runbook:query_{i}:check", "expr": query})
    path = tmp_path / "runbook-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbook-queries", "rules": rules}]}), encoding="utf-8")
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("intervals", [(5, 5), (2, 3)])
def test_the_introduction_promises_pages_from_the_failure_with_each_critical_alerts_worst_case(intervals):
    scrape, evaluation = intervals
    cfg = ObservabilityConfig(critical_scrape_interval_seconds=scrape, critical_evaluation_interval_seconds=evaluation)
    introduction = render_runbooks(cfg).split("## Contents")[0]
    budget = detection_budget(cfg)
    alerts = {a.name: a for a in alert_rules(cfg)}
    for name in CRITICAL_DETECTION_ALERTS:
        worst = budget.worst_event_to_page_seconds(alerts[name].for_seconds)
        assert worst <= cfg.critical_detection_seconds
        assert f"{name} {worst}s" in introduction
    assert f"within {cfg.critical_detection_seconds}s of the failure itself" in introduction
    assert f"scraped every {scrape}s" in introduction and f"evaluated every {evaluation}s" in introduction
