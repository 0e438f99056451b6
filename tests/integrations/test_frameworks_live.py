"""The framework integrations on real training runs, scraped by a real Prometheus.

One Prometheus for the module (1 s scrape and evaluation, the rendered rules) scrapes one trainer
registry while, in this process, Stable-Baselines3 trains DQN and PPO on CartPole, Lightning fits
a small regression model and Optuna runs a study of real PyTorch trials with pruning. Every value
Prometheus stored is then compared with what the framework itself computed: SB3's own logger (a
Logger that keeps every value SB3 records), Lightning's trainer, the Optuna study's storage. Last,
every panel of the cockpit's reinforcement-learning and hyperparameter-search rows must return
numbers (a query that returns only NaN is empty) from these runs.
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import pytorch_lightning as pl
import torch
from prometheus_client.parser import text_string_to_metric_families
from pytorch_lightning.callbacks import ModelCheckpoint
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from torch.utils.data import DataLoader, TensorDataset

from dashboards import build_all
from dashboards.queries import PanelQuery, panel_queries
from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.integrations.lightning import MetricsCallback as LightningCallback
from foxhunt_trainer.integrations.optuna import STATES, StudyMonitor
from foxhunt_trainer.integrations.sb3 import MetricsCallback as Sb3Callback
from harness.prometheus import PrometheusServer, config_yaml
from observability.config import ObservabilityConfig
from observability.rules import efficiency, rules_file_yaml

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
WAIT = 45.0  # seconds; generous for a loaded 2-core machine
DQN_JOB, PPO_JOB, FIT_JOB, HPO_JOB = "sb3-dqn", "sb3-ppo", "lightning-fit", "optuna-search"
STUDY = "mlp-lr"
RL_ROW, HPO_ROW = "Reinforcement Learning (DQN, PPO)", "Hyperparameter Search"


class RecordingLogger(Logger):
    """SB3's logger, keeping every value SB3 records (its dumps keep only the latest per key)."""

    def __init__(self) -> None:
        super().__init__(folder=None, output_formats=[])
        self.history: dict[str, list[float]] = defaultdict(list)

    def record(self, key: str, value: Any, exclude: str | tuple[str, ...] | None = None) -> None:
        super().record(key, value, exclude)
        if isinstance(value, int | float | np.floating | np.integer):
            self.history[key].append(float(value))


@dataclass
class Sb3Run:
    model: BaseAlgorithm
    logger: RecordingLogger
    final: dict[str, float]  # SB3's logger after learn()


@dataclass
class Live:
    prometheus: PrometheusServer
    metrics: TrainingMetrics
    start: float
    dqn: Sb3Run
    ppo: Sb3Run
    fit: dict[str, float] = field(default_factory=dict)
    study: optuna.Study | None = None
    seen_in_trial: dict[str, float] = field(default_factory=dict)

    def values(self, expr: str) -> list[float]:
        """Every value Prometheus stored for `expr` since the runs began (one series expected)."""
        now = time.time()
        result = self.prometheus.api.query_range(expr, self.start - 1, now, "1s")
        assert len(result) == 1, (expr, result)
        return [float(v) for _, v in result[0]["values"]]

    def last(self, expr: str) -> float:
        return self.values(expr)[-1]


def job_selector(metric: catalog.Metric, job_id: str, **labels: str) -> str:
    matchers = ",".join(f'{k}="{v}"' for k, v in {"job_id": job_id, **labels}.items())
    return f"{metric.name}{{{matchers}}}"


class ScrapedMidDecay(BaseCallback):
    """Holds DQN halfway through its exploration schedule until Prometheus has stored an
    exploration rate above the schedule's end: a 2,000-step run can otherwise decay between two
    scrapes of a busy machine, and the decay would not be seen."""

    def __init__(self, prometheus: PrometheusServer, at_step: int) -> None:
        super().__init__()
        self.prometheus, self.at_step = prometheus, at_step

    def _on_step(self) -> bool:
        if self.num_timesteps == self.at_step:
            final = self.model.exploration_final_eps  # type: ignore[attr-defined]
            above = f"{job_selector(catalog.RL_EXPLORATION_RATE, DQN_JOB)} > {final!r}"
            wait_until("a scrape in the middle of the exploration decay", lambda: self.prometheus.api.query(above))
        return True


# --- the runs ----------------------------------------------------------------------------------------
def run_sb3(metrics: TrainingMetrics, algorithm: str, prometheus: PrometheusServer) -> Sb3Run:
    net = {"net_arch": [32]}
    if algorithm == "dqn":
        model: BaseAlgorithm = DQN(
            "MlpPolicy",
            "CartPole-v1",
            learning_starts=200,
            train_freq=4,
            target_update_interval=250,
            exploration_fraction=0.6,
            policy_kwargs=net,
            seed=0,
            device="cpu",
        )
        steps, log_interval, job_id = 2000, 1, DQN_JOB
        held: list[BaseCallback] = [ScrapedMidDecay(prometheus, at_step=600)]  # epsilon halfway at 600
    else:
        model = PPO(
            "MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, n_epochs=4, policy_kwargs=net, seed=0, device="cpu"
        )
        steps, log_interval, job_id = 2048, 1, PPO_JOB
        held = []
    logger = RecordingLogger()
    model.set_logger(logger)
    job = metrics.start_job(algorithm, job_id, gpu_uuids=[])
    model.learn(steps, callback=[Sb3Callback(job, q_value_every=100), *held], log_interval=log_interval)
    job.finish("completed")
    return Sb3Run(model, logger, {k: float(v) for k, v in logger.name_to_value.items()})


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(1), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.02)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def regression_data(rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 4, generator=generator)
    return x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(rows, generator=generator)


def run_lightning(metrics: TrainingMetrics, checkpoints: Path) -> dict[str, float]:
    x, y = regression_data(512)
    job = metrics.start_job("tft", FIT_JOB, gpu_uuids=[])
    every_epoch = ModelCheckpoint(dirpath=checkpoints, save_top_k=-1, every_n_epochs=1)
    trainer = pl.Trainer(
        max_epochs=4,
        callbacks=[LightningCallback(job, check_every=4), every_epoch],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    model = Regression()
    train = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32)
    trainer.fit(model, train, DataLoader(TensorDataset(x[384:], y[384:]), batch_size=128))
    job.finish("completed")
    return {
        "global_step": float(trainer.global_step),
        "samples": float(4 * 384),
        "epochs": float(trainer.current_epoch),
        "train_loss": float(trainer.callback_metrics["train_loss"]),
        "val_loss": float(trainer.callback_metrics["val_loss"]),
        "checkpoints": float(len(list(checkpoints.glob("*.ckpt")))),
        "learning_rate": float(trainer.optimizers[0].param_groups[0]["lr"]),
    }


def run_study(metrics: TrainingMetrics, seen: dict[str, float]) -> optuna.Study:
    """Real PyTorch trials; a median pruner; a learning rate so large the loss diverges (a failed
    trial); enqueued trials wait in the study until they run."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    x, y = regression_data(1024, seed=1)
    job = metrics.start_job("mlp", HPO_JOB, gpu_uuids=[])
    study = optuna.create_study(
        study_name=STUDY,
        sampler=optuna.samplers.TPESampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )
    for lr in (0.05, 0.02, 30.0):
        study.enqueue_trial({"lr": lr})
    monitor = StudyMonitor(job, study)
    seen["waiting_at_start"] = exposed(metrics, catalog.HPO_TRIALS, HPO_JOB, state="waiting")

    def objective(trial: optuna.Trial) -> float:
        torch.manual_seed(trial.number)
        lr = trial.suggest_float("lr", 1e-4, 0.5, log=True)
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        optimizer = torch.optim.SGD(net.parameters(), lr=lr)
        loss = math.inf
        for epoch in range(6):
            for i in range(0, len(x), 64):
                optimizer.zero_grad()
                batch_loss = torch.nn.functional.mse_loss(net(x[i : i + 64]).squeeze(1), y[i : i + 64])
                batch_loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
            with torch.no_grad():
                loss = torch.nn.functional.mse_loss(net(x).squeeze(1), y).item()
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss diverged at lr={lr}")
            monitor.report(trial, loss, epoch)
            if trial.number == 0 and epoch == 0:
                seen["running_in_trial"] = exposed(metrics, catalog.HPO_TRIALS, HPO_JOB, state="running")
                seen["running_in_study"] = len(study.get_trials(states=(optuna.trial.TrialState.RUNNING,)))
            if trial.should_prune():
                raise optuna.TrialPruned()
        return loss

    monitor.optimize(objective, n_trials=8, catch=(FloatingPointError,))
    job.finish("completed")
    return study


def exposed(metrics: TrainingMetrics, metric: catalog.Metric, job_id: str, **labels: str) -> float:
    """A value of the trainer's own page, read without Prometheus."""
    for family in text_string_to_metric_families(render_text(metrics.registry).decode()):
        for s in family.samples:
            named = s.name in (metric.name, metric.name.removesuffix("_total"))
            if named and s.labels.get("job_id") == job_id and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError((metric.name, job_id, labels))


def wait_until(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    work: Path = tmp_path_factory.mktemp("frameworks-live")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    labels = {"namespace": "training", "pod": "train-frameworks", "service": CFG.training_job_service}
    scrape = {
        "job_name": "trainers",
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"], "labels": labels}],
    }
    config = config_yaml(
        [scrape], [str(work / "prometheus" / "rules.yml")], scrape_interval="1s", evaluation_interval="1s"
    )
    prometheus = PrometheusServer(work / "prometheus", config, {"rules.yml": rules_file_yaml(CFG)})
    try:
        prometheus.start()
        wait_until("the trainer's first scrape", lambda: prometheus.api.query(f'{catalog.UP.name}{{job="trainers"}}'))
        start = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dqn, ppo = run_sb3(metrics, "dqn", prometheus), run_sb3(metrics, "ppo", prometheus)
            live = Live(prometheus, metrics, start, dqn, ppo)
            live.fit = run_lightning(metrics, work / "checkpoints")
            live.study = run_study(metrics, live.seen_in_trial)
        # The last values set are scraped by now once the status of the last job is.
        done = f'{catalog.TRAINING_JOBS_BY_STATUS.name}{{status="completed"}}'
        wait_until("the final scrape", lambda: [s for s in prometheus.api.query(done) if s["value"][1] == "4"])
        time.sleep(1.5)
        yield live
    finally:
        torch.set_num_threads(threads)
        prometheus.stop()
        server.close(0)


# --- Stable-Baselines3 ---------------------------------------------------------------------------------
POLICY_UPDATE = [
    (catalog.RL_VALUE_LOSS, "train/value_loss", 1.0),
    (catalog.RL_APPROX_KL, "train/approx_kl", 1.0),
    (catalog.RL_CLIP_FRACTION, "train/clip_fraction", 1.0),
    (catalog.RL_EXPLAINED_VARIANCE, "train/explained_variance", 1.0),
    (catalog.RL_POLICY_ENTROPY, "train/entropy_loss", -1.0),  # SB3 logs minus the entropy
]


@pytest.mark.parametrize(("metric", "key", "sign"), POLICY_UPDATE, ids=lambda p: getattr(p, "name", None))
def test_ppo_update_series_carry_the_values_sb3_logged(live, metric, key, sign):
    stored = live.values(job_selector(metric, PPO_JOB))
    logged = {sign * v for v in live.ppo.logger.history[key]}
    assert set(stored) <= logged, f"{metric.name}: values SB3 never logged"
    assert stored[-1] == sign * live.ppo.final[key]


def test_dqn_exploration_rate_follows_the_algorithms_schedule(live):
    stored = live.values(job_selector(catalog.RL_EXPLORATION_RATE, DQN_JOB))
    logged = live.dqn.logger.history["rollout/exploration_rate"]
    assert set(stored) <= set(logged)
    assert stored[-1] == live.dqn.final["rollout/exploration_rate"] == live.dqn.model.exploration_rate
    assert stored == sorted(stored, reverse=True) and stored[0] > stored[-1], "epsilon decays"


def test_dqn_q_value_is_the_q_networks_greedy_value_on_the_latest_observations(live):
    model = live.dqn.model
    with torch.no_grad():
        observations, _ = model.policy.obs_to_tensor(model._last_obs)
        expected = float(model.q_net(observations).max(dim=1).values.mean())
    stored = live.values(job_selector(catalog.RL_Q_VALUE, DQN_JOB))
    assert stored[-1] == expected
    assert len(set(stored)) > 1 and all(math.isfinite(v) for v in stored), "sampled while training"


@pytest.mark.parametrize("run_name", ["dqn", "ppo"])
def test_loss_episodes_steps_and_samples_are_the_algorithms(live, run_name):
    run: Sb3Run = getattr(live, run_name)
    job_id = DQN_JOB if run_name == "dqn" else PPO_JOB
    model = run.model
    assert model.ep_info_buffer is not None
    rewards = live.values(job_selector(catalog.RL_EPISODE_REWARD, job_id))
    assert set(rewards) <= set(run.logger.history["rollout/ep_rew_mean"])
    assert rewards[-1] == float(np.mean([e["r"] for e in model.ep_info_buffer]))
    assert live.last(job_selector(catalog.RL_EPISODE_LENGTH, job_id)) == float(
        np.mean([e["l"] for e in model.ep_info_buffer])
    )
    monitored = len(model.get_env().env_method("get_episode_rewards")[0])  # type: ignore[union-attr]
    assert live.last(job_selector(catalog.RL_EPISODES_TOTAL, job_id)) == monitored
    # Steps are the policy optimizer's; samples the environment transitions (`time/total_timesteps`).
    n_updates = model._n_updates
    per_update = 1 if run_name == "dqn" else 256 // 64  # PPO counts epochs; each has 4 minibatches
    assert live.last(job_selector(catalog.TRAINING_STEPS_TOTAL, job_id)) == n_updates * per_update
    assert live.last(job_selector(catalog.TRAINING_SAMPLES_TOTAL, job_id)) == model.num_timesteps
    # Rollouts are the learner's data wait, updates its compute.
    phase = catalog.TRAINING_PHASE_SECONDS_TOTAL
    assert live.last(job_selector(phase, job_id, phase="data_wait")) > 0
    assert live.last(job_selector(phase, job_id, phase="compute")) > 0


@pytest.mark.parametrize(("run_name", "batch_size"), [("dqn", 32), ("ppo", 64)])
def test_step_loss_learning_rate_gradient_norm_and_hyperparameters_are_the_algorithms(live, run_name, batch_size):
    run: Sb3Run = getattr(live, run_name)
    job_id = DQN_JOB if run_name == "dqn" else PPO_JOB
    losses = live.values(job_selector(catalog.TRAINING_STEP_LOSS, job_id))
    assert set(losses) <= set(run.logger.history["train/loss"])
    assert losses[-1] == run.final["train/loss"]
    rate = live.last(job_selector(catalog.TRAINING_LEARNING_RATE, job_id, param_group="0"))
    assert rate == run.final["train/learning_rate"] == run.model.policy.optimizer.param_groups[0]["lr"]
    # The norm the optimizer stepped with: after SB3's clipping to max_grad_norm.
    norms = live.values(job_selector(catalog.TRAINING_GRADIENT_NORM, job_id))
    assert norms and all(0 < n <= run.model.max_grad_norm + 1e-4 for n in norms)  # type: ignore[attr-defined]
    info = live.prometheus.api.query(job_selector(catalog.TRAINING_HYPERPARAMETERS_INFO, job_id))
    assert [{k: s["metric"][k] for k in catalog.HYPERPARAMETER_LABELS} for s in info] == [
        {"batch_size": str(batch_size), "optimizer": "Adam", "precision": "fp32", "lr_schedule": "constant"}
    ]


# --- Lightning -----------------------------------------------------------------------------------------
def test_a_lightning_fit_reports_steps_samples_epochs_and_losses(live):
    fit = live.fit
    assert live.last(job_selector(catalog.TRAINING_STEPS_TOTAL, FIT_JOB)) == fit["global_step"] == 48
    assert live.last(job_selector(catalog.TRAINING_SAMPLES_TOTAL, FIT_JOB)) == fit["samples"]
    assert live.last(job_selector(catalog.TRAINING_CURRENT_EPOCH, FIT_JOB)) == fit["epochs"] == 4
    # The epoch's mean training loss (equal batches: what Lightning's on_epoch mean logs) and the
    # validation loss the model logged.
    assert live.last(job_selector(catalog.TRAINING_LOSS, FIT_JOB)) == pytest.approx(fit["train_loss"], rel=1e-6)
    assert live.last(job_selector(catalog.TRAINING_VALIDATION_LOSS, FIT_JOB)) == fit["val_loss"]
    # Checks every 4 steps: mean step losses, the gradient norm after backward, the scheduled rate.
    assert all(math.isfinite(v) for v in live.values(job_selector(catalog.TRAINING_STEP_LOSS, FIT_JOB)))
    assert all(v > 0 for v in live.values(job_selector(catalog.TRAINING_GRADIENT_NORM, FIT_JOB)))
    rates = live.values(job_selector(catalog.TRAINING_LEARNING_RATE, FIT_JOB, param_group="0"))
    assert rates[-1] == fit["learning_rate"] == 0.02 * 0.5**4
    assert rates == sorted(rates, reverse=True)
    info = live.prometheus.api.query(job_selector(catalog.TRAINING_HYPERPARAMETERS_INFO, FIT_JOB))
    assert [{k: s["metric"][k] for k in catalog.HYPERPARAMETER_LABELS} for s in info] == [
        {"batch_size": "32", "optimizer": "Adam", "precision": "fp32", "lr_schedule": "StepLR"}
    ]
    # Every checkpoint ModelCheckpoint wrote went through job.checkpoint: counted, good, timed.
    assert live.last(job_selector(catalog.CHECKPOINT_SAVES_TOTAL, FIT_JOB)) == fit["checkpoints"] == 4
    assert live.last(job_selector(catalog.CHECKPOINT_LAST_GOOD_STEP, FIT_JOB)) == fit["global_step"]
    phase = catalog.TRAINING_PHASE_SECONDS_TOTAL
    for name in ("compute", "data_wait", "evaluation", "checkpoint"):
        assert live.last(job_selector(phase, FIT_JOB, phase=name)) > 0, name


# --- Optuna --------------------------------------------------------------------------------------------
def test_trial_states_and_best_value_are_the_studys_own(live):
    study = live.study
    own = Counter(STATES[t.state] for t in study.trials)
    assert {"complete", "pruned", "failed"} <= set(own), f"the study should exercise every end: {own}"
    for state in ("running", "waiting", "complete", "pruned", "failed"):
        assert live.last(job_selector(catalog.HPO_TRIALS, HPO_JOB, study=STUDY, state=state)) == own.get(state, 0)
    assert live.last(job_selector(catalog.HPO_BEST_VALUE, HPO_JOB, study=STUDY)) == study.best_value
    best_so_far = live.values(job_selector(catalog.HPO_BEST_VALUE, HPO_JOB, study=STUDY))
    assert best_so_far == sorted(best_so_far, reverse=True), "a minimised study's best only falls"
    completed = [t for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE]
    assert live.last(job_selector(catalog.HPO_OBJECTIVE_VALUE, HPO_JOB, study=STUDY)) == completed[-1].value
    # While trials ran: the enqueued ones waited, and the one in progress showed as running.
    assert live.seen_in_trial["waiting_at_start"] == 3
    assert live.seen_in_trial["running_in_trial"] == live.seen_in_trial["running_in_study"] == 1


def test_each_trials_epochs_and_loss_stay_in_per_study_series(live):
    study = live.study
    for state in ("complete", "pruned", "failed"):
        epochs = sum(len(t.intermediate_values) for t in study.trials if STATES[t.state] == state)
        assert live.last(job_selector(catalog.HPO_TRIAL_EPOCHS_TOTAL, HPO_JOB, study=STUDY, state=state)) == epochs
    last = study.trials[-1]
    assert live.last(job_selector(catalog.HPO_TRIAL_NUMBER, HPO_JOB, study=STUDY)) == last.number
    reported = [t for t in study.trials if t.intermediate_values][-1]
    step = max(reported.intermediate_values)
    assert live.last(job_selector(catalog.HPO_TRIAL_LOSS, HPO_JOB, study=STUDY)) == reported.intermediate_values[step]
    losses = {v for t in study.trials for v in t.intermediate_values.values()}
    assert set(live.values(job_selector(catalog.HPO_TRIAL_LOSS, HPO_JOB, study=STUDY))) <= losses
    # Bounded: one series per study (and state), whatever the number of trials.
    names = [m.name for m in (catalog.HPO_TRIAL_LOSS, catalog.HPO_TRIAL_EPOCH, catalog.HPO_TRIAL_NUMBER)]
    for name in names:
        assert len(live.prometheus.api.query(f"{name}[1h]")) == 1


# --- the cockpit's rows --------------------------------------------------------------------------------
def row_queries(row: str) -> list[PanelQuery]:
    dashboard = build_all(CFG)["foxhunt-training-cockpit"]
    titles: list[str] = []
    current = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
        elif current == row:
            titles.append(panel["title"])
    assert titles, row
    return [q for q in panel_queries(dashboard) if q.panel_title in titles]


@pytest.mark.parametrize("row", [RL_ROW, HPO_ROW])
def test_every_panel_of_the_row_shows_numbers_from_the_runs(live, row):
    def numbers(query: PanelQuery) -> bool:
        ranged = live.prometheus.api.query_range(query.substituted, live.start, time.time(), query.step)
        return any(not math.isnan(float(v)) for series in ranged for _, v in series["values"])

    queries = row_queries(row)
    assert len({q.panel_title for q in queries}) >= 6
    empty = [(q.panel_title, q.ref_id, q.substituted) for q in queries if not numbers(q)]
    assert empty == [], json.dumps(empty, indent=1)


def test_healthy_framework_runs_raise_no_alert(live):
    """The rendered rules, evaluated every second over these runs: nothing pending or firing for them
    but the efficiency verdicts (an RL job on CPU environments spends its time collecting rollouts,
    which the verdict rightly calls input-bound; that info alert says what to change)."""
    ours = {DQN_JOB, PPO_JOB, FIT_JOB, HPO_JOB}
    verdicts = {a.name for a in efficiency.efficiency_alerts(ObservabilityConfig())}
    alerts = live.prometheus.api.get("/api/v1/alerts")["alerts"]
    assert [
        (a["labels"]["alertname"], a["labels"].get("job_id"), a["state"])
        for a in alerts
        if a["labels"].get("job_id") in ours and a["labels"]["alertname"] not in verdicts
    ] == []
