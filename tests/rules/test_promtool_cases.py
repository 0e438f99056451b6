"""Every alert proven with `promtool test rules`: fires when it should, silent when it should not."""

from __future__ import annotations

import re
from typing import Any

import pytest

from observability.config import ObservabilityConfig
from observability.rules import ALERT_NAMES, RECORDING_RULES, distributed, goodput
from tests.rules.alert_cases import CASES, RECORD_CASES
from tests.rules.health_cases import KSM_CASES
from tests.rules.promtool_harness import Suite, run_promtool_tests

pytestmark = pytest.mark.slow


def test_promtool_passes_every_case(promtool_run):
    assert promtool_run.result.returncode == 0, promtool_run.result.output[-20000:]


# Always firing by design: its silence is what the external dead man's switch detects.
ALWAYS_FIRING = {"Watchdog"}


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_alert_has_firing_and_silent_cases_that_pass(alert, promtool_run):
    cases = [c for c in (*CASES, *KSM_CASES) if c.alert == alert]
    assert any(c.fires for c in cases), f"{alert} has no case where it fires"
    assert alert in ALWAYS_FIRING or any(c.stays_silent for c in cases), f"{alert} has no case where it stays silent"
    failed = {name for name in promtool_run.result.failed_groups() if name.startswith(f"{alert}: ")}
    assert not failed, promtool_run.result.output[-20000:]


def test_cases_name_only_existing_alerts():
    unknown = {c.alert for c in (*CASES, *KSM_CASES)} - set(ALERT_NAMES)
    assert not unknown, f"cases for alerts that do not exist (they would pass vacuously): {unknown}"


def test_every_recording_rule_has_a_case():
    missing = {r.record for r in RECORDING_RULES} - {r for c in RECORD_CASES for r in c.records}
    assert not missing


def _alert(groups: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for g in groups for r in g["rules"] if r.get("alert") == name)


def _case(alert: str, part: str) -> str:
    """The promtool group name of the one case of `alert` whose name contains `part`."""
    (name,) = [c.name for c in CASES if c.alert == alert and part in c.name]
    return f"{alert}: {name}"


def _threshold_inclusive(groups: list[dict[str, Any]]) -> None:
    rule = _alert(groups, "GPUUtilizationLow")
    low = ObservabilityConfig().thresholds.gpu_utilization_low_percent.promql
    assert f"< {low}" in rule["expr"]
    rule["expr"] = rule["expr"].replace(f"< {low}", f"<= {low}")


def _naive_nan_expression(groups: list[dict[str, Any]]) -> None:
    # the obvious expression, aggregated like ours: a counter compared with `> 0`
    rule = _alert(groups, "TrainingNaNDetected")
    rule["expr"] = "sum by (namespace, model_type, job_id, tensor_type) (ml_training_nan_count) > 0"


def _one_minute_memory_for(groups: list[dict[str, Any]]) -> None:
    _alert(groups, "GPUMemoryExhausted")["for"] = "1m"


def _description_drops_gpu(groups: list[dict[str, Any]]) -> None:
    rule = _alert(groups, "GPUTemperatureHigh")
    rule["annotations"]["description"] = rule["annotations"]["description"].replace("GPU {{ $labels.gpu_id }} ", "")


def _health_for_shortened(groups: list[dict[str, Any]]) -> None:
    _alert(groups, "GPUPollerDown")["for"] = "4m"


MUTATIONS = {
    "threshold made inclusive": (
        _threshold_inclusive,
        "GPUUtilizationLow",
        {_case("GPUUtilizationLow", "exactly")},
    ),
    "NaN counter compared with > 0": (
        _naive_nan_expression,
        "TrainingNaNDetected",
        {"TrainingNaNDetected: resolves 10m after the last NaN instead of firing forever"},
    ),
    "1m for on GPU memory": (
        _one_minute_memory_for,
        "GPUMemoryExhausted",
        {_case("GPUMemoryExhausted", "on two consecutive scrapes fires")},
    ),
    "poller-down after 4m instead of 5m": (
        _health_for_shortened,
        "GPUPollerDown",
        {"GPUPollerDown: a poller target failing its scrapes for 5m fires, on the node its own series named"},
    ),
    "description without the GPU": (
        _description_drops_gpu,
        "GPUTemperatureHigh",
        {_case("GPUTemperatureHigh", "for 2m fires")},
    ),
}


def test_the_cases_catch_broken_rules(tmp_path):
    """Each mutation of the rules makes the named case fail (the cases can fail)."""
    files = {}
    for i, (label, (mutate, alert, _)) in enumerate(MUTATIONS.items()):
        suite = Suite(f"mutation-{i}", ObservabilityConfig(), [c for c in CASES if c.alert == alert], mutate=mutate)
        files[label] = suite.write(tmp_path)
    for label, path in files.items():
        result = run_promtool_tests([path], cwd=tmp_path)
        expected = MUTATIONS[label][2]
        assert result.returncode != 0, f"{label}: promtool passed the mutated rules"
        assert expected <= result.failed_groups(), f"{label}: {result.failed_groups()}"


def _verdict_ignores_the_recorded_communication_share(groups: list[dict[str, Any]]) -> None:
    # the verdict judged on the collective phase's share of all the time, as without the distributed group
    (rule,) = [r for g in groups for r in g["rules"] if r.get("record") == goodput.CAUSES]
    assert distributed.JOB_COMMUNICATION_SHARE in rule["expr"]
    rule["expr"] = rule["expr"].replace(distributed.JOB_COMMUNICATION_SHARE, "absent_communication_share")


def test_the_verdict_cases_catch_a_verdict_that_ignores_the_recorded_communication_share(tmp_path):
    """The communication-bound verdict reads the share of the step the distributed group records
    (collectives over the step's phases), not the collective phase's share of all the time: the
    edge case with time between steps fails when the verdict reads the phase instead."""
    cases = [r for r in RECORD_CASES if r.record == goodput.VERDICT and "communication" in r.name]
    suite = Suite("mutation-communication", ObservabilityConfig(), [], cases)
    intact = run_promtool_tests([suite.write(tmp_path)], cwd=tmp_path)
    assert intact.returncode == 0, intact.output[-5000:]
    suite.name, suite.mutate = "mutation-communication-broken", _verdict_ignores_the_recorded_communication_share
    broken = run_promtool_tests([suite.write(tmp_path)], cwd=tmp_path)
    # promtool names no group for a failed expression test: its expressions are the new case's (the
    # only one that checks the causes' record; the phase's share of the time case passes either way)
    failed = re.findall(r'expr: "(.*?)", time:', broken.output)
    assert broken.returncode != 0 and any(goodput.CAUSES in f for f in failed), broken.output[-5000:]
