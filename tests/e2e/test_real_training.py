"""Real PyTorch training runs (`tests/e2e/pytorch_job.py`, instrumented as the README says, no NaN
check, no try/except) scraped by one Prometheus 2.42 loading the rendered rules, every second:

- a learning rate blown up at epoch 2: TrainingNaNDetected fires within the 30-second promise and
  no checkpoint after the NaN counts as good;
- a crash (a wrong input shape at epoch 2): the failure is counted by type, the job is failed,
  TrainingJobFailed fires;
- checkpoints to a read-only directory: CheckpointSaveFailures fires (io_error);
- a healthy classification run whose epochs last more than 10 s: no training alert at all;
- a job with remediation on (`tests/trainer/remediation_trainer.py`) whose loss goes non-finite
  twice: its first pod rolls back twice and fails (a retriable exit), the pod that replaces it
  resumes from the latest good checkpoint: TrainingJobKeepsRecovering fires on the third recovery;
- every training-cockpit panel has data from these runs (the rollback panels from the recovering
  job), except the GPU panels (`NEEDS_A_GPU`) and the rows of reinforcement learning and
  hyperparameter search (their own real runs feed them).

All runs start together with the module's Prometheus, so the module costs about one long run.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from dashboards import build_all
from dashboards.queries import PanelQuery, panel_queries
from dashboards.training_cockpit import UID as COCKPIT
from foxhunt_trainer import remediation
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.finite import nonfinite_entries
from harness.ports import free_port
from harness.prometheus import PrometheusServer
from observability.config import ObservabilityConfig
from observability.rules import efficiency, rules_file_yaml

from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
REPO = Path(__file__).resolve().parents[2]
NAN_PROMISE_SECONDS = 30
LONG_EPOCH_SECONDS = 10.5
TRAINING_ALERTS = ("TrainingNaNDetected", "TrainingSlowdown", "TrainingJobFailed", "CheckpointSaveFailures")
# Training-cockpit panels no CPU run can feed: they read the GPU poller's series (per GPU, or per
# job through the GPU a job holds), which only a node with NVIDIA GPUs produces.
EFFICIENCY_ALERTS = "|".join(a.name for a in efficiency.efficiency_alerts(ObservabilityConfig()))
NEEDS_A_GPU = {
    "GPU Resources": "the GPU poller's per-GPU series (NVML)",
    "This Job's GPUs": "ml_training_job_gpu_info joined with the poller's series of the GPUs the job holds",
}
# Panels of the other rows that need a GPU's own evidence (the poller's NVML and GPM series).
NEEDS_A_GPU_PANELS = {
    ("Is the GPU Maxed Out?", "MFU"): "the peak FLOPs of the GPU model the job holds",
    ("Is the GPU Maxed Out?", "MFU and Goodput"): "the peak FLOPs of the GPU model the job holds",
    ("Is the GPU Maxed Out?", "GPU Busy"): "the GPM or NVML activity of the GPUs the job holds",
}
# The job that keeps recovering: remediation on, its loss non-finite at the first two learning
# rates (0.3, then 0.15: two rollbacks), its first pod failing with a retriable exit at step 100.
RECOVERING = "recovering"
RECOVERING_FIRST_POD_EXIT = 3
REMEDIATION_ENV = {
    remediation.ENABLED_ENV: "on",
    remediation.MAX_ROLLBACKS_ENV: "3",
    remediation.LR_FACTOR_ENV: "0.5",
    "OTEL_TRACES_EXPORTER": "none",
}
# Rows of other kinds of jobs, fed by their own real runs (tests/integrations/test_frameworks_live.py:
# Stable-Baselines3 DQN and PPO on CartPole, an Optuna study of PyTorch trials;
# tests/e2e/test_distributed_training.py: a 4-rank DDP job started by torchrun).
FED_BY_OTHER_RUNS = {"Reinforcement Learning (DQN, PPO)", "Hyperparameter Search", "Distributed Ranks"}


def _without_dac_override() -> None:
    """Root writes through a directory's mode bits: drop the capabilities that let it."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@dataclass
class Run:
    job_id: str
    port: int
    checkpoints: Path
    process: subprocess.Popen[str]

    printed: list[dict[str, Any]] | None = None

    def epochs(self) -> list[dict[str, Any]]:
        """The JSON lines the script printed (one per epoch), once it has exited."""
        if self.printed is None:
            out, _ = self.process.communicate(timeout=120)
            self.printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return self.printed


@dataclass
class Recovering:
    """The job that keeps recovering: its first pod, and the pod that replaces it once the first has
    failed (started by `restart`, a thread, the way the Job controller starts a new pod)."""

    first: Run
    restart: threading.Thread
    replaced_by: list[Run]

    def pods(self) -> tuple[Run, Run]:
        self.restart.join(timeout=300)
        (second,) = self.replaced_by
        return self.first, second


@dataclass
class Stack:
    prometheus: PrometheusServer
    runs: dict[str, Run]
    recovering: Recovering

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.prometheus.api.query(expr)

    def wait_alert(self, name: str, timeout: float = 90, **labels: str) -> dict[str, Any]:
        def firing() -> dict[str, Any] | None:
            for alert in self.prometheus.api.get("/api/v1/alerts")["alerts"]:
                found = alert["labels"]
                wanted = all(found.get(k) == v for k, v in labels.items())
                if found["alertname"] == name and alert["state"] == "firing" and wanted:
                    return alert  # type: ignore[no-any-return]
            return None

        return wait_until(f"{name}{labels} firing", firing, timeout=timeout)  # type: ignore[no-any-return]


def start_run(work: Path, job_id: str, *args: str, read_only: bool = False) -> Run:
    checkpoints = work / f"{job_id}-checkpoints"
    checkpoints.mkdir()
    if read_only:
        checkpoints.chmod(0o555)
    port = free_port()
    command = [sys.executable, "-m", "tests.e2e.pytorch_job", "--port", str(port), "--job-id", job_id]
    process = subprocess.Popen(
        [*command, "--checkpoint-dir", str(checkpoints), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_"))},
        preexec_fn=_without_dac_override if read_only else None,
    )
    return Run(job_id, port, checkpoints, process)


def start_recovering_pod(checkpoints: Path, port: int, *args: str) -> Run:
    """A pod of the recovering job: the remediation trainer, its policy from the environment the
    job template sets, its checkpoints in the job's directory (the one a replacement resumes from)."""
    command = [sys.executable, "-m", "tests.trainer.remediation_trainer", "--dir", str(checkpoints)]
    process = subprocess.Popen(
        [*command, "--job-id", RECOVERING, "--port", str(port), "--lr", "0.3", "--step-seconds", "0.05", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_"))}, **REMEDIATION_ENV},
    )
    return Run(RECOVERING, port, checkpoints, process)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("real-training")
    runs: dict[str, Run] = {}
    pods: list[Run] = []  # the recovering job's, each as it starts
    prometheus: PrometheusServer | None = None
    try:
        for run in (
            start_run(work, "nan", "--blow-up-at-epoch", "2"),
            start_run(work, "crash", "--crash-at-epoch", "2"),
            start_run(work, "read-only", read_only=True),
            start_run(
                work,
                "long-epochs",
                "--task",
                "classification",
                "--folds",
                "1",
                "--epochs",
                "2",
                "--epoch-seconds",
                str(LONG_EPOCH_SECONDS),
            ),
        ):
            runs[run.job_id] = run
        targets = [pod_target(r.port, "training", f"train-{r.job_id}", CFG.training_job_service) for r in runs.values()]
        (work / RECOVERING).mkdir()
        first = start_recovering_pod(work / RECOVERING, free_port(), "--exit-at-step", "100")
        pods.append(first)
        second_port = free_port()
        replaced_by: list[Run] = []

        def replace_the_failed_pod() -> None:
            first.process.wait()
            replaced_by.append(start_recovering_pod(work / RECOVERING, second_port))
            pods.append(replaced_by[0])

        restart = threading.Thread(target=replace_the_failed_pod, daemon=True)
        restart.start()
        recovering = Recovering(first, restart, replaced_by)
        for pod, port in ((f"train-{RECOVERING}-0", first.port), (f"train-{RECOVERING}-1", second_port)):
            targets.append(pod_target(port, "training", pod, CFG.training_job_service))
        prometheus = annotated_pods_prometheus(work, targets, rules_file_yaml(CFG))
        prometheus.start()
        yield Stack(prometheus, runs, recovering)
    finally:
        for run in [*runs.values(), *pods]:
            if run.process.poll() is None:
                run.process.kill()
            run.checkpoints.chmod(0o755)
        if prometheus is not None:
            prometheus.stop()


def test_a_blown_up_learning_rate_fires_nan_detected_in_time_and_no_later_checkpoint_is_good(stack):
    run = stack.runs["nan"]
    alert = stack.wait_alert("TrainingNaNDetected", job_id="nan", tensor_type="loss")
    epochs = run.epochs()
    assert run.process.returncode == 0  # it trained to the end: nothing in the script looked at the loss
    first_nan = next(e for e in epochs if not math.isfinite(e["loss"]))
    fired = _unix(alert["activeAt"])
    assert fired - first_nan["time"] <= NAN_PROMISE_SECONDS, (first_nan, alert)
    # Every checkpoint file on disk, judged by its weights: only the finite ones counted as good.
    saved = {int(p.stem.rsplit("step", 1)[1]): p for p in run.checkpoints.glob("*.pt")}
    finite = sorted(s for s, p in saved.items() if not nonfinite_entries(torch.load(p)["model"]))
    assert len(finite) < len(saved)  # the NaN reached the weights of the later ones
    # The process has exited (its series are stale): read the last values it reported.
    good = stack.query(f'last_over_time({catalog.CHECKPOINT_SAVES_TOTAL.name}{{job_id="nan"}}[10m])')
    assert float(good[0]["value"][1]) == len(finite)
    last_good = stack.query(f'last_over_time({catalog.CHECKPOINT_LAST_GOOD_STEP.name}{{job_id="nan"}}[10m])')
    assert float(last_good[0]["value"][1]) == finite[-1]


def test_a_crash_counts_the_failure_by_type_fails_the_job_and_fires_training_job_failed(stack):
    run = stack.runs["crash"]
    alert = stack.wait_alert("TrainingJobFailed", job_id="crash")
    assert alert["labels"]["error_type"] == "exception"  # a shape mismatch: a bug, not oom or config
    assert alert["labels"]["severity"] == "high"
    run.epochs()
    assert run.process.returncode == 1  # the exception still ended the script
    failed = stack.query(
        f'max_over_time({catalog.TRAINING_JOBS_BY_STATUS.name}{{pod="train-crash", status="failed"}}[5m])'
    )
    assert failed[0]["value"][1] == "1"  # flushed on exit: the last scrape saw the failed job


def test_checkpoints_to_a_read_only_directory_fire_checkpoint_save_failures(stack):
    alert = stack.wait_alert("CheckpointSaveFailures", job_id="read-only")
    assert alert["labels"]["error_type"] == "io_error"  # torch.save's RuntimeError, classified
    assert list(stack.runs["read-only"].checkpoints.iterdir()) == []


def test_a_healthy_run_with_long_epochs_raises_no_training_alert(stack):
    run = stack.runs["long-epochs"]
    epochs = run.epochs()
    assert run.process.returncode == 0
    durations = [b["time"] - a["time"] for a, b in itertools.pairwise(epochs)]
    assert durations and min(durations) > 10
    time.sleep(3)  # a few more evaluations after the last epoch
    # Never even pending. The run's long epochs come from a slow loader, so the efficiency verdict is
    # right to call it input-bound (its info alert, group ml_training_efficiency, goes pending): that
    # alert says what to change, it is not a training failure or slowdown.
    job = f'job_id="long-epochs", alertname!~"{EFFICIENCY_ALERTS}"'
    assert stack.query(f"count_over_time(ALERTS{{{job}}}[10m])") == []
    speed = stack.query(f"last_over_time({catalog.TRAINING_EPOCHS_PER_SECOND.name}{{{job}}}[10m])")
    assert float(speed[0]["value"][1]) < 0.1  # what the fixed threshold used to call a slowdown


def test_a_job_that_keeps_rolling_back_and_restarting_fires_training_job_keeps_recovering(stack):
    alert = stack.wait_alert("TrainingJobKeepsRecovering", timeout=240, job_id=RECOVERING)
    first, second = stack.recovering.pods()
    (failed,) = first.epochs()
    assert first.process.returncode == RECOVERING_FIRST_POD_EXIT  # retriable: the Job starts a new pod
    assert failed["rollbacks"] == 2  # non-finite at 0.3 and at 0.15, finite from 0.075 on
    summary = second.epochs()[-1]
    assert second.process.returncode == 0
    assert summary["resumed_from"] == failed["exited_at"] and summary["final_loss_finite"]
    recoveries = failed["rollbacks"] + 1  # the replacement's resume is the third
    assert recoveries >= CFG.thresholds.training_recoveries_count.value
    assert float(alert["value"]) == recoveries
    assert alert["labels"]["severity"] == "high" and alert["labels"]["namespace"] == "training"
    # It fired on the replacement's resume: not before that pod's first scrape.
    resumed = stack.query(f'{catalog.TRAINING_RESUMED.name}{{job_id="{RECOVERING}"}}[10m]')
    (series,) = [s for s in resumed if s["metric"]["pod"] == f"train-{RECOVERING}-1"]
    assert _unix(alert["activeAt"]) >= float(series["values"][0][0]) - 1
    lost = stack.query(
        f'max_over_time({catalog.TRAINING_PHASE_SECONDS_TOTAL.name}{{job_id="{RECOVERING}", phase="lost_work"}}[10m])'
    )
    assert lost and max(float(s["value"][1]) for s in lost) > 0  # the redone steps after each rollback


def _unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _has_data(result: list[dict[str, Any]]) -> bool:
    """A result with at least one number that is not NaN (a NaN-only series is no data)."""
    for series in result:
        points = series.get("values") or [series["value"]]
        if any(not math.isnan(float(v)) for _, v in points):
            return True
    return False


def cockpit_queries() -> list[tuple[str, PanelQuery]]:
    """(row title, query) of every Prometheus query of the training cockpit."""
    dashboard = build_all(CFG)[COCKPIT]
    row_of: dict[int, str] = {}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        else:
            row_of[panel["id"]] = row
    return [(row_of[q.panel_id], q) for q in panel_queries(dashboard) if q.datasource_type == "prometheus"]


def test_every_training_cockpit_panel_is_fed_by_these_runs_or_needs_a_gpu(stack):
    for run in [*stack.runs.values(), *stack.recovering.pods()]:
        run.epochs()  # every run has finished (and been scraped a last time)
    api = stack.prometheus.api
    queries = cockpit_queries()
    assert {row for row, _ in queries} >= set(NEEDS_A_GPU) | FED_BY_OTHER_RUNS
    assert {(row, q.panel_title) for row, q in queries} >= set(NEEDS_A_GPU_PANELS)
    missing = []
    for row, query in queries:
        if row in NEEDS_A_GPU or row in FED_BY_OTHER_RUNS or (row, query.panel_title) in NEEDS_A_GPU_PANELS:
            continue
        now = time.time()
        # At the scrape interval: a series the last scrape before a run's exit saw (its last fold)
        # lives one second before its stale marker.
        if not _has_data(api.query_range(query.substituted, now - 300, now, "1s")):
            missing.append(f"{row} / {query.panel_title} {query.ref_id}: {query.substituted}")
    assert not missing, "panels without data:\n" + "\n".join(missing)
