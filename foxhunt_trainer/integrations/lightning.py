"""PyTorch Lightning: a callback that exports a `Trainer.fit`'s steps, losses, epochs and time split.

    import pytorch_lightning as pl
    from foxhunt_trainer.integrations.lightning import MetricsCallback

    with metrics.job("tft", job_id) as job:
        trainer = pl.Trainer(max_epochs=30, callbacks=[MetricsCallback(job)])
        trainer.fit(model, train_loader, val_loader)

What it reads:
- steps: the trainer's optimizer steps (what `trainer.global_step` counts: one per
  `on_before_optimizer_step`), handed to the job at the end of their batch, at most every
  `step_batches.RECORD_EVERY_SECONDS` (0.1 s) and at every check, epoch end, validation, the end of
  training and an exception, with the samples of their batches (a batch's first tensor's leading dimension,
  else Lightning's own `extract_batch_size`); a batch that steps no optimizer (gradient
  accumulation) counts its samples with the next step;
- the training loss: what `training_step` returns, kept on its device every batch (no
  synchronisation, one list append) and read once per epoch as the epoch's mean loss (`ml_training_loss`);
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
  "data_wait", validation as "evaluation", checkpoint writes as "checkpoint";
- model FLOPs (`measure_flops`, on by default, unless the job already has them declared): the
  batches of the fit's second optimizer step (forward, backward and the step; every batch of a
  gradient accumulation window) run once under PyTorch's `FlopCounterMode`, and what it counts is
  the job's FLOPs per step, in the precision of the trainer's `precision` setting. Until that is
  done the batch hooks read one attribute more (`_flops_stage`), then nothing.

Lightning calls every callback's per-batch hooks, a no-op's too, each with a lookup, its
profiler's context and the call (about 1.5 µs each on a 1 ms CPU step). The callback sets the
per-batch hooks it does not implement to None on itself, which Lightning's dispatcher skips
(`skip_unused_batch_hooks`: only where the dispatchers of the Lightning packages imported are
seen to skip them).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.io import CheckpointIO
from pytorch_lightning.trainer import call as lightning_call
from pytorch_lightning.utilities.data import extract_batch_size

from foxhunt_trainer import flops as flops_module
from foxhunt_trainer.hyperparameters import UNKNOWN, Hyperparameters
from foxhunt_trainer.integrations.optimizers import gradient_norm, learning_rates, short_name
from foxhunt_trainer.integrations.phase_blocks import PhaseBlocks
from foxhunt_trainer.integrations.step_batches import StepBatches
from foxhunt_trainer.integrations.torch import batch_size_of
from foxhunt_trainer.phases import COMPUTE, DATA_WAIT, EVALUATION, MAX_PENDING_SWITCHES
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
# The dtype each of those multiplies in (model FLOPs are counted in it); fp64 has none.
FLOPS_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "mixed-fp16": torch.float16,
    "bf16": torch.bfloat16,
    "mixed-bf16": torch.bfloat16,
}
# Model FLOPs: stages of the measure (`_flops_stage`; None: nothing to measure, or measured)
_FLOPS_AFTER_FIRST_STEP, _FLOPS_NEXT_BATCH, _FLOPS_COUNTING = 0, 1, 2


# The hooks Lightning calls once a batch or an optimizer step (training, validation, test, predict).
BATCH_HOOKS = tuple(
    name
    for name in vars(pl.Callback)
    if name.startswith("on_")
    and (
        "_batch_" in name
        or name in ("on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad")
    )
)


# The hook dispatchers of the two packages Lightning ships as (`lightning.pytorch` is a copy of
# `pytorch_lightning`, and calls a `pytorch_lightning` callback's hooks as its own).
DISPATCHER_MODULES = ("pytorch_lightning.trainer.call", "lightning.pytorch.trainer.call")
_probed: dict[str, bool] = {}  # module -> whether its dispatcher skips a hook that is not callable


def _dispatcher_skips_non_callables(dispatcher: Any = lightning_call) -> bool:
    """Whether this Lightning's hook dispatcher passes over a callback's hook that is not callable
    (tried on a stand-in trainer: a dispatcher that does not would break the fit)."""

    class Probe:
        on_train_batch_start = None

    class Trainer:
        def __init__(self) -> None:
            self.lightning_module = None
            self.callbacks = [Probe()]
            self.profiler = None  # a dispatcher that would call the hook enters the profiler first

    try:
        dispatcher._call_callback_hooks(Trainer(), "on_train_batch_start", None, 0)
    except Exception:
        return False
    return True


def _dispatchers_skip_non_callables() -> bool:
    """Whether the dispatcher of every Lightning package imported so far skips a hook that is not
    callable (each probed once)."""
    for name in DISPATCHER_MODULES:
        module = sys.modules.get(name)
        if module is not None and name not in _probed:
            _probed[name] = _dispatcher_skips_non_callables(module)
    return all(_probed.values())


def skip_unused_batch_hooks(callback: pl.Callback) -> None:
    """Set the per-batch hooks `callback`'s class leaves as `pl.Callback`'s no-ops to None on the
    instance: Lightning's dispatcher then skips them instead of calling them every batch (where
    the dispatchers of the Lightning packages imported by then are seen to)."""
    if not _dispatchers_skip_non_callables():
        return
    for name in BATCH_HOOKS:
        if getattr(type(callback), name) is getattr(pl.Callback, name):
            setattr(callback, name, None)


def _loss_of(outputs: Any) -> torch.Tensor | None:
    """The loss `training_step` returned (a tensor, or a mapping with "loss"); None when it returned
    nothing (manual optimization, a skipped batch). Automatic optimization hands the batch-end hook
    a detached copy; the callback detaches any other."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss if isinstance(loss, torch.Tensor) else None


def _summed(losses: list[torch.Tensor]) -> torch.Tensor | float:
    """The sum of one-element losses: read as numbers when they are in host memory (there is no
    device to synchronise with, and reading each costs less than stacking them), else on their
    device in float32 (no synchronisation)."""
    if losses[0].is_cpu:  # one device a run; reading one elsewhere is still right, if slower
        return sum(map(float, losses), 0.0)
    try:
        return torch.stack(losses).to(torch.float32).sum()
    except RuntimeError:  # mixed shapes (() and (1,)) or devices
        device = losses[0].device
        return torch.stack([t.reshape(()).to(device=device, dtype=torch.float32) for t in losses]).sum()


class _Partial:
    """A running sum of losses (a number, or a device tensor) and their count."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total: torch.Tensor | float | None = None
        self.count = 0

    def add(self, total: torch.Tensor | float, count: int) -> None:
        if self.total is None:
            self.total = total
        elif isinstance(total, torch.Tensor) and isinstance(self.total, torch.Tensor):
            self.total = self.total + total.to(self.total.device)
        else:
            self.total = self.total + total
        self.count += count

    def take(self) -> float | None:
        """The mean of the losses added since the last take (one synchronisation), then empty."""
        total, count = self.total, self.count
        self.total, self.count = None, 0
        return float(total) / count if total is not None and count else None


class LossWindows:
    """The step losses of two overlapping windows, the steps since the last check and the epoch
    so far, kept on their device: one list append a batch. The list is summed (`_summed`: on the
    device, no synchronisation) into both windows at each read and every `FOLD_AT` losses; a
    window's mean is read with one synchronisation."""

    FOLD_AT = 256

    def __init__(self) -> None:
        # Appended to by the batch hook itself (`pending`, then `fold` when FOLD_AT are there).
        self.pending: list[torch.Tensor] = []
        self._check = _Partial()
        self._epoch = _Partial()

    def add(self, loss: torch.Tensor) -> None:
        pending = self.pending
        pending.append(loss)
        if len(pending) >= self.FOLD_AT:
            self.fold()

    def fold(self) -> None:
        pending = self.pending
        if pending:
            total, count = _summed(pending), len(pending)
            pending.clear()  # in place: the hook holds the list
            self._check.add(total, count)
            self._epoch.add(total, count)

    @property
    def checked(self) -> int:
        """Losses since the last check."""
        return len(self.pending) + self._check.count

    def check_mean(self) -> float | None:
        self.fold()
        return self._check.take()

    def epoch_mean(self) -> float | None:
        self.fold()
        return self._epoch.take()

    def start_epoch(self) -> None:
        self.fold()
        self._epoch = _Partial()


def _batch_size(batch: Any) -> int:
    size = batch_size_of(batch)  # tensors, tuples and lists led by one, dicts, nested containers
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
    """Exports a Lightning training run into `job`.

    The three hooks Lightning calls every batch cost the most (on a short step every object they
    touch is a cache miss, and a call is more): they keep what they count on the callback itself
    and write the phase switches out (`HookedBlock`). They guard themselves (a wrapper around
    each would be an extra call a batch): they record only while `recording` holds, and hand an
    exception of theirs to `_hook_failed`, which re-raises it here; the auto-instrumentation's
    subclass has its `recording` follow its integration's switch and turns the integration off
    instead (its other hooks it wraps)."""

    recording = True

    def __init__(
        self,
        job: JobMetrics,
        *,
        val_loss_key: str = "val_loss",
        check_every: int = DEFAULT_CHECK_EVERY,
        measure_flops: bool = True,
    ) -> None:
        if check_every < 1:
            raise ValueError(f"check_every is a number of optimizer steps of at least 1, got {check_every}")
        self.job = job
        self.val_loss_key = val_loss_key
        self.check_every = check_every
        self.measure_flops = measure_flops
        # Model FLOPs: the measure's stage while the batch hooks take part in it, else None; the
        # counter of the step being measured and the optimizer steps it has counted.
        self._flops_stage: int | None = None
        self._flops: flops_module.FlopCount | None = None
        self._flops_steps = 0
        self._phases = PhaseBlocks(job)
        self._steps = StepBatches(job, check_every)
        self._stepped = 0  # optimizer steps of the batch running, not yet in `_steps.unrecorded`
        self._until_check = check_every  # steps to the next check (`StepBatches.start`)
        self._check_due = False  # the batch running took the check's step
        self._batch_size_known = False
        self._samples = 0
        self._losses = LossWindows()
        self._pending_losses = self._losses.pending
        self._grad_norm: torch.Tensor | None = None
        self._hyperparameters = Hyperparameters()
        self._epoch_started = time.monotonic()
        skip_unused_batch_hooks(self)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, MonitoredCheckpointIO):
            trainer.strategy.checkpoint_io = MonitoredCheckpointIO(self.job, io)

    # --- training ------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._until_check = self._steps.start()
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
        wanted = self.measure_flops and self.job.model_flops_per_step is None
        self._flops_stage = _FLOPS_AFTER_FIRST_STEP if wanted else None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._losses.start_epoch()
        self._epoch_started = time.monotonic()
        self._phases.switch(DATA_WAIT)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self.recording:
            if self._flops is not None:
                self._stop_measuring_flops()
            return
        try:
            phases = self._phases  # `phases.switch(COMPUTE)`, written out (`HookedBlock`)
            if phases.depth and phases.current is not COMPUTE:
                phases.pending.append((phases.depth, COMPUTE, phases.now()))
                phases.current = COMPUTE
                if len(phases.pending) >= MAX_PENDING_SWITCHES:
                    phases.flush()
            else:
                phases.switch(COMPUTE)
            if not self._batch_size_known and (size := _batch_size(batch)):
                self._batch_size_known = True
                self._hyperparameters = replace(self._hyperparameters, batch_size=size)
                self.job.set_hyperparameters(self._hyperparameters)
            if self._flops_stage == _FLOPS_NEXT_BATCH:
                self._flops, self._flops_steps = flops_module.FlopCount(), 0
                self._flops_stage = _FLOPS_COUNTING
        except Exception as error:
            if not self._hook_failed(error):
                raise

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # After backward, before the step: the gradients the optimizer steps with (at check steps
        # only). Lightning calls this once for every optimizer step it counts in `global_step`
        # (automatic and manual optimization, each optimizer, a step AMP's scaler skips included).
        if not self.recording:
            return
        try:
            self._stepped += 1
            self._until_check -= 1
            if not self._until_check:
                self._until_check = self.check_every
                self._check_due = True
                self._grad_norm = gradient_norm([optimizer])
        except Exception as error:
            if not self._hook_failed(error):
                raise

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.recording:
            if self._flops is not None:
                self._stop_measuring_flops()
            return
        try:
            if self._flops_stage is not None:  # (before the batch's steps are handed over)
                self._flops_batch_end(trainer, pl_module)
            # `_batch_size` and `_loss_of`, their common cases inlined (a tensor or a tuple or list
            # led by one; a loss tensor or a mapping holding one): this runs every batch.
            kind = type(batch)
            first = batch[0] if (kind is tuple or kind is list) and batch else batch
            if type(first) is torch.Tensor and (shape := first.shape):
                self._samples += shape[0]
            else:
                self._samples += _batch_size(batch)
            loss = outputs.get("loss") if type(outputs) is dict else outputs
            if type(loss) is not torch.Tensor:
                loss = _loss_of(outputs)
            if loss is not None:  # `LossWindows.add`, inlined
                pending = self._pending_losses
                pending.append(loss.detach() if loss.requires_grad else loss)
                if len(pending) >= LossWindows.FOLD_AT:
                    self._losses.fold()
            phases = self._phases
            now = phases.now()
            stepped = self._stepped
            if stepped:  # a batch that steps no optimizer (accumulation) counts with the next
                self._stepped = 0
                steps = self._steps
                steps.unrecorded += stepped
                if self._check_due:
                    self._check_due = False
                    self._record_steps()
                    self._check(trainer)
                elif now >= steps.record_by:  # `StepBatches.due`, inlined
                    self._record_steps()
            if phases.depth and phases.current is not DATA_WAIT:  # `phases.switch(DATA_WAIT, now)`
                phases.pending.append((phases.depth, DATA_WAIT, now))
                phases.current = DATA_WAIT
                if len(phases.pending) >= MAX_PENDING_SWITCHES:
                    phases.flush()
            else:
                phases.switch(DATA_WAIT, now)
        except Exception as error:
            if not self._hook_failed(error):
                raise

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning calls this after the epoch's validation: its loss is in the callback metrics.
        # A non-finite loss of either kind counts as a NaN detection (record_training_iteration).
        self._record_steps()
        train_loss = self._losses.epoch_mean()
        if train_loss is None:
            return  # training_step returned no loss (manual optimization): steps and time only
        duration = time.monotonic() - self._epoch_started
        validation = trainer.callback_metrics.get(self.val_loss_key)
        val_loss = float(validation) if validation is not None else None
        self.job.record_training_iteration(trainer.current_epoch + 1, train_loss, val_loss, duration)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop_measuring_flops()
        self._record_steps()
        if self._losses.checked or self._grad_norm is not None:
            self._check(trainer)
        self._phases.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        try:
            self._stop_measuring_flops()
            self._record_steps()
        finally:
            self._phases.close()

    # --- model FLOPs ------------------------------------------------------------------------------
    def _flops_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A batch ended while the FLOPs are to be measured: after the first step the next batch
        starts the measure; a measured batch that stepped ends it (one that did not, in gradient
        accumulation, goes on to the next)."""
        if self._flops_stage == _FLOPS_AFTER_FIRST_STEP:
            if self._stepped:
                self._flops_stage = _FLOPS_NEXT_BATCH
            return
        if self._flops_stage != _FLOPS_COUNTING:
            return
        self._flops_steps += self._stepped
        if not self._flops_steps:
            return
        counted, steps = self._stop_measuring_flops()
        if counted > 0:
            precision = self._flops_precision(trainer, pl_module)
            if precision is not None:
                self.job.set_model_flops(counted // steps, precision)

    def _stop_measuring_flops(self) -> tuple[int, int]:
        """Leave the FLOP counter (if a step is being measured), measure no more: what it counted
        and the optimizer steps it counted them over."""
        self._flops_stage = None
        counter, self._flops = self._flops, None
        if counter is None:
            return 0, 0
        return counter.stop(), self._flops_steps

    @staticmethod
    def _flops_precision(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str | None:
        """The precision the fit multiplies in, from the trainer's setting (else the module's
        parameters); None for one model FLOPs are not counted in (fp64)."""
        name = PRECISIONS.get(str(trainer.precision))
        if name == "fp8":
            return name
        dtype = FLOPS_DTYPES.get(name or "")
        try:
            return flops_module.precision_of(dtype) if dtype is not None else flops_module.model_precision(pl_module)
        except ValueError:
            return None

    # --- validation ----------------------------------------------------------------------------
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record_steps()
        self._phases.switch(EVALUATION)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.switch(DATA_WAIT)

    # --- internals -----------------------------------------------------------------------------
    def _hook_failed(self, error: Exception) -> bool:
        """A per-batch hook raised `error`: whether it is dealt with (else it propagates, as any
        hook's error does in a callback the program adds itself)."""
        return False

    def _record_steps(self) -> None:
        """Hand the steps taken since the last call to the job, with the samples of their batches
        (a batch's own steps too, when it ends in an exception or validation)."""
        if self._stepped:
            self._steps.unrecorded += self._stepped
            self._stepped = 0
        if self._steps.record(self._samples):
            self._samples = 0

    def _check(self, trainer: pl.Trainer) -> None:
        """The mean loss since the previous check and the gradient norm (one device sync), the
        learning rates."""
        loss = self._losses.check_mean()
        norm, self._grad_norm = self._grad_norm, None
        if loss is not None:
            self.job.record_step_loss(loss)
        if norm is not None:
            self.job.record_gradient_norm(float(norm))
        self.job.set_learning_rates(learning_rates(trainer.optimizers))
