"""The integrations without Prometheus: optional imports, bad input, bounded series."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from typing import Any, cast

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.profilers import SimpleProfiler
from pytorch_lightning.trainer import call as lightning_call
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from torch.utils.data import DataLoader, TensorDataset

from foxhunt_trainer import JobMetrics, TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.integrations import lightning as lightning_integration
from foxhunt_trainer.integrations import step_batches
from foxhunt_trainer.integrations.lightning import LossWindows, _summed
from foxhunt_trainer.integrations.lightning import MetricsCallback as LightningCallback
from foxhunt_trainer.integrations.optimizers import gradient_norm
from foxhunt_trainer.integrations.sb3 import MetricsCallback as Sb3Callback
from foxhunt_trainer.search import TRIAL_STATES

pytestmark = pytest.mark.slow

FRAMEWORKS = ("stable_baselines3", "pytorch_lightning", "lightning", "optuna", "torch", "gymnasium")


def imported_frameworks(statement: str) -> list[str]:
    code = f"import sys; {statement}; import json; print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=".")
    return list(json.loads(out.stdout.splitlines()[-1]))


def test_the_trainer_library_imports_no_framework():
    assert imported_frameworks("import foxhunt_trainer, foxhunt_trainer.integrations") == []


def test_the_optuna_integration_imports_optuna_and_no_other_framework():
    assert imported_frameworks("import foxhunt_trainer.integrations.optuna") == ["optuna"]


def job() -> JobMetrics:
    return TrainingMetrics().start_job("dqn", "j", gpu_uuids=[])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda j: j.rl.set_exploration_rate(1.5), r"exploration rate is a ratio 0-1, got 1.5"),
        (lambda j: j.rl.set_exploration_rate(float("nan")), r"exploration rate is a ratio 0-1, got nan"),
        (lambda j: j.rl.record_policy_update(clip_fraction=-0.1), r"clip fraction is a ratio 0-1"),
        (lambda j: j.rl.record_episodes(-1), r"finished episodes are a count of at least 0, got -1"),
        (lambda j: j.rl.record_episodes(1, mean_length=-3.0), r"mean episode length .* got -3.0"),
        (lambda j: j.study(""), r"a study needs a name"),
        (lambda j: j.study("s").set_trial_counts({"done": 1}), r"unknown trial state 'done'; expected one of"),
        (lambda j: j.study("s").set_trial_counts({"complete": -1}), r"trials complete is a count of at least 0"),
        (lambda j: j.study("s").record_trial_end("running", 3), r"unknown trial state 'running'"),
        (lambda j: j.study("s").record_trial_progress(1, -2, 0.5), r"an epoch is a count of at least 0, got -2"),
    ],
)
def test_bad_values_are_refused_with_what_is_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call(job())


def test_a_study_has_every_state_at_zero_from_the_start_and_one_series_per_study():
    metrics = TrainingMetrics()
    handle = metrics.start_job("mlp", "hpo", gpu_uuids=[])
    study = handle.study("lr")
    assert handle.study("lr") is study
    for number in range(50):
        study.trial_started(number)
        study.record_trial_progress(number, 3, 0.5)
        study.record_trial_end("pruned", 4)
    text = render_text(metrics.registry).decode()
    lines = [line for line in text.splitlines() if line.startswith(catalog.HPO_TRIALS.name + "{")]
    assert sorted(line.split('state="')[1].split('"')[0] for line in lines) == sorted(TRIAL_STATES)
    for metric in (catalog.HPO_TRIAL_LOSS, catalog.HPO_TRIAL_EPOCH, catalog.HPO_TRIAL_NUMBER):
        assert sum(line.startswith(metric.name + "{") for line in text.splitlines()) == 1
    assert (
        f'{catalog.HPO_TRIAL_EPOCHS_TOTAL.name}{{job_id="hpo",model_type="mlp",state="pruned",study="lr"}} 200.0'
        in text
    )


def test_the_sb3_callback_refuses_an_algorithm_without_an_optimizer_it_counts():
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=10, device="cpu")
    del model.policy.optimizer
    with pytest.raises(TypeError, match=r"DQN: MetricsCallback counts the steps of the policy's optimizer .* neither"):
        model.learn(20, callback=Sb3Callback(job()))


def _sample(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{name}{{{re.escape(labels)}}} (\S+)$", text, re.MULTILINE)
    assert match, f"no {name}{{{labels}}} in the page"
    return float(match.group(1))


@pytest.mark.parametrize("algorithm", [SAC, TD3])
def test_an_actor_critic_counts_its_gradient_steps_its_critic_loss_and_both_learning_rates(algorithm):
    metrics = TrainingMetrics()
    handle = metrics.start_job("sac", "ac", gpu_uuids=[])
    model = algorithm("MlpPolicy", "Pendulum-v1", learning_starts=40, learning_rate=3e-4, seed=0, device="cpu")
    model.learn(120, callback=Sb3Callback(handle))
    text = render_text(metrics.registry).decode()
    labels = 'job_id="ac",model_type="sac",rank="0"'
    assert handle.steps_done == model._n_updates == 80  # one critic step a gradient step
    assert _sample(text, catalog.TRAINING_SAMPLES_TOTAL.name, labels) == 120
    critic_loss = model.logger.name_to_value["train/critic_loss"]
    assert _sample(text, catalog.TRAINING_STEP_LOSS.name, 'job_id="ac",model_type="sac"') == pytest.approx(critic_loss)
    for group in ("0.0", "1.0"):  # the actor's and the critic's
        rate = _sample(text, catalog.TRAINING_LEARNING_RATE.name, f'job_id="ac",model_type="sac",param_group="{group}"')
        assert rate == pytest.approx(3e-4)


def test_callback_settings_are_checked():
    with pytest.raises(ValueError, match=r"q_value_every is a number of environment steps of at least 1, got 0"):
        Sb3Callback(job(), q_value_every=0)
    with pytest.raises(ValueError, match=r"check_every is a number of optimizer steps of at least 1, got 0"):
        LightningCallback(job(), check_every=0)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_lightning_checkpoint_that_cannot_be_written_counts_as_a_failed_save(tmp_path):
    (tmp_path / "not-a-directory").write_text("")
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "j", gpu_uuids=[])
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[LightningCallback(handle), ModelCheckpoint(dirpath=tmp_path / "not-a-directory" / "ckpt")],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8)), batch_size=4)
    with pytest.raises(OSError):
        trainer.fit(Tiny(), data)
    text = render_text(metrics.registry).decode()
    assert 'ml_checkpoint_save_failures_total{error_type="io_error",job_id="j",model_type="tft"} 1.0' in text
    assert 'ml_checkpoint_saves_total{job_id="j",model_type="tft"} 0.0' in text


def quiet_trainer(root: Any, *callbacks: pl.Callback, **options: Any) -> pl.Trainer:
    """A CPU Trainer with `callbacks`, no logger, progress bar, summary or checkpoints."""
    return pl.Trainer(
        callbacks=list(callbacks),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        default_root_dir=root,
        **options,
    )


def test_a_lightning_fit_tells_the_job_its_planned_steps_and_epochs(tmp_path):
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "planned", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle), max_epochs=3)
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8)), batch_size=4))
    state = handle.run_state()
    assert (handle.steps_planned, handle.epochs_planned) == (6, 3)  # 2 batches a epoch, 3 epochs
    assert state.steps == 6 and state.steps_planned == 6


def test_lightning_dispatches_only_the_per_batch_hooks_the_callback_implements(tmp_path):
    # Lightning's profiler records every callback hook it dispatches: the callback's own per-batch
    # hooks are there each batch, the no-ops it leaves to `pl.Callback` are not (a hook set to
    # None is passed over); a program's subclass that implements one of them gets it called.
    class WithBackward(LightningCallback):
        def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.backwards = getattr(self, "backwards", 0) + 1

    profiler = SimpleProfiler()
    plain = LightningCallback(TrainingMetrics().start_job("tft", "dispatch", gpu_uuids=[]))
    own = WithBackward(TrainingMetrics().start_job("tft", "own-hook", gpu_uuids=[]))
    trainer = quiet_trainer(tmp_path, plain, own, max_epochs=1, profiler=profiler)
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8)), batch_size=4))
    calls = {action: len(durations) for action, durations in profiler.recorded_durations.items()}
    for hook in ("on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end"):
        assert calls[f"[Callback]{plain.state_key}.{hook}"] == 2  # 2 batches
    for hook in ("on_before_backward", "on_after_backward", "on_before_zero_grad"):
        assert f"[Callback]{plain.state_key}.{hook}" not in calls
    assert calls[f"[Callback]{own.state_key}.on_after_backward"] == 2 and own.backwards == 2
    assert plain.job.steps_done == own.job.steps_done == 2


def test_a_dispatcher_that_would_call_a_hook_set_to_none_keeps_every_hook(monkeypatch):
    # A Lightning whose dispatcher calls every hook it finds would fail the fit on a None: the
    # callback sees that on a stand-in trainer and leaves its hooks as they are.
    def calls_everything(trainer: Any, hook_name: str, *args: Any, **kwargs: Any) -> None:
        for callback in trainer.callbacks:
            with trainer.profiler.profile(hook_name):
                getattr(callback, hook_name)(trainer, trainer.lightning_module, *args, **kwargs)

    monkeypatch.setattr(lightning_call, "_call_callback_hooks", calls_everything)
    monkeypatch.setattr(lightning_integration, "_probed", {})
    callback = LightningCallback(job())
    assert callback.on_before_backward is not None and callback.on_before_zero_grad is not None
    monkeypatch.undo()
    assert lightning_integration._dispatcher_skips_non_callables()
    assert LightningCallback(job()).on_before_backward is None


class SlowData(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each batch of one sample takes `seconds` to load."""

    def __init__(self, batches: int, seconds: float) -> None:
        self.batches, self.seconds = batches, seconds

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.seconds)
        return torch.ones(2), torch.ones(())


class SlowStep(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(COMPUTE_SECONDS)
        return super().training_step(batch, batch_idx)


COMPUTE_SECONDS, LOAD_SECONDS, BATCHES = 0.01, 0.03, 10


def test_a_lightning_fit_counts_loading_as_data_wait_and_the_batch_as_compute(tmp_path):
    # The batch hooks switch the phases themselves: the time between batches (the loader's) is
    # data wait, a batch's training step compute; each at least what it slept.
    handle = TrainingMetrics().start_job("tft", "phases", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle), max_epochs=1)
    started = time.monotonic()
    trainer.fit(SlowStep(), DataLoader(SlowData(BATCHES, LOAD_SECONDS), batch_size=1))
    wall = time.monotonic() - started
    totals = handle.phases.totals()
    assert totals["data_wait"] >= BATCHES * LOAD_SECONDS
    assert totals["compute"] >= BATCHES * COMPUTE_SECONDS
    assert totals["data_wait"] + totals["compute"] <= wall
    assert handle.steps_done == BATCHES


class TwoOptimizers(pl.LightningModule):
    """Manual optimization: two optimizers, each stepped every batch (a GAN's shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.first, self.second = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        for optimizer, layer in zip(self.optimizers(), (self.first, self.second), strict=True):
            loss = torch.nn.functional.mse_loss(layer(x).squeeze(1), y)
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.first.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)]


@pytest.mark.parametrize(
    ("module", "options"),
    [(Tiny, {}), (Tiny, {"accumulate_grad_batches": 2}), (TwoOptimizers, {})],
    ids=["one-optimizer", "gradient-accumulation", "manual-two-optimizers"],
)
def test_the_steps_counted_are_the_trainers_global_steps_and_every_sample_is_counted(tmp_path, module, options):
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "steps", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle, check_every=3), max_epochs=2, **options)
    # 10 samples in batches of 4: the last batch of each epoch holds 2.
    trainer.fit(module(), DataLoader(TensorDataset(torch.randn(10, 2), torch.randn(10)), batch_size=4))
    assert trainer.global_step > 0
    assert handle.steps_done == trainer.global_step
    text = render_text(metrics.registry).decode()
    assert 'ml_training_samples_total{job_id="steps",model_type="tft",rank="0"} 20\n' in text


class StepsSeen(pl.Callback):
    """After the metrics callback: the job's step count and the trainer's at each batch's end."""

    def __init__(self, job: JobMetrics) -> None:
        self.job = job
        self.seen: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.seen.append((self.job.steps_done, trainer.global_step))


@pytest.mark.parametrize(("every", "expected"), [(0.0, "each step"), (3600.0, "checks")])
def test_steps_are_handed_to_the_job_in_batches_at_most_every_interval_and_at_every_check(
    tmp_path, monkeypatch, every, expected
):
    monkeypatch.setattr(step_batches, "RECORD_EVERY_SECONDS", every)
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "batches", gpu_uuids=[])
    seen = StepsSeen(handle)
    trainer = quiet_trainer(tmp_path, LightningCallback(handle, check_every=3), seen, max_epochs=1)
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(32, 2), torch.randn(32)), batch_size=4))  # 8 steps
    if expected == "each step":
        assert seen.seen == [(step, step) for step in range(1, 9)]
    else:  # the first step at once, then at each check (every 3 steps); the rest at the end of training
        assert [job for job, _ in seen.seen] == [1, 1, 3, 3, 3, 6, 6, 6]
        assert handle.steps_done == trainer.global_step == 8


class FailsAtStep(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 5:
            raise RuntimeError("the training step failed")
        return super().training_step(batch, batch_idx)


def test_a_failing_fit_has_every_step_it_took_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(step_batches, "RECORD_EVERY_SECONDS", 3600.0)
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "fails", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle, check_every=50), max_epochs=1)
    with pytest.raises(RuntimeError, match="the training step failed"):
        trainer.fit(FailsAtStep(), DataLoader(TensorDataset(torch.randn(32, 2), torch.randn(32)), batch_size=4))
    assert handle.steps_done == trainer.global_step == 5
    text = render_text(metrics.registry).decode()
    assert 'ml_training_samples_total{job_id="fails",model_type="tft",rank="0"} 20\n' in text


class Regression(pl.LightningModule):
    """Two layers and Adam: a step with matrix multiplies in its forward and backward."""

    def __init__(self, fail_at_step: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.fail_at_step = fail_at_step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at_step is not None and self.trainer.global_step == self.fail_at_step:
            raise RuntimeError("the training step failed")
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def _step_flops_by_hand(batches: int) -> int:
    """PyTorch's FLOP count of one optimizer step of `Regression` over `batches` batches of 32."""
    from torch.utils.flop_counter import FlopCounterMode

    model = Regression()
    optimizer = torch.optim.Adam(model.parameters())
    with FlopCounterMode(display=False) as counter:
        for _ in range(batches):
            model.training_step((torch.randn(32, 4), torch.randn(32)), 0).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return int(counter.get_total_flops())


def _dispatch_modes() -> list[Any]:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return list(_get_current_dispatch_mode_stack())


@pytest.mark.parametrize("accumulate", [1, 2], ids=["one-batch-a-step", "two-batches-a-step"])
def test_a_lightning_fit_measures_its_model_flops_once_for_every_optimizer_step(tmp_path, accumulate):
    # One optimizer step is measured (every batch of its accumulation window): what PyTorch's
    # FLOP counter counts for the same step by hand; every step after it counts them.
    metrics = TrainingMetrics()
    handle = metrics.start_job("tft", "flops", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle), max_epochs=1, accumulate_grad_batches=accumulate)
    trainer.fit(Regression(), DataLoader(TensorDataset(torch.randn(512, 4), torch.randn(512)), batch_size=32))
    per_step = _step_flops_by_hand(accumulate)
    assert (handle.model_flops_per_step, handle.model_flops_precision) == (per_step, "fp32")
    assert not _dispatch_modes()  # the counter is left
    text = render_text(metrics.registry).decode()
    total = _sample(
        text, catalog.TRAINING_MODEL_FLOPS_TOTAL.name, 'job_id="flops",model_type="tft",precision="fp32",rank="0"'
    )
    steps = trainer.global_step  # the first one or two were recorded before the FLOPs were known
    assert total in (per_step * (steps - 1), per_step * steps), (total, per_step, steps)


def test_a_fit_that_fails_in_its_measured_step_leaves_no_flop_counter_behind(tmp_path):
    handle = TrainingMetrics().start_job("tft", "fails", gpu_uuids=[])
    trainer = quiet_trainer(tmp_path, LightningCallback(handle), max_epochs=1)
    with pytest.raises(RuntimeError, match="the training step failed"):
        trainer.fit(
            Regression(fail_at_step=1), DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64)), batch_size=32)
        )
    assert not _dispatch_modes()
    assert handle.model_flops_per_step is None


def test_model_flops_the_program_declared_are_left_as_they_are(tmp_path):
    handle = TrainingMetrics().start_job("tft", "declared", gpu_uuids=[])
    handle.set_model_flops(1000, "bf16")
    callback = LightningCallback(handle)
    quiet_trainer(tmp_path, callback, max_epochs=1).fit(
        Regression(), DataLoader(TensorDataset(torch.randn(128, 4), torch.randn(128)), batch_size=32)
    )
    assert (handle.model_flops_per_step, handle.model_flops_precision) == (1000, "bf16")
    assert callback._flops_stage is None  # nothing measuring


class StopsAt(BaseCallback):
    """Raises once the algorithm has made `updates` policy updates."""

    def __init__(self, updates: int) -> None:
        super().__init__()
        self.updates = updates

    def _on_step(self) -> bool:
        if self.model._n_updates >= self.updates:
            raise RuntimeError("the environment failed")
        return True


@pytest.mark.parametrize("ends", ["completed", "raised"])
def test_sb3_steps_handed_over_in_batches_are_all_counted_at_the_end_or_the_flush(monkeypatch, ends):
    monkeypatch.setattr(step_batches, "RECORD_EVERY_SECONDS", 3600.0)  # only the first step at once
    handle = job()
    callback = Sb3Callback(handle)
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=16, train_freq=1, device="cpu", seed=0)
    if ends == "completed":
        model.learn(64, callback=callback)
    else:
        with pytest.raises(RuntimeError, match="the environment failed"):
            model.learn(64, callback=[callback, StopsAt(20)])
        assert handle.steps_done == 1  # SB3 calls no hook when learn raises
        callback.flush()
    assert handle.steps_done == model._n_updates > 1
    assert handle.tally.samples == model.num_timesteps  # every transition collected


def test_the_gradient_norm_is_the_global_norm_of_every_gradient_of_every_dtype():
    parameters = [
        torch.nn.Parameter(torch.zeros(3)),
        torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.float64)),
        torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16)),
        torch.nn.Parameter(torch.zeros(5)),  # no gradient: not part of the norm
    ]
    for parameter, grad in zip(
        parameters[:3], ([3.0, 0.0, 0.0], [[0.0, 4.0], [0.0, 0.0]], [12.0, 0, 0, 0]), strict=True
    ):
        parameter.grad = torch.tensor(grad, dtype=parameter.dtype)
    first, second = torch.optim.SGD(parameters[:2], lr=1.0), torch.optim.Adam(parameters[2:], lr=1.0)
    norm = gradient_norm([first, second])
    assert norm is not None and norm.dtype == torch.float32
    assert float(norm) == pytest.approx(13.0)  # sqrt(3² + 4² + 12²)
    assert gradient_norm([torch.optim.SGD(parameters[3:], lr=1.0)]) is None


@pytest.mark.parametrize("shapes", [(), (1,), "mixed"])
def test_step_losses_in_host_memory_are_summed_as_numbers_and_their_window_means_are_exact(shapes):
    values = [0.5, 1.5, 2.0, 4.0, float("nan"), 1.0]
    windows = LossWindows()
    windows.start_epoch()
    for index, value in enumerate(values[:4]):
        shape = ((), (1,))[index % 2] if shapes == "mixed" else shapes
        windows.add(torch.full(shape, value))
    assert windows.check_mean() == pytest.approx(2.0)
    windows.add(torch.tensor(values[4]))
    windows.add(torch.tensor(values[5]))
    assert math.isnan(cast(float, windows.check_mean()))  # a NaN loss is never averaged away
    assert math.isnan(cast(float, windows.epoch_mean()))


def test_step_losses_on_a_device_are_summed_there_without_being_read():
    # "meta" tensors hold no values: summing them reads none (a device's losses stay on it).
    losses = [torch.ones((), device="meta") for _ in range(3)]
    total = _summed(losses)
    assert isinstance(total, torch.Tensor) and total.device.type == "meta" and total.dtype == torch.float32
    assert isinstance(_summed([torch.tensor(1.0), torch.tensor([2.0])]), float)
