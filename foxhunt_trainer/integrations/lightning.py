"""PyTorch Lightning: a callback that exports a `Trainer.fit`'s steps, losses, epochs and time split.

    import pytorch_lightning as pl
    from foxhunt_trainer.integrations.lightning import MetricsCallback

    with metrics.job("tft", job_id) as job:
        trainer = pl.Trainer(max_epochs=30, callbacks=[MetricsCallback(job)])
        trainer.fit(model, train_loader, val_loader)

What it reads:
- steps: the trainer's optimizer steps (`trainer.global_step`), with the samples of the batches
  since the previous step (Lightning's own `extract_batch_size`);
- the training loss: what `training_step` returns, summed on its device every batch (no
  synchronisation) and read once per epoch as the epoch's mean loss (`ml_training_loss`);
- every `check_every` optimizer steps (and when training ends), with one synchronisation: the mean
  loss of the steps since the previous check (`ml_training_step_loss`), the global norm of the
  gradients the optimizer stepped with (taken in `on_before_optimizer_step`, after backward), and
  the learning rate of every parameter group; a non-finite loss or gradient norm counts as a NaN
  detection by itself;
- the hyperparameters series: optimizer class, Lightning's precision, the first scheduler's class,
  the batch size of the first batch;
- the validation loss: `trainer.callback_metrics[val_loss_key]` (what the model logs with
  `self.log("val_loss", ...)`), at the end of each training epoch;
- checkpoints: every checkpoint the trainer writes (`ModelCheckpoint`, `trainer.save_checkpoint`)
  goes through `job.checkpoint`: timed, its errors classified and counted, a state with NaN or
  infinite weights refused as a good save (the callback wraps the strategy's `checkpoint_io`);
- time: each training batch counts as "compute", the time between batches (the data loader) as
  "data_wait", validation as "evaluation", checkpoint writes as "checkpoint".
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.io import CheckpointIO
from pytorch_lightning.utilities.data import extract_batch_size

from foxhunt_trainer.hyperparameters import UNKNOWN, Hyperparameters
from foxhunt_trainer.integrations.optimizers import gradient_norm, learning_rates, short_name
from foxhunt_trainer.integrations.phase_blocks import PhaseBlocks
from foxhunt_trainer.integrations.torch import batch_size_of
from foxhunt_trainer.phases import COMPUTE, DATA_WAIT, EVALUATION
from foxhunt_trainer.training import JobMetrics

DEFAULT_CHECK_EVERY = 50
# Lightning's precision settings, as the hyperparameter series names them.
PRECISIONS = {
    "32-true": "fp32",
    "64-true": "fp64",
    "16-true": "fp16",
    "bf16-true": "bf16",
    "16-mixed": "mixed-fp16",
    "bf16-mixed": "mixed-bf16",
    "transformer-engine": "fp8",
}


def _loss_of(outputs: Any) -> torch.Tensor | None:
    """The loss `training_step` returned (a tensor, or a mapping with "loss"); None when it returned
    nothing (manual optimization, a skipped batch)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss.detach() if isinstance(loss, torch.Tensor) else None


class LossSum:
    """Losses kept on their device (no synchronisation, no arithmetic per step) until read: one
    stack and sum at the read, the list folded into a partial sum every `FOLD_AT` losses."""

    FOLD_AT = 256

    def __init__(self) -> None:
        self._losses: list[torch.Tensor] = []
        self._partial: torch.Tensor | None = None
        self.count = 0

    def add(self, loss: torch.Tensor) -> None:
        self._losses.append(loss)
        self.count += 1
        if len(self._losses) >= self.FOLD_AT:
            self._partial, self._losses = self._sum(), []

    def _sum(self) -> torch.Tensor | None:
        if not self._losses:
            return self._partial
        try:
            total = torch.stack(self._losses).to(torch.float32).sum()
        except RuntimeError:  # mixed shapes (() and (1,)) or devices
            device = self._losses[0].device
            total = torch.stack([t.reshape(()).to(device=device, dtype=torch.float32) for t in self._losses]).sum()
        return total if self._partial is None else total + self._partial.to(total.device)

    def mean(self) -> float | None:
        total = self._sum()
        return float(total) / self.count if total is not None else None


def _batch_size(batch: Any) -> int:
    size = batch_size_of(batch)  # the common case (a tensor, or a tuple or dict of them), cheaply
    if size is not None:
        return size
    try:
        return int(extract_batch_size(batch))
    except Exception:  # a batch Lightning cannot size counts no samples, as Lightning's own logging
        return 0


class MonitoredCheckpointIO(CheckpointIO):
    """The strategy's checkpoint IO, each save inside `job.checkpoint` (loads and removals as they were)."""

    def __init__(self, job: JobMetrics, inner: CheckpointIO) -> None:
        self.job = job
        self.inner = inner

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        step = int(checkpoint.get("global_step", 0))
        with self.job.checkpoint(path, step=step, state=checkpoint.get("state_dict")):
            self.inner.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        return self.inner.load_checkpoint(path, map_location, weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class MetricsCallback(pl.Callback):
    """Exports a Lightning training run into `job`."""

    def __init__(
        self, job: JobMetrics, *, val_loss_key: str = "val_loss", check_every: int = DEFAULT_CHECK_EVERY
    ) -> None:
        if check_every < 1:
            raise ValueError(f"check_every is a number of optimizer steps of at least 1, got {check_every}")
        self.job = job
        self.val_loss_key = val_loss_key
        self.check_every = check_every
        self._phases = PhaseBlocks(job)
        self._global_step = 0
        self._samples = 0
        self._epoch_loss = LossSum()
        self._check_loss = LossSum()
        self._grad_norm: torch.Tensor | None = None
        self._hyperparameters = Hyperparameters()
        self._epoch_started = time.monotonic()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, MonitoredCheckpointIO):
            trainer.strategy.checkpoint_io = MonitoredCheckpointIO(self.job, io)

    # --- training ------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._global_step = trainer.global_step
        schedulers = trainer.lr_scheduler_configs
        self._hyperparameters = Hyperparameters(
            optimizer=short_name(type(trainer.optimizers[0]).__name__) if trainer.optimizers else UNKNOWN,
            precision=PRECISIONS.get(str(trainer.precision), UNKNOWN),
            lr_schedule=short_name(type(schedulers[0].scheduler).__name__) if schedulers else UNKNOWN,
        )
        self.job.set_hyperparameters(self._hyperparameters)
        # The planned length, for the job's progress lines (time left at the current pace).
        planned = trainer.estimated_stepping_batches
        steps = int(planned) if isinstance(planned, int | float) and math.isfinite(planned) and planned > 0 else None
        epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
        self.job.set_planned(steps=steps, epochs=epochs)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_loss = LossSum()
        self._epoch_started = time.monotonic()
        self._phases.switch(DATA_WAIT)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._phases.switch(COMPUTE)
        if self._hyperparameters.batch_size is None and (size := _batch_size(batch)):
            self._hyperparameters = replace(self._hyperparameters, batch_size=size)
            self.job.set_hyperparameters(self._hyperparameters)

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # After backward, before the step: the gradients the optimizer steps with (at check steps only).
        if (self.job.steps_done + 1) % self.check_every == 0:
            self._grad_norm = gradient_norm([optimizer])

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._samples += _batch_size(batch)
        loss = _loss_of(outputs)
        if loss is not None:
            self._epoch_loss.add(loss)
            self._check_loss.add(loss)
        global_step = trainer.global_step
        stepped, self._global_step = global_step - self._global_step, global_step
        for _ in range(stepped):
            done = self.job.record_step(samples=self._samples)
            self._samples = 0
            if done % self.check_every == 0:
                self._check(trainer)
        self._phases.switch(DATA_WAIT)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning calls this after the epoch's validation: its loss is in the callback metrics.
        # A non-finite loss of either kind counts as a NaN detection (record_training_iteration).
        train_loss = self._epoch_loss.mean()
        if train_loss is None:
            return  # training_step returned no loss (manual optimization): steps and time only
        duration = time.monotonic() - self._epoch_started
        validation = trainer.callback_metrics.get(self.val_loss_key)
        val_loss = float(validation) if validation is not None else None
        self.job.record_training_iteration(trainer.current_epoch + 1, train_loss, val_loss, duration)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._check_loss.count or self._grad_norm is not None:
            self._check(trainer)
        self._phases.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._phases.close()

    # --- validation ----------------------------------------------------------------------------
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.switch(EVALUATION)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.switch(DATA_WAIT)

    # --- internals -----------------------------------------------------------------------------
    def _check(self, trainer: pl.Trainer) -> None:
        """The mean loss since the previous check and the gradient norm (one device sync), the
        learning rates."""
        loss, self._check_loss = self._check_loss.mean(), LossSum()
        norm, self._grad_norm = self._grad_norm, None
        if loss is not None:
            self.job.record_step_loss(loss)
        if norm is not None:
            self.job.record_gradient_norm(float(norm))
        self.job.set_learning_rates(learning_rates(trainer.optimizers))
