"""The 30-second detection promise: derived `for`, rejected configs, and the simulated proof."""

from __future__ import annotations

import re

import pytest

from observability.config import ObservabilityConfig
from observability.rules import CRITICAL_DETECTION_ALERTS, RECORDING_RULES, alert_rules, rule_groups, rules_file_yaml
from observability.rules.detection import critical_for_seconds, detection_budget, event_window_seconds
from tests.rules.detection_cases import INTERVALS, variant_cfg


def _for(cfg: ObservabilityConfig) -> dict[str, int]:
    return {a.name: a.for_seconds for a in alert_rules(cfg)}


@pytest.mark.parametrize(
    ("scrape", "evaluation", "budget", "memory_for"),
    [(15, 15, 30, 15), (10, 10, 30, 20), (30, 30, 30, 0), (5, 5, 30, 25), (15, 30, 30, 0), (30, 30, 60, 30)],
)
def test_gpu_memory_exhausted_for_is_derived_from_the_intervals(scrape, evaluation, budget, memory_for):
    cfg = variant_cfg(scrape, evaluation, budget)
    assert _for(cfg)["GPUMemoryExhausted"] == memory_for
    assert _for(cfg)["TrainingNaNDetected"] == 0
    assert _for(cfg)["GPUErrorsDetected"] == 0


def test_a_long_budget_keeps_the_one_minute_for():
    assert _for(variant_cfg(15, 15, 120))["GPUMemoryExhausted"] == 60


@pytest.mark.parametrize(("scrape", "evaluation", "budget"), INTERVALS)
def test_worst_case_latency_fits_the_budget(scrape, evaluation, budget):
    cfg = variant_cfg(scrape, evaluation, budget)
    window = detection_budget(cfg)
    for alert in alert_rules(cfg):
        if alert.name in CRITICAL_DETECTION_ALERTS:
            assert window.worst_latency_seconds(alert.for_seconds) <= budget


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"evaluation_interval_seconds": 60},
            r"cannot be detected within critical_detection_seconds=30.*evaluation_interval_seconds=60",
        ),
        ({"evaluation_interval_seconds": 45, "critical_detection_seconds": 40}, r"critical_detection_seconds=40"),
        ({"scrape_interval_seconds": 0}, r"scrape_interval_seconds must be positive"),
        ({"evaluation_interval_seconds": -15}, r"evaluation_interval_seconds must be positive"),
        ({"critical_detection_seconds": 0}, r"critical_detection_seconds must be positive"),
    ],
)
def test_a_config_that_cannot_keep_the_promise_is_rejected(changes, message):
    cfg = ObservabilityConfig(**changes)
    with pytest.raises(ValueError, match=message):
        rule_groups(cfg)
    with pytest.raises(ValueError, match=message):
        rules_file_yaml(cfg)
    with pytest.raises(ValueError, match=message):
        critical_for_seconds(cfg, 60)


def test_event_window_spans_several_scrapes():
    assert event_window_seconds(ObservabilityConfig()) == 600
    assert event_window_seconds(variant_cfg(300, 15, 30)) == 1200


def test_critical_detection_alerts_read_only_series_recorded_before_them_in_their_own_group():
    """A recorded series from another group may be one evaluation old: it would eat the budget.
    Rules of one group run in order at one evaluation time, so a series recorded earlier in the
    alert's own group is as fresh as the raw series it was computed from."""
    records = {r.record for r in RECORDING_RULES}
    for group in rule_groups(ObservabilityConfig()):
        recorded_before: set[str] = set()
        for rule in group["rules"]:
            if "record" in rule:
                recorded_before.add(rule["record"])
                continue
            if rule["alert"] not in CRITICAL_DETECTION_ALERTS:
                continue
            expr = re.sub(r"\[[^\]]*\]", "", rule["expr"])
            names = set(re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", expr))
            assert names <= recorded_before, (rule["alert"], names - recorded_before)
            assert not (names - recorded_before) & records, rule["alert"]
    critical = {a.name: a.expr for a in alert_rules(ObservabilityConfig()) if a.name in CRITICAL_DETECTION_ALERTS}
    assert set(critical) == set(CRITICAL_DETECTION_ALERTS)


def test_the_promise_holds_in_simulated_time(promtool_run):
    """promtool fired every critical alert exactly when predicted, and never later than the budget."""
    assert promtool_run.detections, "no detection cases were generated"
    covered = {(d.scrape, d.evaluation, d.budget) for d in promtool_run.detections}
    assert covered == set(INTERVALS)
    assert {d.alert for d in promtool_run.detections} == set(CRITICAL_DETECTION_ALERTS)
    for d in promtool_run.detections:
        assert 0 <= d.latency <= d.budget, d
    failed = {n for n in promtool_run.result.failed_groups() if "scrape " in n}
    assert not failed, promtool_run.result.output[-20000:]
    # the worst case (a sample just after an evaluation) is among the cases
    assert any(d.first_bad % d.evaluation == 1 for d in promtool_run.detections)
