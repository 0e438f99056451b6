"""Plain PyTorch: `watch(job, model, optimizer)` reports a training loop without changing it.

    with watch(job, model, optimizer, scheduler=scheduler) as watcher:
        for x, y in watcher.loader(train_loader):      # data_wait around next(), compute around the step
            loss = loss_fn(model(x), y)
            loss.backward()
            watcher.record_loss(loss)                   # no .item(): no device sync
            optimizer.step()                            # counted by the optimizer's step hooks
            optimizer.zero_grad()

What it records, for the job (`JobMetrics`) it is given:
- every optimizer step (the optimizer's post-step hook): `record_step(samples=...)`, the samples
  being the batch sizes the loader yielded since the previous step (gradient accumulation counts
  every micro-batch), so samples per second is `rate(ml_training_samples_total)`;
- every batch the wrapped loader yields: the time `next()` took (`ml_training_data_loading_seconds`,
  phase data_wait) and a batch; the loop body until the next `next()` counts as compute;
- at each check, every `check_every` steps or `check_every_seconds`, whichever comes first (and at
  close): the mean loss of the steps since the previous check (`ml_training_step_loss`), the global
  gradient norm the optimizer stepped with (`ml_training_gradient_norm`, computed in the pre-step
  hook of the check's step), the learning rate of each parameter group. A NaN or infinite loss in
  any step of the interval, or a non-finite gradient norm, counts in `ml_training_nan_count`
  (`loss`, `gradient`). Loss tensors are kept on their device until the check sums them (no
  arithmetic and no sync in the step), so a check costs one device synchronisation, not one per step;
- once, and again when the first batch tells the batch size: the job's hyperparameters (batch size,
  optimizer class, precision, learning-rate scheduler class).

An optimizer step that `torch.amp.GradScaler` skips (inf gradients, expected under fp16) never
calls the optimizer, so it is neither counted nor checked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

import torch

from foxhunt_trainer.hyperparameters import UNKNOWN, Hyperparameters
from foxhunt_trainer.phases import COMPUTE, DATA_WAIT
from foxhunt_trainer.training import JobMetrics

DEFAULT_CHECK_EVERY = 50
DEFAULT_CHECK_EVERY_SECONDS = 5.0
# Loss tensors kept between checks before they are summed on their device (bounds the memory of a
# loop that records losses without optimizer steps).
_FOLD_LOSSES_AT = 256

_PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}

T = TypeVar("T")


def batch_size_of(batch: object) -> int | None:
    """The leading dimension of the batch's first tensor (a tensor, a tuple or list, a dict)."""
    # The common case first, at a few attribute reads (it runs every batch): a tensor, or a tuple
    # or list led by one.
    kind = type(batch)
    first = batch[0] if (kind is tuple or kind is list) and batch else batch  # type: ignore[index]
    if type(first) is torch.Tensor and (shape := first.shape):
        return int(shape[0])
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, list | tuple) and batch:
        return batch_size_of(batch[0])
    if isinstance(batch, Mapping) and batch:
        return batch_size_of(next(iter(batch.values())))
    return None


def precision_of(model: torch.nn.Module) -> str:
    """The dtype of the model's first floating-point parameter, as a precision name."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return _PRECISIONS.get(parameter.dtype, UNKNOWN)
    return UNKNOWN


class Watcher:
    """Reports a PyTorch training loop to a job; see the module docstring. Made by `watch`."""

    def __init__(
        self,
        job: JobMetrics,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        scheduler: object = None,
        check_every: int = DEFAULT_CHECK_EVERY,
        check_every_seconds: float = DEFAULT_CHECK_EVERY_SECONDS,
        batch_size: int | None = None,
        precision: str | None = None,
        samples_of: Callable[[Any], int | None] = batch_size_of,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if check_every < 1:
            raise ValueError(f"check_every is a number of steps of at least 1, got {check_every}")
        if not check_every_seconds > 0:
            raise ValueError(f"check_every_seconds must be positive, got {check_every_seconds}")
        self.job, self.model, self.optimizer = job, model, optimizer
        self.check_every, self.check_every_seconds = check_every, check_every_seconds
        self._samples_of, self._clock = samples_of, clock
        self._hyperparameters = Hyperparameters(
            batch_size=batch_size,
            optimizer=type(optimizer).__name__,
            precision=precision or precision_of(model),
            lr_schedule=UNKNOWN if scheduler is None else type(scheduler).__name__,
        )
        job.set_hyperparameters(self._hyperparameters)
        self.steps = 0
        self.checks = 0
        self._samples = 0  # yielded since the previous step
        self._loss_tensors: list[torch.Tensor] = []  # detached, on their device, since the previous check
        self._loss_sum: torch.Tensor | None = None  # of earlier tensors, folded when the list grows long
        self._loss_floats = 0.0
        self._losses = 0
        self._grad_norm: torch.Tensor | None = None
        self._steps_since_check = 0
        self._due = False  # whether the step in progress ends with a check
        self._last_check = clock()
        self._hooks = [
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
        ]

    # --- what the loop calls -------------------------------------------------------------------
    def loader(self, batches: Iterable[T]) -> TimedLoader[T]:
        """`batches` (a DataLoader or any iterable) with data_wait timed around each `next()`."""
        return TimedLoader(self, batches)

    def record_loss(self, loss: torch.Tensor | float) -> None:
        """This step's loss, a one-element tensor or a number. A tensor is kept on its device
        (no sync, no arithmetic: the losses are summed at the next check)."""
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                shape = tuple(loss.shape)
                raise ValueError(f"record_loss takes the step's loss, one value; got a tensor of shape {shape}")
            self._loss_tensors.append(loss.detach())
            if len(self._loss_tensors) >= _FOLD_LOSSES_AT:
                self._fold_losses()
        else:
            self._loss_floats += float(loss)
        self._losses += 1

    def _fold_losses(self) -> None:
        """Sum the kept loss tensors into one (on their device, no sync): the list stays short."""
        self._loss_sum = self._summed_losses()
        self._loss_tensors = []

    def _summed_losses(self) -> torch.Tensor | None:
        """The sum of the tensor losses since the previous check, on the first one's device (no sync)."""
        tensors = self._loss_tensors
        if not tensors:
            return self._loss_sum
        device = tensors[0].device
        try:
            total = torch.stack(tensors).to(torch.float32).sum()
        except RuntimeError:  # mixed shapes (() and (1,)) or devices
            total = torch.stack([t.reshape(()).to(device=device, dtype=torch.float32) for t in tensors]).sum()
        return total if self._loss_sum is None else total + self._loss_sum.to(device)

    def check(self) -> None:
        """Read the losses and the gradient norm now (one device sync) and report them."""
        loss_sum = self._summed_losses()
        pending = [t for t in (loss_sum, self._grad_norm) if t is not None]
        values = torch.stack([t.to(pending[0].device) for t in pending]).tolist() if pending else []
        if self._losses:
            tensor_sum = values.pop(0) if loss_sum is not None else 0.0
            self.job.record_step_loss((tensor_sum + self._loss_floats) / self._losses)
        if self._grad_norm is not None:
            self.job.record_gradient_norm(values.pop(0))
        self.job.set_learning_rates(self.learning_rates())
        self._loss_tensors, self._loss_sum, self._loss_floats, self._losses = [], None, 0.0, 0
        self._grad_norm = None
        self._steps_since_check = 0
        self._last_check = self._clock()
        self.checks += 1

    def learning_rates(self) -> dict[str, float]:
        return {
            str(group.get("name", index)): float(group["lr"])
            for index, group in enumerate(self.optimizer.param_groups)
            if "lr" in group
        }

    def close(self) -> None:
        """Remove the hooks; a last check reports what the steps since the previous one left."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._losses or self._grad_norm is not None:
            self.check()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- hooks -----------------------------------------------------------------------------------
    def _check_due(self) -> bool:
        return self._steps_since_check + 1 >= self.check_every or (
            self._clock() - self._last_check >= self.check_every_seconds
        )

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._due = self._check_due()
        if self._due:
            self._take_gradient_norm(optimizer)

    def _take_gradient_norm(self, optimizer: torch.optim.Optimizer) -> None:
        """The global norm of the gradients the optimizer is about to step with, kept on their
        device until the check reads it."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if grads:
            self._grad_norm = torch.nn.utils.get_total_norm(grads).detach().to(torch.float32)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        samples, self._samples = self._samples, 0
        self.job.record_step(samples=samples)
        self.steps += 1
        self._steps_since_check += 1
        if self._due:
            self.check()

    def _batch_loaded(self, batch: object, waited: float) -> None:
        self.job.record_data_load(waited, batches=1)
        size = self._samples_of(batch)
        if size:
            self._samples += size
            if self._hyperparameters.batch_size is None:
                self._hyperparameters = Hyperparameters(
                    batch_size=size,
                    optimizer=self._hyperparameters.optimizer,
                    precision=self._hyperparameters.precision,
                    lr_schedule=self._hyperparameters.lr_schedule,
                )
                self.job.set_hyperparameters(self._hyperparameters)


class TimedLoader(Generic[T]):
    """An iterable of batches whose every `next()` is the job's data_wait phase and whose loop
    body, until the next `next()`, is its compute phase."""

    def __init__(self, watcher: Watcher, batches: Iterable[T]) -> None:
        self._watcher, self._batches = watcher, batches

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        watcher = self._watcher
        iterator = iter(self._batches)
        # One phase block for the whole loop, switched between data_wait and compute: one clock
        # reading per switch, which also times the wait.
        block = watcher.job.phases.block(DATA_WAIT)
        try:
            waiting_since = block.opened_at
            while True:
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                loaded = block.switch(COMPUTE)
                watcher._batch_loaded(batch, loaded - waiting_since)
                yield batch
                waiting_since = block.switch(DATA_WAIT)
        finally:
            block.close()


@dataclass(frozen=True)
class RegressionQuality:
    rmse: float
    mae: float
    r2: float | None  # None: a target without variance (R squared undefined)


def regression_quality(predictions: torch.Tensor, targets: torch.Tensor) -> RegressionQuality:
    """RMSE, MAE and R squared of `predictions` against `targets` (the same shape: one row per
    sample, a column per output), computed on their device in float64 and read in one device
    sync. RMSE and MAE are over every element; R squared is each output's, averaged (as
    scikit-learn's `r2_score` does by default; an output whose target is constant scores 1 when
    predicted exactly, else 0)."""
    if not isinstance(predictions, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise TypeError("regression_quality takes the predictions and targets as tensors")
    if predictions.shape != targets.shape:
        shapes = f"{tuple(predictions.shape)} and {tuple(targets.shape)}"
        raise ValueError(f"predictions and targets must have the same shape, got {shapes}")
    if predictions.numel() == 0:
        raise ValueError("regression_quality needs at least one prediction")
    rows = predictions.shape[0] if predictions.dim() > 0 else 1
    p = predictions.detach().reshape(rows, -1).to(torch.float64)
    t = targets.detach().reshape(rows, -1).to(device=p.device, dtype=torch.float64)
    error = p - t
    residual = error.square().sum(dim=0)
    spread = (t - t.mean(dim=0)).square().sum(dim=0)
    values = torch.cat([torch.stack([error.square().mean(), error.abs().mean()]), residual, spread]).tolist()
    mse, mae = values[0], values[1]
    outputs = p.shape[1]
    per_output = []
    for res, tot in zip(values[2 : 2 + outputs], values[2 + outputs :], strict=True):
        if tot > 0:
            per_output.append(1.0 - res / tot)
        else:
            per_output.append(1.0 if res == 0 else 0.0)
    r2 = sum(per_output) / outputs if rows > 1 else None
    return RegressionQuality(rmse=math.sqrt(mse) if mse >= 0 else math.nan, mae=mae, r2=r2)


def record_regression_quality(job: JobMetrics, predictions: torch.Tensor, targets: torch.Tensor) -> RegressionQuality:
    """`regression_quality` of the validation predictions, set on the job (`set_regression_quality`)."""
    quality = regression_quality(predictions, targets)
    job.set_regression_quality(rmse=quality.rmse, mae=quality.mae, r2=quality.r2)
    return quality


def watch(job: JobMetrics, model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any) -> Watcher:
    """Report `model`'s training with `optimizer` to `job` (options: see `Watcher`)."""
    return Watcher(job, model, optimizer, **options)
