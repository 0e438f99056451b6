"""Fixtures of the rules tests: the promtool runs over the generated test files (session-wide)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def _run(directory: Path, suites: tuple[Suite, ...], detections: tuple[Detection, ...] = ()) -> PromtoolRun:
    files = [path for suite in suites for path in suite.write_parts(directory)]
    return PromtoolRun(suites, detections, run_promtool_tests(files, cwd=directory))


# Two runs, each read by one module (test_promtool_cases, test_detection), so that neither waits on
# the other's suites wherever xdist schedules the two modules.
@pytest.fixture(scope="session")
def promtool_run(tmp_path_factory: pytest.TempPathFactory) -> PromtoolRun:
    """Every alert and record case of the default and kube-state-metrics configurations."""
    default, goodput = split_suites("alerts-default", ObservabilityConfig(), CASES, RECORD_CASES)
    ksm = Suite("alerts-kube-state-metrics", ObservabilityConfig(kube_state_metrics=True), list(KSM_CASES))
    return _run(tmp_path_factory.mktemp("promtool"), (default, goodput, ksm))


@pytest.fixture(scope="session")
def detection_run(tmp_path_factory: pytest.TempPathFactory) -> PromtoolRun:
    """The detection-budget suites: every critical alert at each interval variant's worst moment."""
    detection = detection_suites()
    suites = tuple(suite for suite, _ in detection)
    return _run(tmp_path_factory.mktemp("detection"), suites, tuple(d for _, found in detection for d in found))
