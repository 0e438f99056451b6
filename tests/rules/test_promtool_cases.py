"""Every alert proven with `promtool test rules`: fires when it should, silent when it should not."""

from __future__ import annotations

import pytest

from observability.rules import ALERT_NAMES, RECORDING_RULES
from tests.rules.alert_cases import CASES, RECORD_CASES


def test_promtool_passes_every_case(promtool_run):
    assert promtool_run.result.returncode == 0, promtool_run.result.output[-20000:]


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_alert_has_firing_and_silent_cases_that_pass(alert, promtool_run):
    cases = [c for c in CASES if c.alert == alert]
    assert any(c.fires for c in cases), f"{alert} has no case where it fires"
    assert any(c.stays_silent for c in cases), f"{alert} has no case where it stays silent"
    failed = {name for name in promtool_run.result.failed_groups() if name.startswith(f"{alert}: ")}
    assert not failed, promtool_run.result.output[-20000:]


def test_cases_name_only_existing_alerts():
    unknown = {c.alert for c in CASES} - set(ALERT_NAMES)
    assert not unknown, f"cases for alerts that do not exist (they would pass vacuously): {unknown}"


def test_every_recording_rule_has_a_case():
    missing = {r.record for r in RECORDING_RULES} - {c.record for c in RECORD_CASES}
    assert not missing
