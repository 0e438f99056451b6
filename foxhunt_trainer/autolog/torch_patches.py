"""Plain PyTorch with no code: what `watch()` reports, from PyTorch's own global hooks.

Installed right after the program imports torch (`importer`); nothing happens until training does.

- optimizer steps: `torch.optim.optimizer.register_optimizer_step_pre_hook` / `..._post_hook`
  (every optimizer of the process). The job's optimizer is the first one that steps; another that
  steps twice in a row while it does not (the next trial, the next fold), or once after it was
  freed, takes over (so a GAN's two alternating optimizers count the first one's steps). Each
  step is `watch()`'s: `record_step` with the samples of the training batches since the previous
  step, and every `check_every` steps (50) or `check_every_seconds` (5) one check: mean loss,
  gradient norm, learning rate per parameter group, NaN and inf counted;
- the loss: the one-element tensor the program calls `backward()` on (`loss.backward()` or
  `torch.autograd.backward(loss)`; under AMP, the loss `GradScaler.scale` was given; a backward
  run inside another, as activation checkpointing does, is no loss), detached and kept on its
  device until the check sums them (no sync in the step);
- data wait vs compute: every DataLoader iterator's `__next__` (`_BaseDataLoaderIter`) is
  data_wait, the time after it compute (evaluation when gradients are off: `torch.no_grad()`);
  its batches' leading dimension are the samples (training batches only); a loop without a
  DataLoader counts the time from its first optimizer step on as compute;
- hyperparameters: batch size (the first training batch), optimizer class, parameter precision,
  the class of the LR scheduler made for the optimizer (`LRScheduler.__init__`);
- model FLOPs: the second optimizer step of the process runs under PyTorch's FlopCounterMode
  (forward, backward and the optimizer step), once, on every rank of a distributed job;
- checkpoints: `torch.save` of a module, an optimizer or a state dict (or a dict holding them)
  goes through `job.checkpoint` (timed, errors classified and re-raised as they were, non-finite
  state refused as a good save), once the job exists;
- torch.distributed (switch `distributed`): every `DistributedDataParallel` made is registered
  for per-step timing (`CollectiveTimer.register_ddp`; inside a Lightning fit too, whose callback
  times no collective), `torch.distributed.all_reduce`,
  `broadcast`, `all_gather_into_tensor` and `reduce_scatter_tensor` called by the program are
  timed; ranks from torchrun's environment, else from the process group made before the job
  (`init_process_group` made after the job's first training call: one line on stderr says the
  series keep the rank they started with, and what to do).

While Lightning's fit or SB3's learn runs, their own integrations count (`STATE.framework_depth`).
For `scaler.scale(loss).backward()` the loss recorded is the one `GradScaler.scale` was given.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data.dataloader import _BaseDataLoaderIter

from foxhunt_trainer import flops as flops_module
from foxhunt_trainer.autolog import job as auto_job
from foxhunt_trainer.autolog.state import STATE, guarded
from foxhunt_trainer.autolog.switches import DISTRIBUTED, PREFIX, TORCH
from foxhunt_trainer.checkpoints import CheckpointSave
from foxhunt_trainer.hyperparameters import UNKNOWN
from foxhunt_trainer.integrations.optimizers import learning_rates
from foxhunt_trainer.integrations.torch import _FOLD_LOSSES_AT, Watcher, batch_size_of
from foxhunt_trainer.phases import COLLECTIVE, COMPUTE, DATA_WAIT, EVALUATION, PhaseBlock
from foxhunt_trainer.training import JobMetrics

_PENDING_LOSSES = 256  # losses kept before the first optimizer step (a loop that never steps)
_PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}
# The class of the LR scheduler made for each optimizer.
SCHEDULERS: weakref.WeakKeyDictionary[torch.optim.Optimizer, str] = weakref.WeakKeyDictionary()


def _first_float_dtype(optimizer: torch.optim.Optimizer) -> torch.dtype | None:
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.is_floating_point():
                return cast(torch.dtype, parameter.dtype)
    return None


class AutoWatcher(Watcher):
    """`watch()`'s watcher for one optimizer, driven by the global hooks; holds the optimizer
    weakly, so a finished trial's model and optimizer are freed."""

    def __init__(self, job: JobMetrics, optimizer: torch.optim.Optimizer, batch_size: int | None) -> None:
        dtype = _first_float_dtype(optimizer)
        precision = _PRECISIONS.get(dtype, UNKNOWN) if dtype is not None else UNKNOWN
        super().__init__(job, torch.nn.Module(), optimizer, batch_size=batch_size, precision=precision)
        for hook in self._hooks:  # the global hooks call `_before_step` and `_after_step`
            hook.remove()
        self._hooks = []
        schedule = SCHEDULERS.get(optimizer)
        if schedule is not None:
            self._hyperparameters = replace(self._hyperparameters, lr_schedule=schedule)
            job.set_hyperparameters(self._hyperparameters)
        self._optimizer = weakref.ref(optimizer)
        self._rates: dict[str, float] = {}
        self.optimizer = cast(Any, None)
        self.model = cast(Any, None)

    def learning_rates(self) -> dict[str, float]:
        optimizer = self._optimizer()
        if optimizer is not None:
            self._rates = learning_rates([optimizer])
        return self._rates

    def is_for(self, optimizer: torch.optim.Optimizer) -> bool:
        return self._optimizer() is optimizer

    @property
    def alive(self) -> bool:
        return self._optimizer() is not None


class AutoTorch:
    """The job's plain PyTorch integration (one per process; see the module docstring)."""

    def __init__(self, job: JobMetrics) -> None:
        self.job = job
        self.watcher: AutoWatcher | None = None
        self._challenger: int | None = None
        self._challenges = 0
        self._stepping: AutoWatcher | None = None
        self._stepped: torch.optim.Optimizer | None = None  # the optimizer of the step in progress
        self._pending_losses: list[torch.Tensor] = []
        self._pending_samples = 0
        self._batch_size: int | None = None
        self._loaders: list[tuple[weakref.ref[Any], PhaseBlock]] = []
        self._flops: flops_module.FlopCount | None = None  # counting the measured step
        self._flops_dtype: torch.dtype | None = None
        self._flops_done = False
        # Without a DataLoader to tell data wait from compute, the time from the first step on is compute.
        self._step_block: PhaseBlock | None = None

    # --- optimizer steps ------------------------------------------------------------------------
    def before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        current = self.watcher
        if current is not None and current._optimizer() is optimizer:  # `_watcher_for`'s common case
            self._challenger = None
            watcher: AutoWatcher | None = current
        else:
            watcher = self._watcher_for(optimizer)
        self._stepping, self._stepped = watcher, optimizer
        if watcher is not None:
            watcher._before_step(optimizer, args, kwargs)

    def after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        watcher, self._stepping = self._stepping, None
        if watcher is None or self._stepped is not optimizer:
            return
        self._stepped = None
        watcher._after_step(optimizer, args, kwargs)
        if self._step_block is None and not self._loaders:
            self._step_block = self.job.phases.block(COMPUTE)
        if not self._flops_done:
            self._measure_flops(watcher, optimizer)

    def _watcher_for(self, optimizer: torch.optim.Optimizer) -> AutoWatcher | None:
        current = self.watcher
        if current is not None and current.is_for(optimizer):
            self._challenger = None
            return current
        if current is not None and current.alive:
            if self._challenger == id(optimizer):
                self._challenges += 1
            else:
                self._challenger, self._challenges = id(optimizer), 1
            if self._challenges < 2:
                return None
        return self._adopt(optimizer)

    def _adopt(self, optimizer: torch.optim.Optimizer) -> AutoWatcher:
        if self.watcher is not None:
            self.watcher.close()  # a last check of the steps the previous optimizer made
        watcher = AutoWatcher(self.job, optimizer, self._batch_size)
        for loss in self._pending_losses:
            watcher.record_loss(loss)
        watcher._samples += self._pending_samples
        self._pending_losses, self._pending_samples = [], 0
        self.watcher, self._challenger = watcher, None
        return watcher

    def _measure_flops(self, watcher: AutoWatcher, optimizer: torch.optim.Optimizer) -> None:
        if self._flops_done:
            return
        if self._flops is None:
            # (In a distributed job too: every rank counts its own step, the collectives of
            # DistributedDataParallel count no FLOPs.)
            self._flops_dtype = _first_float_dtype(optimizer)
            self._flops = flops_module.FlopCount()
            return
        self._flops_done = True
        counter, self._flops = self._flops, None
        counted = counter.stop()
        if counted > 0 and self._flops_dtype is not None:
            try:
                precision = flops_module.precision_of(self._flops_dtype)
            except ValueError:  # fp64: not a precision model FLOPs are reported in
                return
            self.job.set_model_flops(counted, precision)

    # --- the loss -------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor) -> None:
        if loss.numel() != 1:
            return
        if _scaled[0]:
            loss = getattr(loss, _UNSCALED, loss)  # GradScaler's scaled loss: the loss it scaled
        watcher = self.watcher
        if watcher is not None:
            watcher.record_loss(loss)
        else:
            self._pending_losses.append(loss.detach())
            del self._pending_losses[:-_PENDING_LOSSES]

    # --- DataLoader iteration -------------------------------------------------------------------
    def next_started(self, iterator: object) -> tuple[PhaseBlock, float]:
        loaders = self._loaders
        for index in range(len(loaders) - 1, -1, -1):
            if loaders[index][0]() is iterator:
                if index + 1 < len(loaders):  # inner loops left early: their blocks end
                    loaders[index + 1][1].close()
                    del loaders[index + 1 :]
                block = loaders[index][1]
                return block, block.switch(DATA_WAIT)
        if self._step_block is not None:  # a DataLoader tells data wait from compute from now on
            self._step_block.close()
            self._step_block = None
        while loaders and loaders[-1][0]() is None:  # iterators gone (a loop left early)
            loaders.pop()[1].close()
        block = self.job.phases.block(DATA_WAIT)
        loaders.append((weakref.ref(iterator), block))
        return block, block.opened_at

    def next_done(self, block: PhaseBlock, waiting_since: float, batch: object) -> None:
        training = torch.is_grad_enabled()
        loaded = block.switch(COMPUTE if training else EVALUATION)
        if not training:
            return
        watcher = self.watcher
        if watcher is not None:
            watcher._batch_loaded(batch, loaded - waiting_since)
            return
        self.job.record_data_load(loaded - waiting_since, batches=1)
        size = batch_size_of(batch)
        if size:
            self._pending_samples += size
            self._batch_size = self._batch_size or size

    def exhausted(self, iterator: object) -> None:
        loaders = self._loaders
        for index in range(len(loaders) - 1, -1, -1):
            if loaders[index][0]() is iterator:
                loaders[index][1].close()
                del loaders[index:]
                return

    # --- checkpoints ----------------------------------------------------------------------------
    def checkpoint(self, state: object, file: object) -> CheckpointSave | None:
        if not is_training_state(state):
            return None
        if isinstance(file, str | os.PathLike):
            path = os.fsdecode(os.fspath(file))
        else:
            name = getattr(file, "name", None)
            path = name if isinstance(name, str) else "<stream>"
        save = self.job.checkpoint(path, step=self.job.steps_done, state=state)
        save.__enter__()
        return save

    def close(self) -> None:
        """At the job's end: the last check, open loader blocks closed."""
        if self._flops is not None:
            counter, self._flops = self._flops, None
            counter.stop()
        if self.watcher is not None:
            self.watcher.close()
        for _, block in reversed(self._loaders):
            block.close()
        self._loaders = []
        if self._step_block is not None:
            self._step_block.close()
            self._step_block = None


def is_training_state(state: object, depth: int = 0) -> bool:
    """A module, an optimizer, a state dict, or a dict holding one (`{"model": ..., "epoch": 3}`)."""
    if isinstance(state, torch.nn.Module | torch.optim.Optimizer):
        return True
    if isinstance(state, Mapping) and depth < 2:
        for value in list(state.values())[:64]:
            if isinstance(value, torch.Tensor) or is_training_state(value, depth + 1):
                return True
        return "param_groups" in state and "state" in state
    return False


_made: list[AutoTorch] = []  # the process's one AutoTorch, once made


def _auto_torch(create: bool = True) -> AutoTorch | None:
    """The job's torch integration (None while the program instruments itself; `create`: make
    the job now if this is the first sign of training)."""
    if _made and not STATE.manual:
        return _made[0]
    auto = auto_job.current() if create else auto_job.existing()
    if auto is None:
        return None
    made = cast(AutoTorch, auto.extension("torch", lambda: AutoTorch(auto.job)))
    _made[:] = [made]
    return made


# --- the patches ------------------------------------------------------------------------------
# Each first reads `STATE.plain_torch` (the torch integration on, no framework's fit running; off
# once the program instruments itself). They run several times a step: `_auto_torch()` is inlined
# where they are hot (`_made[0] if _made`, the integration once made).
# The two global optimizer step hooks guard themselves (`guarded`, inlined: a wrapper each was
# an extra call at every step).
# Each also writes out the common case of the `AutoTorch` and `Watcher` methods it calls, so a
# step makes no more Python calls than `watch()`'s own hooks do: the job's watcher's optimizer
# stepping with no check due (the pre-step hook: `Watcher._before_step`), that step ending with
# the FLOPs measured and the phase block in place (the post-step hook: `Watcher._after_step`),
# the loss of a program without GradScaler (`backward`: `AutoTorch.backward`, `record_loss`).
def _before_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    if not STATE.plain_torch:
        return
    try:
        torch_job = _made[0] if _made else _auto_torch()
        if torch_job is None:
            return
        current = torch_job.watcher
        if current is not None and current._optimizer() is optimizer:
            torch_job._challenger = None
            torch_job._stepping, torch_job._stepped = current, optimizer
            # `current._before_step`: whether the step ends with a check (`_check_due`)
            due = current._steps_since_check + 1 >= current.check_every or (
                current._clock() - current._last_check >= current.check_every_seconds
            )
            current._due = due
            if due:
                current._take_gradient_norm(optimizer)
        else:
            torch_job.before_step(optimizer, args, kwargs)
    except Exception as error:
        STATE.failed(TORCH, error)


def _after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    if not STATE.plain_torch:
        return
    try:
        torch_job = _made[0] if _made else _auto_torch()
        if torch_job is None:
            return
        watcher = torch_job._stepping
        if (
            watcher is not None
            and torch_job._stepped is optimizer
            and torch_job._flops_done
            and (torch_job._loaders or torch_job._step_block is not None)
        ):
            torch_job._stepping = torch_job._stepped = None
            # `watcher._after_step`
            samples, watcher._samples = watcher._samples, 0
            watcher.job.record_step(samples=samples)
            watcher.steps += 1
            watcher._steps_since_check += 1
            if watcher._due:
                watcher.check()
        else:
            torch_job.after_step(optimizer, args, kwargs)
    except Exception as error:
        STATE.failed(TORCH, error)


_SEQUENCES = (list, tuple)
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
# The autograd graph task running on this thread (-1: none): a `torch.autograd.backward` made
# inside a backward pass (activation checkpointing's recomputation calls it again) is not the
# program's loss.
_graph_task = torch._C._current_graph_task_id


def _patch_backward() -> None:
    """`loss.backward()` and `torch.autograd.backward(loss)` (or `([loss])`) record the loss once:
    `Tensor.backward` calls `torch.autograd.backward(self, ...)`, so that one function is patched."""
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if STATE.plain_torch and _graph_task() == -1:
            try:
                loss = tensors[0] if isinstance(tensors, _SEQUENCES) and len(tensors) == 1 else tensors
                if isinstance(loss, _Tensor):
                    torch_job = _made[0] if _made else _auto_torch()
                    if torch_job is not None:
                        watcher = torch_job.watcher
                        if watcher is not None and not _scaled[0] and loss.numel() == 1:
                            # `torch_job.backward(loss)`: `watcher.record_loss(loss)`
                            kept = watcher._loss_tensors
                            kept.append(loss.detach())
                            if len(kept) >= _FOLD_LOSSES_AT:
                                watcher._fold_losses()
                            watcher._losses += 1
                        else:
                            torch_job.backward(loss)
            except Exception as error:
                STATE.failed(TORCH, error)
        return original(tensors, *args, **kwargs)

    torch.autograd.backward = backward


def _patch_loader() -> None:
    original = _BaseDataLoaderIter.__next__

    @functools.wraps(original)
    def __next__(self: _BaseDataLoaderIter) -> Any:
        if not STATE.plain_torch:
            return original(self)
        # `next_started` and `next_done` have their common case written out here (the innermost
        # loop's iterator again; a training batch with the job's watcher in place).
        block: PhaseBlock | None = None
        waiting_since = 0.0
        try:
            torch_job = _made[0] if _made else _auto_torch()
            if torch_job is not None:
                loaders = torch_job._loaders
                if loaders and loaders[-1][0]() is self:
                    waiting_since = loaders[-1][1].switch(DATA_WAIT)
                    block = loaders[-1][1]
                else:
                    block, waiting_since = torch_job.next_started(self)
        except Exception as error:
            STATE.failed(TORCH, error)
            block = None
        if block is None:
            return original(self)
        try:
            batch = original(self)
        except StopIteration:
            try:
                torch_job.exhausted(self)  # type: ignore[union-attr]
            except Exception as error:
                STATE.failed(TORCH, error)
            raise
        try:
            watcher = torch_job.watcher  # type: ignore[union-attr]
            if watcher is not None and _grad_enabled():
                watcher._batch_loaded(batch, block.switch(COMPUTE) - waiting_since)
            else:
                torch_job.next_done(block, waiting_since, batch)  # type: ignore[union-attr]
        except Exception as error:
            STATE.failed(TORCH, error)
        return batch

    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]


def _patch_save() -> None:
    original = torch.save

    @functools.wraps(original)
    def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        saving = None
        if STATE.plain_torch:
            try:
                torch_job = _auto_torch(create=False)
                if torch_job is not None:
                    saving = torch_job.checkpoint(obj, f)
            except Exception as error:
                STATE.failed(TORCH, error)
        if saving is None:
            return original(obj, f, *args, **kwargs)
        try:
            original(obj, f, *args, **kwargs)
        except BaseException as error:
            try:
                saving.__exit__(type(error), error, error.__traceback__)
            except Exception as failure:
                STATE.failed(TORCH, failure)
            raise
        try:
            saving.__exit__(None, None, None)
        except Exception as error:
            STATE.failed(TORCH, error)

    torch.save = save


_UNSCALED = "_foxhunt_unscaled_loss"
_scaled = [False]  # whether GradScaler has scaled a loss in this process (its losses carry _UNSCALED)


def _patch_grad_scaler() -> None:
    from torch.amp import GradScaler

    original = GradScaler.scale

    @functools.wraps(original)
    def scale(self: GradScaler, outputs: Any) -> Any:
        scaled = original(self, outputs)
        if scaled is not outputs and isinstance(outputs, torch.Tensor) and STATE.plain_torch:
            try:
                setattr(scaled, _UNSCALED, outputs.detach())
                _scaled[0] = True
            except Exception as error:
                STATE.failed(TORCH, error)
        return scaled

    GradScaler.scale = scale  # type: ignore[method-assign]


def _patch_schedulers() -> None:
    from torch.optim.lr_scheduler import LRScheduler

    original = LRScheduler.__init__

    @functools.wraps(original)
    def __init__(self: LRScheduler, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _remember_scheduler(self)

    LRScheduler.__init__ = __init__  # type: ignore[method-assign]


@guarded(TORCH)
def _remember_scheduler(scheduler: Any) -> None:
    optimizer = getattr(scheduler, "optimizer", None)
    if isinstance(optimizer, torch.optim.Optimizer):
        SCHEDULERS[optimizer] = type(scheduler).__name__


# --- torch.distributed ------------------------------------------------------------------------
def _timer() -> Any:
    if not STATE.on(DISTRIBUTED):
        return None
    auto = auto_job.current()
    if auto is None:
        return None
    from foxhunt_trainer.integrations.torch_distributed import instrument_rank

    return auto.extension("collectives", lambda: instrument_rank(auto.job))


def _patch_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__

    @functools.wraps(original)
    def __init__(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _register_ddp(self)

    DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]


@guarded(DISTRIBUTED)
def _register_ddp(ddp: Any) -> None:
    # Inside a framework's fit too: Lightning's DDP strategy wraps the model, and its callback
    # times no collective (without this a rank waiting for the all-reduce counts it as compute,
    # and the straggler alert cannot tell the slow rank).
    timer = _timer()
    if timer is not None:
        timer.register_ddp(ddp)


def _patch_init_process_group() -> None:
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        _process_group_made()
        return made

    dist.init_process_group = init_process_group


@guarded(DISTRIBUTED)
def _process_group_made() -> None:
    """The process joined a process group: a job made before (its first training call came first,
    with no launcher's RANK to tell the rank) already labels its series rank 0 of 1, and they
    cannot change; say so once, with what to do, rather than serve the wrong rank in silence."""
    auto = auto_job.existing()
    if auto is None:
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    labelled = auto.job.rank
    if (labelled.rank, labelled.world_size) == (rank, world_size):
        return
    sys.stderr.write(
        f"{PREFIX}: this process joined its process group as rank {rank} of {world_size} after its "
        f"job had started (at its first training call), so the job's series say rank {labelled.rank} "
        f"of {labelled.world_size}; call init_process_group before the first DataLoader batch or "
        "optimizer step, or start the ranks with torchrun (foxhunt-torchrun), which sets RANK and "
        "WORLD_SIZE\n"
    )
    sys.stderr.flush()


# name -> (the kind counted, the parameter whose tensor's bytes count)
_COLLECTIVES: dict[str, tuple[str, str]] = {
    "all_reduce": ("all_reduce", "tensor"),
    "broadcast": ("broadcast", "tensor"),
    "all_gather_into_tensor": ("all_gather", "output_tensor"),
    "reduce_scatter_tensor": ("reduce_scatter", "input"),
}


def _patch_collectives() -> None:
    import inspect

    from foxhunt_trainer.integrations.torch_distributed import TimedWork, message_bytes

    def patched(name: str, kind: str, sized: str) -> Callable[..., Any]:
        original = getattr(dist, name)
        signature = inspect.signature(original)

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            timer, scope, nbytes, async_op = None, None, 0, False
            if STATE.framework_depth == 0:
                try:
                    timer = _timer()
                    if timer is not None:
                        bound = signature.bind(*args, **kwargs).arguments
                        nbytes = message_bytes(bound[sized])
                        async_op = bool(bound.get("async_op", False))
                        if not async_op:
                            scope = timer.job.phase(COLLECTIVE)
                            scope.__enter__()
                        timer.counts.launched(kind)
                except Exception as error:
                    STATE.failed(DISTRIBUTED, error)
                    timer = None
            if timer is None:
                return original(*args, **kwargs)
            try:
                work = original(*args, **kwargs)
            except BaseException:
                _completed(timer, kind, nbytes, scope)
                raise
            if not async_op:
                _completed(timer, kind, nbytes, scope)
                return work
            try:
                return TimedWork(work, timer, kind, nbytes) if work is not None else work
            except Exception as error:
                STATE.failed(DISTRIBUTED, error)
                return work

        return collective

    for name, (kind, sized) in _COLLECTIVES.items():
        setattr(dist, name, patched(name, kind, sized))


def _completed(timer: Any, kind: str, nbytes: int, scope: Any) -> None:
    try:
        timer.counts.completed(kind, nbytes)
        if scope is not None:
            scope.__exit__(None, None, None)
    except Exception as error:
        STATE.failed(DISTRIBUTED, error)


def install(module: ModuleType) -> None:
    """Patch torch (called by the import hook once torch is imported)."""
    if STATE.switches.on(TORCH):
        register_optimizer_step_pre_hook(_before_step)
        register_optimizer_step_post_hook(_after_step)
        _patch_backward()
        _patch_loader()
        _patch_save()
        _patch_schedulers()
        _patch_grad_scaler()
    if STATE.switches.on(DISTRIBUTED) and dist.is_available():
        _patch_ddp()
        _patch_collectives()
        _patch_init_process_group()
