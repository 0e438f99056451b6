"""Thresholds are data: one value in observability/thresholds.yaml moves its alert's expression,
summary and description, the dashboard steps that show it, the runbook and the boundary cases.

Every threshold is changed at once (-10 % and +5 %: ratios and percents stay in range) and the
whole chain is re-rendered from the changed config with no other edit; promtool then runs every
alert's cases, whose edges come from the same thresholds, against the re-rendered rules.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

import dashboards
from observability.config import ObservabilityConfig
from observability.rules import alert_rules
from observability.rules.runbooks import render_runbooks
from observability.thresholds import (
    ALERTS,
    DEFAULT_THRESHOLDS,
    THRESHOLDS_FILE,
    Threshold,
    Thresholds,
    ThresholdsError,
    dump_thresholds,
    load_thresholds,
    parse_thresholds,
)
from tests.rules.alert_cases import alert_cases, record_cases
from tests.rules.promtool_harness import Suite, run_promtool_tests

FACTORS = (0.9, 1.05)
# Dashboard panels whose threshold steps show an alert threshold: (uid, row, title) per threshold.
_UTILIZATION_PANELS = [
    ("ml-training-comprehensive", "GPU Monitoring", "GPU Utilization Timeline"),
    ("foxhunt-training-cockpit", "This Job's GPUs", "Job GPU Utilization"),
]
_MEMORY_PANELS = [
    ("ml-training-comprehensive", "GPU Monitoring", "GPU Memory Usage"),
    ("foxhunt-training-cockpit", "This Job's GPUs", "Job GPU Memory Used"),
]
PANELS: dict[str, list[tuple[str, str, str]]] = {
    "training_slowdown_epochs_per_second": [("ml-training-comprehensive", "High-Level Status", "Training Speed")],
    "gpu_utilization_low_percent": _UTILIZATION_PANELS,
    "gpu_utilization_high_percent": _UTILIZATION_PANELS,
    "gpu_memory_high_ratio": _MEMORY_PANELS,
    "gpu_memory_exhausted_ratio": _MEMORY_PANELS,
    "rule_group_slow_interval_ratio": [
        ("foxhunt-infra-cockpit", "Monitoring Health", "Slowest Rule Groups (share of interval)")
    ],
    "gpu_temperature_high_celsius": [
        ("ml-training-comprehensive", "Performance Metrics", "GPU Temperature"),
        ("foxhunt-training-cockpit", "GPU Resources", "GPU Temperature"),
        ("foxhunt-training-cockpit", "This Job's GPUs", "Job GPU Temperature"),
    ],
}


def _cfg(factor: float) -> ObservabilityConfig:
    return replace(ObservabilityConfig(), thresholds=DEFAULT_THRESHOLDS.scaled(factor))


def _spellings(name: str, t: Threshold) -> set[str]:
    """How annotations may spell the value (the accuracy factor is told as the drop below best)."""
    if name == "model_accuracy_drop_factor":
        return {f"{round((1 - t.value) * 100, 6):g}%"}
    return {t.short, t.text, t.promql}


def _compares_with(expr: str, t: Threshold) -> bool:
    return re.search(rf"[<>]=?\s*{re.escape(t.promql)}(?![0-9.])", expr) is not None


def _panels(cfg: ObservabilityConfig) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for uid, board in dashboards.build_all(cfg).items():
        row = ""
        for p in board["panels"]:
            if p["type"] == "row":
                row = p["title"]
                out.update({(uid, row, inner["title"]): inner for inner in p.get("panels", [])})
            else:
                out[(uid, row, p["title"])] = p
    return out


def _steps(p: dict[str, Any]) -> list[float]:
    return [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"] if s["value"] is not None]


def test_every_threshold_names_an_alert_and_every_field_is_in_the_file():
    assert set(ALERTS) == {f.name for f in fields(Thresholds)}
    assert set(dump_thresholds(load_thresholds())) == set(dump_thresholds(DEFAULT_THRESHOLDS))


@pytest.mark.parametrize("factor", FACTORS)
def test_expressions_texts_and_runbooks_follow_every_threshold(factor):
    cfg = _cfg(factor)
    old = {a.name: a for a in alert_rules(ObservabilityConfig())}
    new = {a.name: a for a in alert_rules(cfg)}
    runbooks = render_runbooks(cfg)
    for f in fields(Thresholds):
        before, after = getattr(DEFAULT_THRESHOLDS, f.name), getattr(cfg.thresholds, f.name)
        assert before.value != after.value, f.name
        alert = new[ALERTS[f.name]]
        assert _compares_with(alert.expr, after) and not _compares_with(alert.expr, before), (
            f"{alert.name}: expression does not compare with {after.promql}: {alert.expr}"
        )
        text = alert.summary + " " + alert.description
        assert any(s in text for s in _spellings(f.name, after)), f"{alert.name} does not say {after}: {text}"
        assert text != old[alert.name].summary + " " + old[alert.name].description
        assert alert.expr in runbooks or after.promql in runbooks.split(f"## {alert.name}")[1][:4000]


@pytest.mark.parametrize("factor", FACTORS)
def test_dashboard_steps_follow_every_threshold_they_show(factor):
    cfg = _cfg(factor)
    panels = _panels(cfg)
    for name, where in PANELS.items():
        value = getattr(cfg.thresholds, name)
        for key in where:
            assert key in panels, f"no panel {key}"
            shown = _steps(panels[key])
            assert value.percent in shown or value.value in shown, f"{key}: steps {shown} lack {name}={value.value}"
            assert shown == sorted(shown), f"{key}: steps no longer ascend: {shown}"


@pytest.mark.parametrize("factor", FACTORS)
def test_boundary_cases_follow_the_thresholds_and_pass_promtool(factor, tmp_path):
    cfg = _cfg(factor)
    default_names = {(c.alert, c.name) for c in alert_cases()}
    cases = alert_cases(cfg.thresholds)
    assert {(c.alert, c.name) for c in cases} != default_names, "the cases did not move with the thresholds"
    suite = Suite(f"thresholds-x{factor:g}", cfg, list(cases), list(record_cases(cfg.thresholds)))
    result = run_promtool_tests([suite.write(tmp_path)], cwd=tmp_path)
    assert result.returncode == 0, result.output[-20000:]


def test_old_boundary_cases_fail_against_moved_thresholds(tmp_path):
    """The cases are not vacuous: the default edges against rules with thresholds 10 % lower fail."""
    suite = Suite("stale-cases", _cfg(0.9), list(alert_cases()), [])
    result = run_promtool_tests([suite.write(tmp_path)], cwd=tmp_path)
    assert result.returncode != 0
    failed = {name.split(":", 1)[0] for name in result.failed_groups()}
    assert {"GPUTemperatureHigh", "GPUUtilizationLow", "ModelStorageUsageHigh"} <= failed, failed


def test_bad_threshold_files_name_the_file_the_key_and_the_value(tmp_path):
    good = dump_thresholds(DEFAULT_THRESHOLDS)
    with pytest.raises(ThresholdsError) as err:
        parse_thresholds({**good, "gpuTemperatureHighCelsius": "hot", "gpuMemoryHighRatio": 1.5, "typo": 1})
    text = str(err.value)
    assert "thresholds.yaml: gpuTemperatureHighCelsius = 'hot'" in text
    assert "gpuMemoryHighRatio = 1.5: expected a number above 0 and at most 1" in text
    assert "typo is not a known threshold" in text
    missing = dict(good)
    del missing["s3ErrorsPerSecond"]
    with pytest.raises(ThresholdsError, match="s3ErrorsPerSecond is missing"):
        parse_thresholds(missing)
    broken = tmp_path / "thresholds.yaml"
    broken.write_text("gpuTemperatureHighCelsius: [85\n")
    with pytest.raises(ThresholdsError, match=r"thresholds.yaml is not valid YAML"):
        load_thresholds(broken)


def test_the_file_is_the_default():
    assert Path(THRESHOLDS_FILE).name == "thresholds.yaml"
    assert load_thresholds() == ObservabilityConfig().thresholds
