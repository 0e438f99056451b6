"""The 30-second detection promise: derived `for`, rejected configs, and the simulated proof."""

from __future__ import annotations

import re

import pytest

from observability.config import ObservabilityConfig
from observability.rules import (
    CRITICAL_DETECTION_ALERTS,
    RECORDING_RULES,
    alert_rules,
    critical_group_names,
    rule_groups,
    rules_file_yaml,
)
from observability.rules.detection import critical_for_seconds, detection_budget, event_window_seconds
from tests.rules.detection_cases import INTERVALS, variant_cfg


def _for(cfg: ObservabilityConfig) -> dict[str, int]:
    return {a.name: a.for_seconds for a in alert_rules(cfg)}


@pytest.mark.parametrize(
    ("scrape", "evaluation", "budget", "memory_for"),
    [(5, 5, 30, 10), (2, 2, 30, 18), (7, 7, 30, 7), (3, 5, 30, 15), (15, 15, 60, 15), (5, 5, 120, 60)],
)
def test_gpu_memory_exhausted_for_is_derived_from_the_critical_intervals(scrape, evaluation, budget, memory_for):
    cfg = variant_cfg(scrape, evaluation, budget)
    assert _for(cfg)["GPUMemoryExhausted"] == memory_for
    assert _for(cfg)["TrainingNaNDetected"] == 0
    assert _for(cfg)["GPUErrorsDetected"] == 0


def test_the_spike_guard_spans_a_scrape_interval():
    """A `for` shorter than one scrape interval could fire on one sample: never chosen."""
    for scrape, evaluation, budget in INTERVALS:
        cfg = variant_cfg(scrape, evaluation, budget)
        assert _for(cfg)["GPUMemoryExhausted"] >= scrape


@pytest.mark.parametrize(("scrape", "evaluation", "budget"), INTERVALS)
def test_worst_case_failure_to_page_fits_the_budget(scrape, evaluation, budget):
    cfg = variant_cfg(scrape, evaluation, budget)
    window = detection_budget(cfg)
    for alert in alert_rules(cfg):
        if alert.name in CRITICAL_DETECTION_ALERTS:
            assert window.worst_event_to_page_seconds(alert.for_seconds) <= budget


def test_the_stack_intervals_only_bind_the_groups_without_critical_alerts():
    """The groups holding a critical alert run at the critical interval; the others at the stack's."""
    cfg = ObservabilityConfig(evaluation_interval_seconds=15, critical_evaluation_interval_seconds=5)
    intervals = {g["name"]: g["interval"] for g in rule_groups(cfg)}
    critical = critical_group_names(cfg)
    assert set(critical) == {a.group for a in alert_rules(cfg) if a.name in CRITICAL_DETECTION_ALERTS}
    assert {intervals[name] for name in critical} == {"5s"}
    assert {i for name, i in intervals.items() if name not in critical} == {"15s"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"critical_scrape_interval_seconds": 15, "critical_evaluation_interval_seconds": 15},
            r"cannot page within critical_detection_seconds=30.*critical_scrape_interval_seconds=15.*at most 7s each",
        ),
        (
            {"critical_evaluation_interval_seconds": 10, "critical_detection_seconds": 20},
            r"critical_detection_seconds=20",
        ),
        ({"scrape_interval_seconds": 0}, r"scrape_interval_seconds must be positive"),
        ({"critical_scrape_interval_seconds": 0}, r"critical_scrape_interval_seconds must be positive"),
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


def test_the_stack_intervals_may_be_slower_than_the_budget():
    """Only the critical sources and groups are bound by the promise. (30 s: at 60 s the default
    hang threshold would be shorter than the two rate windows the hang alert needs, and refused.)"""
    cfg = ObservabilityConfig(scrape_interval_seconds=30, evaluation_interval_seconds=30)
    assert _for(cfg)["GPUMemoryExhausted"] == 10


def test_event_window_spans_several_scrapes():
    assert event_window_seconds(ObservabilityConfig()) == 600
    assert event_window_seconds(ObservabilityConfig(scrape_interval_seconds=300)) == 1200


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


@pytest.mark.slow
def test_the_promise_holds_in_simulated_time(detection_run):
    """promtool fired every critical alert exactly when predicted, and the page left within the
    budget of the failure, placed at its worst moment."""
    assert detection_run.detections, "no detection cases were generated"
    covered = {(d.scrape, d.evaluation, d.budget) for d in detection_run.detections}
    assert covered == set(INTERVALS)
    assert {d.alert for d in detection_run.detections} == set(CRITICAL_DETECTION_ALERTS)
    for d in detection_run.detections:
        bound = detection_budget(variant_cfg(d.scrape, d.evaluation, d.budget))
        for_seconds = {a.name: a.for_seconds for a in alert_rules(variant_cfg(d.scrape, d.evaluation, d.budget))}
        assert 0 <= d.page_latency <= bound.worst_event_to_page_seconds(for_seconds[d.alert]) <= d.budget, d
    failed = {n for n in detection_run.result.failed_groups() if "scrape " in n}
    assert not failed, detection_run.result.output[-20000:]
    assert detection_run.result.returncode == 0, detection_run.result.output[-20000:]
    # the worst case (a sample just after an evaluation) is among the cases
    assert any(d.first_bad % d.evaluation == 1 for d in detection_run.detections)
    # every suite proves a single spike does not page
    spikes = [c for suite in detection_run.suites for c in suite.cases if "single-sample spike" in c.name]
    assert len(spikes) == len(INTERVALS)
