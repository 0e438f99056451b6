"""Thresholds are data: one record in observability/thresholds.yaml moves its alert's expression,
summary and description, the dashboard steps that show it, the runbook and the boundary cases.

Every threshold is changed at once (-10 % and +5 %: ratios and percents stay in range) and the
whole chain is re-rendered from the changed config with no other edit; promtool then runs every
alert's cases, whose edges come from the same thresholds, against the re-rendered rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

import dashboards
from observability.config import ObservabilityConfig
from observability.rules import ALERT_NAMES, alert_groups, alert_rules, rule_groups
from observability.rules.goodput import goodput_rules
from observability.rules.runbooks import render_runbooks
from observability.thresholds import (
    DEFAULT_THRESHOLDS,
    THRESHOLDS_FILE,
    Threshold,
    Thresholds,
    ThresholdsError,
    attribute_name,
    dump_thresholds,
    load_thresholds,
    parse_thresholds,
)
from tests.rules.alert_cases import alert_cases, record_cases
from tests.rules.promtool_harness import Case, RecordCase, Suite, run_promtool_tests, split_suites

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


def test_every_threshold_names_an_alert_that_exists_and_reads_back_as_written():
    assert len(DEFAULT_THRESHOLDS) > 0
    records = {r["record"] for g in rule_groups(ObservabilityConfig()) for r in g["rules"] if "record" in r}
    for t in DEFAULT_THRESHOLDS:
        assert t.alert in ALERT_NAMES or (t.record in records and not t.alert), f"{t.name}: no alert {t.alert}"
        assert getattr(DEFAULT_THRESHOLDS, attribute_name(t.name)) is t
    assert parse_thresholds(dump_thresholds(DEFAULT_THRESHOLDS)) == DEFAULT_THRESHOLDS == load_thresholds()


def test_a_threshold_of_no_alert_fails_the_rules_naming_it():
    orphan = Threshold("gpuFanSpeedHighPercent", 90, "percent", "GPUFanSpeedHigh")
    cfg = replace(ObservabilityConfig(), thresholds=Thresholds([*DEFAULT_THRESHOLDS, orphan]))
    with pytest.raises(
        ValueError, match=r"gpuFanSpeedHighPercent belongs to alert GPUFanSpeedHigh, which no rule group has"
    ):
        alert_groups(cfg)


def test_a_threshold_of_no_recording_rule_fails_the_rules_naming_it():
    orphan = Threshold("trainingIdleRatio", 0.5, "ratio", "", "model_type_job_id:ml_training_idle:ratio")
    cfg = replace(ObservabilityConfig(), thresholds=Thresholds([*DEFAULT_THRESHOLDS, orphan]))
    with pytest.raises(ValueError, match=r"trainingIdleRatio belongs to record model_type_job_id:ml_training_idle"):
        rule_groups(cfg)
    with pytest.raises(ThresholdsError, match=r"trainingIdleRatio names both an alert and a record"):
        parse_thresholds({"trainingIdleRatio": {"value": 0.5, "unit": "ratio", "alert": "X", "record": "a:b:c"}})
    with pytest.raises(ThresholdsError, match=r"trainingIdleRatio.record = 'idle': expected the level:metric"):
        parse_thresholds({"trainingIdleRatio": {"value": 0.5, "unit": "ratio", "record": "idle"}})


def test_reading_a_threshold_with_no_record_names_the_records_there_are():
    with pytest.raises(AttributeError, match=r"no threshold gpu_fan_speed_high_percent \(gpuFanSpeedHighPercent in "
                       r"thresholds.yaml\): expected one of .*gpu_memory_high_ratio"):  # fmt: skip
        _ = DEFAULT_THRESHOLDS.gpu_fan_speed_high_percent


@pytest.mark.parametrize("factor", FACTORS)
def test_expressions_texts_and_runbooks_follow_every_threshold(factor):
    cfg = _cfg(factor)
    old = {a.name: a for a in alert_rules(ObservabilityConfig())}
    new = {a.name: a for a in alert_rules(cfg)}
    runbooks = render_runbooks(cfg)
    records = {r.record: r for r in goodput_rules(cfg)}
    for before in DEFAULT_THRESHOLDS:
        name = attribute_name(before.name)
        after = getattr(cfg.thresholds, name)
        assert before.value != after.value, name
        if before.record:
            rule = records[before.record]
            assert _compares_with(rule.expr, after) and not _compares_with(rule.expr, before), rule.record
            assert any(s in rule.help for s in _spellings(name, after)), f"{rule.record} does not say {after}"
            continue
        alert = new[before.alert]
        assert _compares_with(alert.expr, after) and not _compares_with(alert.expr, before), (
            f"{alert.name}: expression does not compare with {after.promql}: {alert.expr}"
        )
        text = alert.summary + " " + alert.description
        assert any(s in text for s in _spellings(name, after)), f"{alert.name} does not say {after}: {text}"
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


# The cases a threshold decides run through promtool once more, every threshold 5 % higher: their
# edges are derived from the thresholds, so one direction proves they follow (the cases no threshold
# moves are the same promtool groups as the committed suite's, which test_promtool_cases runs); the
# same cases at the committed edges fail against thresholds 10 % lower (below), and
# tests/infra/test_routine_changes.py runs one alert per unit through promtool from thresholds.yaml
# edited 10 % lower in a copy.
PROMTOOL_FACTORS = tuple(f for f in FACTORS if f > 1)

C = TypeVar("C", Case, RecordCase)


def moved(cases: Sequence[C], others: Sequence[C]) -> list[C]:
    """The cases of `cases` that differ from every one of `others` (cases hold dicts: compared by repr)."""
    known = {repr(c) for c in others}
    return [c for c in cases if repr(c) not in known]


@pytest.mark.parametrize("factor", PROMTOOL_FACTORS)
@pytest.mark.slow
def test_boundary_cases_follow_the_thresholds_and_pass_promtool(factor, tmp_path):
    cfg = _cfg(factor)
    # The cases the thresholds moved (the committed ones pass promtool in test_promtool_cases).
    default_cases = alert_cases()
    cases = moved(alert_cases(cfg.thresholds), default_cases)
    assert len(cases) > len(default_cases) / 3, "the cases did not move with the thresholds"
    records = moved(record_cases(cfg.thresholds), record_cases())
    assert records, "no record case moved with the thresholds"
    suites = split_suites(f"thresholds-x{factor:g}", cfg, cases, records)
    result = run_promtool_tests([path for suite in suites for path in suite.write_parts(tmp_path)], cwd=tmp_path)
    assert result.returncode == 0, result.output[-20000:]


@pytest.mark.slow
def test_old_boundary_cases_fail_against_moved_thresholds(tmp_path):
    """The cases are not vacuous: the default edges against rules with thresholds 10 % lower fail."""
    stale = moved(alert_cases(), alert_cases(_cfg(0.9).thresholds))  # the committed edges thresholds decide
    suite = Suite("stale-cases", _cfg(0.9), stale, [])
    result = run_promtool_tests(suite.write_parts(tmp_path), cwd=tmp_path)
    assert result.returncode != 0
    failed = {name.split(":", 1)[0] for name in result.failed_groups()}
    assert {"GPUTemperatureHigh", "GPUUtilizationLow", "ModelStorageUsageHigh"} <= failed, failed


def test_bad_threshold_files_name_the_file_the_key_and_the_value(tmp_path):
    good = dump_thresholds(DEFAULT_THRESHOLDS)
    bad = {
        **good,
        "gpuTemperatureHighCelsius": {**good["gpuTemperatureHighCelsius"], "value": "hot"},
        "gpuMemoryHighRatio": {**good["gpuMemoryHighRatio"], "value": 1.5},
        "modelDriftScore": {**good["modelDriftScore"], "unit": "furlongs"},
        "modelCacheMissRatio": {**good["modelCacheMissRatio"], "alert": ""},
        "s3ErrorsPerSecond": 1,
        "gpu_fan_percent": good["gpuMemoryHighRatio"],
    }
    with pytest.raises(ThresholdsError) as err:
        parse_thresholds(bad)
    text = str(err.value)
    assert "thresholds.yaml: gpuTemperatureHighCelsius = 'hot': expected a number above 1 and at most 150" in text
    assert "gpuMemoryHighRatio = 1.5: expected a number above 0 and at most 1 (ratio)" in text
    assert "modelDriftScore.unit = 'furlongs': expected one of percent, ratio" in text
    assert "modelCacheMissRatio.alert = '': expected the name of the alert" in text
    assert "s3ErrorsPerSecond = 1: expected {value: <number>, unit: <unit>, alert: <alert name>}" in text
    assert "'gpu_fan_percent' is not a threshold name: expected lowerCamelCase" in text
    missing = {**good, "s3ErrorsPerSecond": {"unit": "per_second", "alert": "S3ConnectionErrors"}}
    with pytest.raises(ThresholdsError, match=r"s3ErrorsPerSecond.value is missing: expected a number from"):
        parse_thresholds(missing)
    with pytest.raises(ThresholdsError, match=r"s3ErrorsPerSecond.threshold is not a field of a threshold"):
        parse_thresholds({**good, "s3ErrorsPerSecond": {**good["s3ErrorsPerSecond"], "threshold": 1}})
    broken = tmp_path / "thresholds.yaml"
    broken.write_text("gpuTemperatureHighCelsius: {value: [85\n")
    with pytest.raises(ThresholdsError, match=r"thresholds.yaml is not valid YAML"):
        load_thresholds(broken)


def test_the_file_is_the_default():
    assert Path(THRESHOLDS_FILE).name == "thresholds.yaml"
    assert load_thresholds() == ObservabilityConfig().thresholds
