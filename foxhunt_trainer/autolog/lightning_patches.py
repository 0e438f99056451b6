"""PyTorch Lightning with no code: `MetricsCallback` added to every `Trainer`.

`pytorch_lightning.Trainer(...)` and the `lightning` package's `lightning.pytorch.Trainer` (what
`import lightning as L; L.Trainer(...)` makes: a second copy of the same classes, which calls a
callback's hooks as the first does) get the integration's callback after the program's own, and
their `fit`, `validate`, `test` and `predict` leave the optimizer steps, losses and loaders to it
(the plain PyTorch integration steps aside while they run). Every method of the callback
Lightning calls, and its checkpoint IO, is guarded (`state`): the per-batch hooks by themselves,
the others wrapped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytorch_lightning as pl

from foxhunt_trainer.autolog import job as auto_job
from foxhunt_trainer.autolog.state import STATE, guarded_subclass
from foxhunt_trainer.autolog.switches import LIGHTNING
from foxhunt_trainer.integrations.lightning import MetricsCallback, MonitoredCheckpointIO
from foxhunt_trainer.training import JobMetrics

HOOKS = (
    "on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_before_optimizer_step",
    "on_train_batch_end", "on_train_epoch_end", "on_train_end", "on_exception", "on_validation_start",
    "on_validation_end",
)  # fmt: skip


class _GuardedCheckpointIO(MonitoredCheckpointIO):
    """The strategy's checkpoint IO inside `job.checkpoint`, the save itself unguarded: the
    program's checkpoint errors stay its own, the integration's turn it off."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        saving = None
        if STATE.on(LIGHTNING):
            try:
                saving = self.job.checkpoint(
                    path, step=int(checkpoint.get("global_step", 0)), state=checkpoint.get("state_dict")
                )
                saving.__enter__()
            except Exception as error:
                STATE.failed(LIGHTNING, error)
                saving = None
        if saving is None:
            self.inner.save_checkpoint(checkpoint, path, storage_options)
            return
        try:
            self.inner.save_checkpoint(checkpoint, path, storage_options)
        except BaseException as error:
            try:
                saving.__exit__(type(error), error, error.__traceback__)
            except Exception as failure:
                STATE.failed(LIGHTNING, failure)
            raise
        try:
            saving.__exit__(None, None, None)
        except Exception as error:
            STATE.failed(LIGHTNING, error)


# The hooks Lightning calls every batch, which guard themselves (`MetricsCallback`).
SELF_GUARDED = ("on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end")


class _Callback(MetricsCallback):
    def __init__(self, job: JobMetrics) -> None:
        super().__init__(job)
        STATE.follow(LIGHTNING, self)  # `recording`: while the integration is on

    def _hook_failed(self, error: Exception) -> bool:
        STATE.failed(LIGHTNING, error)
        return True

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, MonitoredCheckpointIO):
            trainer.strategy.checkpoint_io = _GuardedCheckpointIO(self.job, io)


AutoMetricsCallback = guarded_subclass(
    _Callback, LIGHTNING, dict.fromkeys(hook for hook in ("setup", *HOOKS) if hook not in SELF_GUARDED)
)


def _with_callback(callbacks: Any, added: pl.Callback) -> list[Any]:
    if callbacks is None:
        return [added]
    if isinstance(callbacks, list | tuple):
        return [*callbacks, added]
    return [callbacks, added]  # one callback, of either package's Callback class


def _patch_init(trainer: type[pl.Trainer]) -> None:
    original = trainer.__init__

    @functools.wraps(original)
    def __init__(self: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        try:
            if STATE.on(LIGHTNING) and (auto := auto_job.current()) is not None:
                kwargs["callbacks"] = _with_callback(kwargs.get("callbacks"), AutoMetricsCallback(auto.job))
        except Exception as error:
            STATE.failed(LIGHTNING, error)
        original(self, *args, **kwargs)

    trainer.__init__ = __init__  # type: ignore[method-assign]


def _framework_run(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: pl.Trainer, *args: Any, **kwargs: Any) -> Any:
        STATE.framework_depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.framework_depth -= 1

    return run


def patch_trainer(trainer: type[pl.Trainer]) -> None:
    """Add the callback to every `trainer(...)` and mark its runs as the framework's (once a class)."""
    if getattr(trainer, "__foxhunt_autolog__", False):
        return
    _patch_init(trainer)
    for name in ("fit", "validate", "test", "predict"):
        setattr(trainer, name, _framework_run(getattr(trainer, name)))
    trainer.__foxhunt_autolog__ = True  # type: ignore[attr-defined]


def install(module: ModuleType) -> None:
    """Patch `pytorch_lightning` (the import hook calls this once it is imported)."""
    patch_trainer(pl.Trainer)
