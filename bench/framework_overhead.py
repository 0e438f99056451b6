"""Overhead of the framework integrations on real training runs; figures go to the "Framework
integrations" section of BENCHMARKS.md.

Each case trains the same model from the same seed with and without the integration's callback,
the two alternating (`REPEATS` pairs, the order swapped every pair so neither always runs on a warm
cache), in one process with one PyTorch thread:
- Stable-Baselines3 PPO on CartPole (`MetricsCallback`: steps from the optimizer's hooks, the
  update statistics, episodes, phases);
- Stable-Baselines3 DQN on CartPole (the same, plus the exploration rate and a Q-value every 1,000
  environment steps);
- a PyTorch Lightning fit of a small regression MLP (`MetricsCallback`: steps, device-side loss
  sums, a check every 50 steps, phases, checkpoint IO).
Times are the process's CPU time (`time.process_time`) around `learn`/`fit`: the training is
single-threaded, so CPU time is its cost, and other work on the machine does not inflate it as it
does wall time. The overhead is the ratio of the medians, with the integration against without it.

Run: `make bench` or `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench framework_overhead`
(about 5 minutes on 2 cores).
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from stable_baselines3 import DQN, PPO
from torch.utils.data import DataLoader, TensorDataset

from bench import write_section
from foxhunt_trainer import JobMetrics, TrainingMetrics
from foxhunt_trainer.integrations.lightning import MetricsCallback as LightningCallback
from foxhunt_trainer.integrations.sb3 import MetricsCallback as Sb3Callback

SECTION_START = "<!-- framework-integrations:start -->"
SECTION_END = "<!-- framework-integrations:end -->"
REPEATS = 5
PPO_TIMESTEPS = 4096
DQN_TIMESTEPS = 4000
FIT_EPOCHS = 5
FIT_ROWS = 4096
FIT_BATCH = 32


@dataclass(frozen=True)
class Case:
    name: str
    unit: str  # what `units` counts
    units: int
    run: Callable[[bool, int], float]  # (with the integration, run number) -> CPU seconds


def _job(run: int) -> JobMetrics:
    return TrainingMetrics().start_job("bench", f"run-{run}", gpu_uuids=[])


def _ppo(monitored: bool, run: int) -> float:
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=1024, batch_size=64, n_epochs=4, seed=0, device="cpu")
    callback = Sb3Callback(_job(run)) if monitored else None
    started = time.process_time()
    model.learn(PPO_TIMESTEPS, callback=callback)
    return time.process_time() - started


def _dqn(monitored: bool, run: int) -> float:
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=500, seed=0, device="cpu")
    callback = Sb3Callback(_job(run)) if monitored else None
    started = time.process_time()
    model.learn(DQN_TIMESTEPS, callback=callback)
    return time.process_time() - started


class Regression(pl.LightningModule):
    """The small regression model both Lightning overhead benchmarks fit."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def _fit(monitored: bool, run: int) -> float:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(FIT_ROWS, 16, generator=generator)
    y = x.sum(dim=1)
    torch.manual_seed(0)
    callbacks: list[pl.Callback] = [LightningCallback(_job(run))] if monitored else []
    trainer = pl.Trainer(
        max_epochs=FIT_EPOCHS,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=FIT_BATCH)
    started = time.process_time()
    trainer.fit(Regression(), loader)
    return time.process_time() - started


CASES = (
    Case("Stable-Baselines3 PPO, CartPole", "environment steps", PPO_TIMESTEPS, _ppo),
    Case("Stable-Baselines3 DQN, CartPole", "environment steps", DQN_TIMESTEPS, _dqn),
    Case("Lightning fit, MLP regression", "optimizer steps", FIT_EPOCHS * FIT_ROWS // FIT_BATCH, _fit),
)


def measure(case: Case) -> tuple[list[float], list[float]]:
    """(seconds without, seconds with) the integration, `REPEATS` alternating pairs."""
    without: list[float] = []
    with_: list[float] = []
    case.run(False, -1)  # warm-up: imports, environment registration, first allocations
    for pair in range(REPEATS):
        order = (False, True) if pair % 2 == 0 else (True, False)
        for monitored in order:
            (with_ if monitored else without).append(case.run(monitored, pair))
    return without, with_


def main() -> None:
    torch.set_num_threads(1)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    load = os.getloadavg()[0]
    rows = []
    for case in CASES:
        without, with_ = measure(case)
        base, monitored = statistics.median(without), statistics.median(with_)
        per_unit = (monitored - base) / case.units * 1e6
        pairs = [w / b - 1 for b, w in zip(without, with_, strict=True)]
        rows.append(
            f"| {case.name} | {case.units:,} {case.unit} | {base:.2f} s | {monitored:.2f} s | "
            f"{100 * (monitored / base - 1):+.1f} % | {100 * statistics.median(pairs):+.1f} % "
            f"({100 * min(pairs):+.1f} % to {100 * max(pairs):+.1f} %) | {per_unit:+.1f} µs |"
        )
        print(rows[-1], flush=True)
    section = "\n".join(
        [
            SECTION_START,
            "## Framework integrations",
            "",
            "Command: `make bench` (or `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench framework_overhead`). "
            f"The same training from the same seed without and with the integration's callback, {REPEATS} "
            "alternating pairs in one process, one PyTorch thread, CPU time of the process (wall time on this shared "
            "machine is dominated by other work). Machine: 2 CPU cores shared with other "
            f"work (load average at start {load:.1f}), Python {platform.python_version()}, torch {torch.__version__}.",
            "",
            "| run | length | median without | median with | overhead (ratio of the medians) | "
            "per pair: median (least to greatest) | per unit |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Load average at the end {os.getloadavg()[0]:.1f}. A pair's overhead is its run with the callback "
            "against the one without, next to each other; the spread of the pairs is the machine's noise, "
            "against which the medians are read.",
            SECTION_END,
        ]
    )
    write_section(section, SECTION_START, SECTION_END)


if __name__ == "__main__":
    main()
