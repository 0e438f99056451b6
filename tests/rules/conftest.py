"""Fixtures of the rules tests: one promtool run over every generated test file (session-wide)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from observability.config import ObservabilityConfig
from tests.rules.alert_cases import CASES, RECORD_CASES
from tests.rules.detection_cases import Detection, detection_suites
from tests.rules.health_cases import KSM_CASES
from tests.rules.promtool_harness import PromtoolResult, Suite, run_promtool_tests, split_suites


@dataclass(frozen=True)
class PromtoolRun:
    suites: tuple[Suite, ...]
    detections: tuple[Detection, ...]
    result: PromtoolResult


@pytest.fixture(scope="session")
def promtool_run(tmp_path_factory: pytest.TempPathFactory) -> PromtoolRun:
    directory = tmp_path_factory.mktemp("promtool")
    default, goodput = split_suites("alerts-default", ObservabilityConfig(), CASES, RECORD_CASES)
    ksm = Suite("alerts-kube-state-metrics", ObservabilityConfig(kube_state_metrics=True), list(KSM_CASES))
    detection = detection_suites()
    suites = (default, goodput, ksm, *(suite for suite, _ in detection))
    files = [suite.write(directory) for suite in suites]
    result = run_promtool_tests(files, cwd=directory)
    return PromtoolRun(suites, tuple(d for _, found in detection for d in found), result)
