"""PyTorch Lightning: a callback that exports a `Trainer.fit`'s steps, losses, epochs and time split.

    import pytorch_lightning as pl
    from observability.instrument.integrations.lightning import MetricsCallback

    with metrics.job("tft", job_id) as job:
        trainer = pl.Trainer(max_epochs=30, callbacks=[MetricsCallback(job)])
        trainer.fit(model, train_loader, val_loader)

What it reads:
- steps: the trainer's optimizer steps (`trainer.global_step`), with the samples of the batches
  since the previous step (Lightning's own `extract_batch_size`);
- the training loss: what `training_step` returns, summed on its device every batch (no
  synchronisation) and read once per epoch as the epoch's mean loss, plus every `check_every`
  optimizer steps as the latest step's loss; a non-finite loss counts as a NaN detection by itself
  at the latest at the end of its epoch;
- the validation loss: `trainer.callback_metrics[val_loss_key]` (what the model logs with
  `self.log("val_loss", ...)`), at the end of each training epoch;
- time: each training batch counts as "compute", the time between batches (the data loader) as
  "data_wait", validation as "evaluation".
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import extract_batch_size

from observability.instrument.integrations.phase_blocks import PhaseBlocks
from observability.instrument.phases import COMPUTE, DATA_WAIT, EVALUATION
from observability.instrument.training import JobMetrics

DEFAULT_CHECK_EVERY = 50


def _loss_of(outputs: Any) -> torch.Tensor | None:
    """The loss `training_step` returned (a tensor, or a mapping with "loss"); None when it returned
    nothing (manual optimization, a skipped batch)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss.detach() if isinstance(loss, torch.Tensor) else None


def _batch_size(batch: Any) -> int:
    try:
        return int(extract_batch_size(batch))
    except Exception:  # a batch Lightning cannot size counts no samples, as Lightning's own logging
        return 0


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
        self._loss_sum: torch.Tensor | None = None
        self._losses = 0
        self._epoch_started = time.monotonic()

    # --- training ------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._global_step = trainer.global_step

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loss_sum, self._losses = None, 0
        self._epoch_started = time.monotonic()
        self._phases.switch(DATA_WAIT)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._phases.switch(COMPUTE)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._samples += _batch_size(batch)
        loss = _loss_of(outputs)
        if loss is not None:
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._losses += 1
        stepped = trainer.global_step - self._global_step
        self._global_step = trainer.global_step
        for _ in range(stepped):
            done = self.job.record_step(samples=self._samples)
            self._samples = 0
            if loss is not None and done % self.check_every == 0:
                self._check_loss(float(loss))
        self._phases.switch(DATA_WAIT)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning calls this after the epoch's validation: its loss is in the callback metrics.
        # A non-finite loss of either kind counts as a NaN detection (record_training_iteration).
        if self._loss_sum is None:
            return  # training_step returned no loss (manual optimization): steps and time only
        duration = time.monotonic() - self._epoch_started
        train_loss = float(self._loss_sum) / self._losses
        validation = trainer.callback_metrics.get(self.val_loss_key)
        val_loss = float(validation) if validation is not None else None
        self.job.record_training_iteration(trainer.current_epoch + 1, train_loss, val_loss, duration)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._phases.close()

    # --- validation ----------------------------------------------------------------------------
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.switch(EVALUATION)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.switch(DATA_WAIT)

    # --- internals -----------------------------------------------------------------------------
    def _check_loss(self, loss: float) -> None:
        self.job.check_finite(loss)
