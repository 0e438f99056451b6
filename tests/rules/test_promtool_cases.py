"""Every alert proven with `promtool test rules`: fires when it should, silent when it should not."""

from __future__ import annotations

from typing import Any

import pytest

from observability.config import ObservabilityConfig
from observability.rules import ALERT_NAMES, RECORDING_RULES
from tests.rules.alert_cases import CASES, RECORD_CASES
from tests.rules.health_cases import KSM_CASES
from tests.rules.promtool_harness import Suite, run_promtool_tests


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
