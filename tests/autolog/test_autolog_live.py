"""Unmodified training programs (`tests/autolog/programs/`, written the way the frameworks' own
tutorials write them) started with `foxhunt-run` (torchrun with `foxhunt-torchrun`), scraped by
one real Prometheus evaluating the rendered rules, every program at once:

- a plain PyTorch loop (DataLoader, Adam, StepLR, torch.save each epoch) against the same loop
  instrumented by hand (`plain_loop_by_hand.py`, itself run under `foxhunt-run`: the auto layer
  steps aside and each step counts once): steps, samples and checkpoints equal, hyperparameters
  equal, learning rate equal, the last step loss within 10 %, both phase splits fed;
- the same loop with a blown-up learning rate fires TrainingNaNDetected with no guard in it;
- Stable-Baselines3 PPO and DQN, each script's whole training one `model.learn(...)` call:
  samples equal SB3's `num_timesteps`, steps its optimizer steps, the PPO and DQN series present;
- a Lightning fit: steps equal the trainer's `global_step`, samples the batches', checkpoints,
  model FLOPs its step's as PyTorch's FLOP counter counts the same step by hand;
- an Optuna study of PyTorch trials: trial counts and best value equal the study's, every trial's
  steps counted;
- a 2-rank DDP script under `foxhunt-torchrun` (gloo): each rank's steps and samples, its rank
  info, its all-reduce counted; the same script with one rank slowed: TrainingRankStraggler names it;
- the training cockpit's rows return data for each job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from foxhunt_trainer.contract import catalog
from harness.ports import free_port_range
from harness.prometheus import PrometheusServer
from observability.config import ObservabilityConfig
from observability.rules import rules_file_yaml
from tests.e2e.test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until
from tests.e2e.test_real_training import _has_data, cockpit_queries

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "autolog" / "programs"
BIN = Path(sys.executable).parent
RUN = [sys.executable, "-m", "foxhunt_trainer.autolog", sys.executable]
TORCHRUN = [sys.executable, "-m", "foxhunt_trainer.launcher", "--standalone", "--nnodes=1", "--nproc-per-node=2"]


@dataclass
class Program:
    name: str
    out: Path
    ports: list[int]
    process: subprocess.Popen[str]

    def result(self, name: str = "result.json") -> dict[str, Any]:
        return json.loads((self.out / name).read_text())  # type: ignore[no-any-return]

    def finished(self) -> str:
        out, _ = self.process.communicate(timeout=240)
        assert self.process.returncode == 0, out
        return out


def start(work: Path, name: str, command: list[str], ranks: int = 1, **env: str) -> Program:
    out = work / name
    out.mkdir()
    base = free_port_range(ranks)
    ports = list(range(base, base + ranks))
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHONPATH"))},
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "OTEL_TRACES_EXPORTER": "none",
        "FOXHUNT_JOB_ID": name,
        "FOXHUNT_MODEL_TYPE": env.pop("model_type", "mlp"),
        "FOXHUNT_METRICS_BASE_PORT": str(ports[0]),
        "FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS": "5",
        "FOXHUNT_PROGRESS_SECONDS": "off",
        **env,
    }
    if name in ("ppo", "dqn"):
        del environ["FOXHUNT_MODEL_TYPE"]  # the algorithm names the model type
    process = subprocess.Popen(
        [part.replace("OUT", str(out)) for part in command],
        cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return Program(name, out, ports, process)


@dataclass
class Live:
    prometheus: PrometheusServer
    programs: dict[str, Program]

    def value(self, metric: catalog.Metric | str, **labels: str) -> float:
        (series,) = self.series(metric, **labels)
        return float(series["value"][1])

    def series(self, metric: catalog.Metric | str, **labels: str) -> list[dict[str, Any]]:
        """The series stored in the last 5 minutes (the programs have exited: their last values)."""
        name = metric if isinstance(metric, str) else metric.name
        matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return self.prometheus.api.query(f"last_over_time({name}{{{matchers}}}[5m])")

    def wait_alert(self, name: str, **labels: str) -> dict[str, Any]:
        def firing() -> dict[str, Any] | None:
            for alert in self.prometheus.api.get("/api/v1/alerts")["alerts"]:
                found = alert["labels"]
                wanted = all(found.get(k) == v for k, v in labels.items())
                if found["alertname"] == name and alert["state"] == "firing" and wanted:
                    return alert  # type: ignore[no-any-return]
            return None

        return wait_until(f"{name}{labels} firing", firing, timeout=120)  # type: ignore[no-any-return]


# Rank 1 sleeps 60 ms more than rank 0 every step, for about 200 steps (20 s).
SLOW_RANK = ["--epochs", "10", "--step-seconds", "0.02", "--slow-rank", "1", "--slow-seconds", "0.06"]
PLAIN = [*RUN, str(PROGRAMS / "plain_loop.py"), "OUT", "--epochs", "3", "--step-seconds", "0.02"]
BY_HAND = [*RUN, str(PROGRAMS / "plain_loop_by_hand.py"), "OUT", "--epochs", "3", "--step-seconds", "0.02"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    work = tmp_path_factory.mktemp("autolog-live")
    programs: dict[str, Program] = {}
    prometheus = annotated_pods_prometheus(work, [], rules_file_yaml(CFG))
    try:
        prometheus.start()
        for program in (
            start(work, "auto", PLAIN),
            start(work, "by-hand", BY_HAND),
            start(work, "nan", [*RUN, str(PROGRAMS / "plain_loop.py"), "OUT", "--lr", "1e20", "--step-seconds", "0.2"]),
            start(work, "ppo", [*RUN, str(PROGRAMS / "sb3_learn.py"), "OUT", "ppo"]),
            start(work, "dqn", [*RUN, str(PROGRAMS / "sb3_learn.py"), "OUT", "dqn", "--timesteps", "1500"]),
            start(work, "fit", [*RUN, str(PROGRAMS / "lightning_fit.py"), "OUT"]),
            start(work, "fit-lightning", [*RUN, str(PROGRAMS / "lightning_fit.py"), "OUT", "--package", "lightning"]),
            start(work, "study", [*RUN, str(PROGRAMS / "optuna_study.py"), "OUT"]),
            start(work, "ddp", [*TORCHRUN, str(PROGRAMS / "ddp_program.py"), "OUT"], ranks=2),
            start(work, "ddp-slow", [*TORCHRUN, str(PROGRAMS / "ddp_program.py"), "OUT", *SLOW_RANK], ranks=2),
        ):
            programs[program.name] = program
        targets = [
            pod_target(port, "training", f"train-{p.name}-{rank}", CFG.training_job_service)
            for p in programs.values()
            for rank, port in enumerate(p.ports)
        ]
        (work / "targets.json").write_text(json.dumps(targets))
        yield Live(prometheus, programs)
    finally:
        for program in programs.values():
            if program.process.poll() is None:
                program.process.kill()
        prometheus.stop()


def _done(live: Live, *names: str) -> None:
    for name in names:
        live.programs[name].finished()


def test_a_plain_loop_reports_what_the_same_loop_instrumented_by_hand_does(live):
    _done(live, "auto", "by-hand")
    steps = live.programs["auto"].result()["steps"]
    assert steps == live.programs["by-hand"].result()["steps"] == 60
    for job in ("auto", "by-hand"):
        assert live.value(catalog.TRAINING_STEPS_TOTAL, job_id=job) == steps
        assert live.value(catalog.TRAINING_SAMPLES_TOTAL, job_id=job) == steps * 16
        assert live.value(catalog.CHECKPOINT_SAVES_TOTAL, job_id=job) == 3
        assert live.value(catalog.TRAINING_LEARNING_RATE, job_id=job, param_group="0") == pytest.approx(1e-3 / 8)
        for phase in ("data_wait", "compute", "evaluation", "checkpoint"):
            assert live.value(catalog.TRAINING_PHASE_SECONDS_TOTAL, job_id=job, phase=phase) > 0, (job, phase)
        assert live.value(catalog.TRAINING_JOBS_BY_STATUS, pod=f"train-{job}-0", status="completed") == 1
    auto, by_hand = (live.value(catalog.TRAINING_STEP_LOSS, job_id=job) for job in ("auto", "by-hand"))
    assert auto == pytest.approx(by_hand, rel=0.1)
    labels = [
        live.series(catalog.TRAINING_HYPERPARAMETERS_INFO, job_id=job)[0]["metric"] for job in ("auto", "by-hand")
    ]
    for found in labels:
        del found["job_id"], found["pod"], found["instance"]
    assert labels[0] == labels[1]
    assert (labels[0]["batch_size"], labels[0]["optimizer"], labels[0]["lr_schedule"]) == ("16", "Adam", "StepLR")
    assert live.value(catalog.TRAINING_MODEL_FLOPS_TOTAL, job_id="auto") > 0


def test_a_program_that_instruments_itself_counts_each_step_once_in_one_job(live):
    _done(live, "by-hand")
    series = live.series(catalog.TRAINING_STEPS_TOTAL, pod="train-by-hand-0")
    assert [s["metric"]["job_id"] for s in series] == ["by-hand"]
    assert float(series[0]["value"][1]) == 60


def test_a_blown_up_learning_rate_fires_nan_detected_with_no_guard_in_the_script(live):
    alert = live.wait_alert("TrainingNaNDetected", job_id="nan", tensor_type="loss")
    assert alert["labels"]["model_type"] == "mlp"


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_one_learn_call_reports_the_algorithms_series_and_the_job_status(live, algorithm):
    _done(live, algorithm)
    result = live.programs[algorithm].result()
    labels = {"job_id": algorithm, "model_type": algorithm}
    assert live.value(catalog.TRAINING_SAMPLES_TOTAL, **labels) == result["num_timesteps"]
    # PPO: n_epochs (4) passes of n_steps / batch_size (4) minibatches per update; DQN: one step per update
    per_update = 4 if algorithm == "ppo" else 1
    assert live.value(catalog.TRAINING_STEPS_TOTAL, **labels) == result["n_updates"] * per_update
    assert live.value(catalog.TRAINING_JOBS_BY_STATUS, pod=f"train-{algorithm}-0", status="completed") == 1
    specific = catalog.RL_POLICY_ENTROPY if algorithm == "ppo" else catalog.RL_EXPLORATION_RATE
    assert live.series(specific, **labels)
    assert live.series(catalog.TRAINING_STEP_LOSS, **labels)


@pytest.mark.parametrize(("job", "package"), [("fit", "pytorch_lightning"), ("fit-lightning", "lightning.pytorch")])
def test_a_lightning_fit_counts_the_trainers_steps_samples_and_checkpoints(live, job, package):
    # Either package's Trainer: `pytorch_lightning`'s, or the `lightning` package's own copy.
    _done(live, job)
    result = live.programs[job].result()
    assert result["trainer"].startswith(f"{package}.")
    assert live.value(catalog.TRAINING_STEPS_TOTAL, job_id=job) == result["global_step"] == 36
    assert live.value(catalog.TRAINING_SAMPLES_TOTAL, job_id=job) == result["samples"]
    assert live.value(catalog.CHECKPOINT_SAVES_TOTAL, job_id=job) >= 1
    assert live.series(catalog.TRAINING_LOSS, job_id=job)
    assert live.series(catalog.TRAINING_VALIDATION_LOSS, job_id=job)
    # The fit's second optimizer step measured (the step after it on, with or without the first)
    per_step = _lightning_program_step_flops()
    flops = live.value(catalog.TRAINING_MODEL_FLOPS_TOTAL, job_id=job, precision="fp32")
    assert flops in (per_step * (result["global_step"] - 1), per_step * result["global_step"]), (flops, per_step)


def _lightning_program_step_flops() -> int:
    """FLOPs of one training step of `lightning_fit.py`'s module and batch (32), counted by hand."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.02)
    with FlopCounterMode(display=False) as counter:
        loss = torch.nn.functional.mse_loss(net(torch.randn(32, 4)).squeeze(1), torch.randn(32))
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return int(counter.get_total_flops())


def test_an_optuna_study_reports_the_studys_trials_and_best_value_and_every_trials_steps(live):
    _done(live, "study")
    result = live.programs["study"].result()
    for state, count in result["states"].items():
        assert live.value(catalog.HPO_TRIALS, job_id="study", state=state) == count
    assert live.value(catalog.HPO_BEST_VALUE, job_id="study") == pytest.approx(result["best_value"])
    assert live.value(catalog.TRAINING_STEPS_TOTAL, job_id="study") == result["steps"]


def test_a_ddp_job_under_foxhunt_torchrun_reports_every_rank(live):
    _done(live, "ddp")
    for rank in (0, 1):
        result = live.programs["ddp"].result(f"result-{rank}.json")
        labels = {"job_id": "ddp", "rank": str(rank)}
        assert live.value(catalog.TRAINING_STEPS_TOTAL, **labels) == result["steps"]
        assert live.value(catalog.TRAINING_SAMPLES_TOTAL, **labels) == result["samples"]
        (info,) = live.series(catalog.TRAINING_RANK_INFO, **labels)
        assert info["metric"]["world_size"] == "2"
        operations = catalog.TRAINING_COLLECTIVE_OPERATIONS_TOTAL
        # DDP's gradient buckets every step, and the script's own all_reduce once an epoch
        assert live.value(operations, collective="all_reduce", **labels) >= result["steps"] + 2
        # Each rank's model FLOPs: its second step counted, as the same step of the same model
        # counts outside DDP, for every step after it.
        per_step = _ddp_program_step_flops()
        assert live.value(catalog.TRAINING_MODEL_FLOPS_TOTAL, **labels) == per_step * (result["steps"] - 2)


def _ddp_program_step_flops() -> int:
    """FLOPs of one step of `ddp_program.py`'s model and batch, counted by hand outside DDP."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with FlopCounterMode(display=False) as counter:
        optimizer.zero_grad()
        torch.nn.MSELoss()(model(torch.randn(16, 10)), torch.randn(16, 1)).backward()
        optimizer.step()
    return int(counter.get_total_flops())


def test_a_slowed_ddp_rank_is_named_by_training_rank_straggler(live):
    # ALERTS keeps the alert's history: it fired while the job ran, which may be over by now.
    def fired() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = live.series(
            "ALERTS", alertname="TrainingRankStraggler", alertstate="firing", job_id="ddp-slow"
        )
        return found

    named = wait_until("TrainingRankStraggler firing for ddp-slow", fired, timeout=120)
    assert [alert["metric"]["rank"] for alert in named] == ["1"]
    _done(live, "ddp-slow")


# The cockpit rows each auto-instrumented job feeds (the GPU rows need a GPU; rollbacks need the
# remediation; fold, model-quality and epoch panels need the manual API's per-fold calls).
COCKPIT_ROWS = {
    "auto": ("Optimization", "Steps and Time", "Data Pipeline", "Checkpoints"),
    "ppo": ("Optimization", "Steps and Time", "Reinforcement Learning (DQN, PPO)"),
    "fit": ("Steps and Time", "Checkpoints"),
    "study": ("Steps and Time", "Hyperparameter Search"),
    "ddp": ("Steps and Time", "Distributed Ranks"),
}
# Panels of those rows a job cannot feed: why.
NOT_FED = {
    **{
        (job, panel): "the remediation's series: a job with remediation on"
        for job in ("auto", "fit")
        for panel in ("Rollbacks (Non-Finite Training)", "Rollbacks and Restarts of $job_id")
    },
    ("ddp", "Jobs with Stragglers"): "a rank slower than the others (none here)",
}


@pytest.mark.parametrize("job", COCKPIT_ROWS)
def test_the_training_cockpits_rows_return_data_for_each_auto_instrumented_job(live, job):
    _done(live, job)
    time.sleep(2)
    missing = []
    for row, query in cockpit_queries():
        if row not in COCKPIT_ROWS[job] or (job, query.panel_title) in NOT_FED:
            continue
        expr = query.substituted.replace('job_id=~".*"', f'job_id="{job}"')
        now = time.time()
        if not _has_data(live.prometheus.api.query_range(expr, now - 300, now, "1s")):
            missing.append(f"{row} / {query.panel_title} {query.ref_id}: {expr}")
    assert not missing, "panels without data:\n" + "\n".join(missing)
