"""Remediation of non-finite training on a real PyTorch 2.13 CPU run, each run its own process as
the training job template starts one (the policy from the template's environment):

- with remediation on, the diverging run rolls back to its last good checkpoint, continues at the
  lowered learning rate and ends with a finite loss; the rollback is counted and exported, the
  compute redone after it is lost work, and the log line carries the rollback span's trace id;
- with a budget of 0 it exits with the documented code (and with remediation off with its own);
- a process started the way a restarted pod is (same checkpoint directory) resumes at the step of
  the latest good checkpoint, with its optimizer and scheduler state.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foxhunt_trainer import remediation
from infra import REPO_ROOT

pytestmark = pytest.mark.slow


def _run(directory: Path, *args: str, **env: str) -> tuple[int, str, dict[str, Any] | None]:
    environ = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "PYTHONPATH": str(REPO_ROOT), **env}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.trainer.remediation_trainer", "--dir", str(directory), *args],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=environ, check=False,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, proc.stdout + proc.stderr, json.loads(lines[-1]) if lines else None


ON = {remediation.ENABLED_ENV: "on", remediation.MAX_ROLLBACKS_ENV: "3", remediation.LR_FACTOR_ENV: "0.25"}


def test_a_diverging_run_rolls_back_continues_at_a_lower_rate_and_ends_finite(tmp_path):
    code, output, summary = _run(tmp_path, "--lr", "0.3", **ON)
    assert code == 0, output
    assert summary is not None
    assert 1 <= summary["rollbacks"] <= 3
    assert summary["lr"] == pytest.approx(0.3 * 0.25 ** summary["rollbacks"])
    assert summary["final_loss_finite"] and summary["final_loss"] < 1e-3
    assert summary["weight"] == pytest.approx(3.0, abs=1e-3)
    assert summary["lost_work_seconds"] > 0
    exposition = summary["exposition"]
    assert re.search(
        r'ml_training_rollbacks_total\{job_id="remediation-e2e",model_type="dqn"\} ' + str(summary["rollbacks"]),
        exposition,
    )
    assert re.search(
        r'ml_training_rollback_budget\{job_id="remediation-e2e",model_type="dqn"\} ' + str(3 - summary["rollbacks"]),
        exposition,
    )
    assert re.search(r'ml_training_phase_seconds_total\{[^}]*phase="lost_work"[^}]*\} [1-9eE0-9.+-]*[1-9]', exposition)
    (line,) = [line for line in output.splitlines() if "rolled back to the checkpoint" in line][:1]
    assert re.search(r"trace_id=[0-9a-f]{32} span_id=[0-9a-f]{16}", line), line
    assert "checkpoint_step=" in line and "rollback=1" in line


def test_with_a_budget_of_zero_the_run_exits_with_the_documented_code(tmp_path):
    code, output, _ = _run(tmp_path, "--lr", "0.3", **{**ON, remediation.MAX_ROLLBACKS_ENV: "0"})
    assert code == remediation.EXIT_ROLLBACK_BUDGET_SPENT == 80, output
    assert "non-finite training not remediated" in output and "exit_code=80" in output


def test_with_remediation_off_the_run_exits_with_its_code(tmp_path):
    code, output, _ = _run(tmp_path, "--lr", "0.3", **{remediation.ENABLED_ENV: "off"})
    assert code == remediation.EXIT_REMEDIATION_OFF, output


def test_a_restarted_pod_resumes_at_the_latest_good_checkpoint(tmp_path):
    code, output, _ = _run(tmp_path, "--lr", "0.05", "--exit-at-step", "37", "--steps", "60", **ON)
    assert code == 3, output  # a retriable failure: the Job's backoffLimit counts it
    assert json.loads((tmp_path / "latest-good.json").read_text())["step"] == 30
    code, output, summary = _run(tmp_path, "--lr", "0.05", "--steps", "60", **ON)
    assert code == 0, output
    assert summary is not None
    assert summary["resumed_from"] == 30
    assert summary["resumed_momentum"] is True  # the optimizer state came back with the weights
    assert summary["scheduler_last_epoch"] == 60  # 30 from the checkpoint plus the 30 steps done since
    assert summary["steps_done"] == 60 and summary["final_loss_finite"]
