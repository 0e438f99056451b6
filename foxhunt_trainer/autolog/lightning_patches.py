"""PyTorch Lightning with no code: `MetricsCallback` added to every `Trainer`.

`pytorch_lightning.Trainer(...)` and the `lightning` package's `lightning.pytorch.Trainer` (what
`import lightning as L; L.Trainer(...)` makes: a second copy of the same classes, which calls a
callback's hooks as the first does) get the integration's callback after the program's own (added
once the trainer is made: it knows the ranks by then), and
their `fit`, `validate`, `test` and `predict` leave the optimizer steps, losses and loaders to it
(the plain PyTorch integration steps aside while they run). Every method of the callback
Lightning calls, and its checkpoint IO, is guarded (`state`): the per-batch hooks by themselves,
the others wrapped.

Ranks: a fit started with Lightning's own launcher (`Trainer(strategy="ddp", devices=N)` run with
plain `python`: Lightning starts the other processes itself) has no RANK in its environment and no
process group when the trainer is made, but the trainer knows each process's rank and the world
size from then on; the job made with the trainer takes them (a launcher's RANK, or a process group
already made, still wins: `RankInfo.of_process`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import pytorch_lightning as pl

from foxhunt_trainer.autolog import job as auto_job
from foxhunt_trainer.autolog.state import STATE, guarded_subclass
from foxhunt_trainer.autolog.switches import LIGHTNING
from foxhunt_trainer.integrations.lightning import MetricsCallback, MonitoredCheckpointIO
from foxhunt_trainer.ranks import RANK_ENV, RankInfo
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


class FoxhuntMetricsCallback(MetricsCallback):
    """The callback added to every Trainer; Lightning's profiler report names it by its guarded
    subclass, `AutoFoxhuntMetricsCallback`."""

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
    FoxhuntMetricsCallback, LIGHTNING, dict.fromkeys(hook for hook in ("setup", *HOOKS) if hook not in SELF_GUARDED)
)


def trainer_rank(trainer: Any, environ: Mapping[str, str] | None = None) -> RankInfo | None:
    """The rank the trainer gave this process, where nothing else tells it: several processes, no
    launcher's RANK, no process group yet (Lightning's own launcher); else None."""
    env = os.environ if environ is None else environ
    dist = sys.modules.get("torch.distributed")
    if env.get(RANK_ENV, "").strip() or (dist is not None and dist.is_available() and dist.is_initialized()):
        return None
    try:
        world_size = int(trainer.world_size)
        if world_size <= 1:
            return None
        return RankInfo(
            rank=int(trainer.global_rank),
            local_rank=int(trainer.local_rank),
            world_size=world_size,
            node_rank=int(trainer.node_rank),
        )
    except (AttributeError, TypeError, ValueError):  # a trainer that does not tell: the process's own view
        return None


def _patch_init(trainer: type[pl.Trainer]) -> None:
    original = trainer.__init__

    @functools.wraps(original)
    def __init__(self: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            if STATE.on(LIGHTNING) and (auto := auto_job.current(rank=trainer_rank(self))) is not None:
                # After the program's own (Lightning puts checkpoint callbacks last when it fits).
                self.callbacks.append(AutoMetricsCallback(auto.job))  # type: ignore[attr-defined]
        except Exception as error:
            STATE.failed(LIGHTNING, error)

    trainer.__init__ = __init__  # type: ignore[method-assign]


def _framework_run(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: pl.Trainer, *args: Any, **kwargs: Any) -> Any:
        STATE.framework_started()
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.framework_ended()

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
