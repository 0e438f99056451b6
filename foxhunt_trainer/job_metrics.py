"""A training job's metrics (`JobMetrics`): steps and phases, progress, NaN and failure counts,
checkpoints and resumes, data loading, quality, hyperparameters and the end of the run, each written
to the label children `TrainingMetrics.start_job` created for the job (see foxhunt_trainer.registry)."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry

from foxhunt_trainer import errors, gpu_memory, gpus, hyperparameters
from foxhunt_trainer import flops as flops_module
from foxhunt_trainer.checkpoints import WEIGHTS, CheckpointSave, GoodCheckpoint
from foxhunt_trainer.errors import CHECKPOINT_ERROR_TYPES, FAILURE_ERROR_TYPES
from foxhunt_trainer.phases import COMPUTE, IDLE, LOST_WORK, STARTUP, PhaseClock
from foxhunt_trainer.ranks import RankInfo
from foxhunt_trainer.reinforcement import RlMetrics
from foxhunt_trainer.search import StudyMetrics
from foxhunt_trainer.summary import RunReporter, RunState
from foxhunt_trainer.tallies import StepTally
from foxhunt_trainer.termination import HANDLER as SIGTERM_HANDLER
from foxhunt_trainer.trace_context import trace_exemplar

if TYPE_CHECKING:
    from foxhunt_trainer.registry import TrainingMetrics

LOG = logging.getLogger("foxhunt_trainer.training")  # the name it has always logged under
T = TypeVar("T")

# Label values created (at 0) when a job starts; others still work but appear at their first event.
LOSS, VALIDATION_LOSS, GRADIENT, ACTIVATION = "loss", "validation_loss", "gradient", "activation"
NAN_TENSOR_TYPES: tuple[str, ...] = (LOSS, VALIDATION_LOSS, GRADIENT, ACTIVATION, WEIGHTS)
JOB_STATUSES: tuple[str, ...] = ("pending", "running", "completed", "failed", "stopped", "paused")
FINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "stopped"})


def _check_seconds(value: float, name: str) -> float:
    """A duration to observe: finite and not negative. A NaN or infinity would make the histogram's
    sum NaN for the rest of the job (and OpenMetrics parsers refuse the page), so it is refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not 0 <= value < math.inf:  # NaN fails too
        raise ValueError(f"{name} must be a finite number of seconds, at least 0, got {value!r}")
    return float(value)


def _check_count(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is a count of at least 0, got {value!r}")
    return value


def _check_status(status: str) -> str:
    if status not in JOB_STATUSES:
        raise ValueError(f"unknown job status {status!r}; expected one of {JOB_STATUSES}")
    return status


def _check_uuids(uuids: Sequence[str]) -> tuple[str, ...]:
    bad = [u for u in uuids if not gpus.is_device_uuid(u)]
    if bad:
        raise ValueError(f"GPU UUIDs start with 'GPU-' (a MIG device's with 'MIG-'), as NVML reports them, got {bad}")
    return tuple(uuids)


class JobMetrics:
    """Records one training job's metrics; every method is safe to call from any thread."""

    def __init__(self, owner: TrainingMetrics, model_type: str, job_id: str, rank: RankInfo | None = None) -> None:
        self._m = owner
        self.model_type = model_type
        self.job_id = job_id
        self.rank = rank if rank is not None else RankInfo()
        self.status = "pending"
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._previous_loss: float | None = None
        self.gpu_uuids: tuple[str, ...] = ()
        self.phases = PhaseClock(STARTUP)
        self.tally = StepTally(self._job, self.rank_labels)
        self._past_startup = False
        # {GPU UUID: bytes} this rank's allocator holds, read at scrape time (gpu_memory).
        self.gpu_memory_source: gpu_memory.MemorySource | None = None
        self._gpu_memory_given = False
        self.steps_done = 0
        self._lost_work_until: int | None = None
        self._rl: RlMetrics | None = None
        self._studies: dict[str, StudyMetrics] = {}
        self.last_good_checkpoint: GoodCheckpoint | None = None
        self._suspect_state = False
        self.failure: BaseException | None = None
        # Model FLOPs of one step and the precision they run in (set_model_flops / measure_model_flops).
        self.model_flops_per_step: int | None = None
        self.model_flops_precision: str | None = None
        self._hyperparameter_labels: dict[str, str] | None = None
        self._at_finish: list[Callable[[], None]] = []
        # Children of the series an integration sets every check or update, looked up once
        # (prometheus-client's `labels()` costs microseconds a call).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # What the progress lines and the end-of-run summary read (foxhunt_trainer.summary); none
        # of it changes per step.
        self.reporter: RunReporter | None = None
        self.epoch: int | None = None
        self.epochs_planned: int | None = None
        self.steps_planned: int | None = None
        self._progress_percent: float | None = None
        self.folds_planned = 1
        self._folds_done = 0
        self._nan_events: dict[str, int] = {}
        self._rollbacks = 0
        self._checkpoints_saved = 0
        self._checkpoint_failures = 0
        self._checkpoint_bytes = 0
        self._checkpoint_seconds = 0.0

    # --- the job as a context manager ---------------------------------------------------------
    def __enter__(self) -> JobMetrics:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.finished:
            return
        stopped_from_outside = SIGTERM_HANDLER.received  # preempted, drained, deleted
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            self.finish("stopped" if stopped_from_outside else "completed")
        elif isinstance(exc, KeyboardInterrupt) or (stopped_from_outside and isinstance(exc, SystemExit)):
            self.finish("stopped")
        else:
            self.fail(exc)

    def fail(self, error: BaseException) -> str:
        """The job ended with `error`: counts it by error type, finishes the job "failed";
        returns the error type (`errors.failure_type`)."""
        error_type = errors.failure_type(error)
        self.failure = error
        self.record_failure(error_type)
        LOG.error(
            "training job failed",
            extra={**self._job, "error_type": error_type, "error": repr(error)},
        )
        self.finish("failed")
        return error_type

    def _child(self, family: Any, *extra: str) -> Any:
        """`family`'s child for this job (and the values of its further labels, in order)."""
        key = (id(family), extra)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(self.model_type, self.job_id, *extra)
        return child

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def _job(self) -> dict[str, str]:
        return {"model_type": self.model_type, "job_id": self.job_id}

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the job's metrics are on (collectors of the job's extensions register here)."""
        return self._m.registry

    @property
    def rank_labels(self) -> dict[str, str]:
        """The labels of this process's per-rank series (`catalog.RANK_JOB`)."""
        return {"model_type": self.model_type, "job_id": self.job_id, "rank": self.rank.label}

    @property
    def rl(self) -> RlMetrics:
        """The job's reinforcement-learning series (exploration, Q-values, policy updates, episodes)."""
        with self._lock:
            if self._rl is None:
                self._rl = RlMetrics(self._m.rl, self.model_type, self.job_id)
            return self._rl

    def study(self, name: str) -> StudyMetrics:
        """The series of the hyperparameter-search study `name` this job runs trials of."""
        with self._lock:
            if name not in self._studies:
                self._studies[name] = StudyMetrics(self._m.search, self.model_type, self.job_id, name)
            return self._studies[name]

    def create_children(self, *, folds_planned: int, workers: int) -> None:
        m, job = self._m, self._job
        self.folds_planned = folds_planned
        for tensor_type in NAN_TENSOR_TYPES:
            m.nan_count.labels(**job, tensor_type=tensor_type)
        for error_type in CHECKPOINT_ERROR_TYPES:
            m.checkpoint_failures.labels(**job, error_type=error_type)
        for error_type in FAILURE_ERROR_TYPES:
            m.failures.labels(**job, error_type=error_type)
        for per_job in (m.gradient_explosions, m.checkpoint_saves, m.folds_completed, m.rollbacks):
            per_job.labels(**job)
        for histogram in (m.iteration_seconds, m.checkpoint_duration):
            histogram.labels(**job)
        for status in sorted(FINAL_STATUSES):
            # At count 0 from the start: the finished job's observation is an increase rate() sees.
            m.job_duration.labels(model_type=self.model_type, status=status)
        m.resumed.labels(**job).set(0)  # a fresh start until `record_resume`
        m.job_start_time.labels(**job).set(time.time() - (time.monotonic() - self._started))
        m.progress_percent.labels(**job).set(0)
        m.current_epoch.labels(**job).set(0)
        m.folds_planned.labels(**job).set(folds_planned)
        m.active_workers.labels(**job).set(workers)
        ranked = self.rank_labels
        m.checkpoint_written.labels(**ranked)
        m.rank_info.labels(
            **ranked,
            local_rank=str(self.rank.local_rank),
            node_rank=str(self.rank.node_rank),
            world_size=str(self.rank.world_size),
        ).set(1)

    def set_gpus(self, uuids: Sequence[str]) -> None:
        """The GPUs (NVML UUIDs) the job holds: one `ml_training_job_gpu_info` series each."""
        uuids = _check_uuids(uuids)
        info = self._m.job_gpu_info
        for uuid in self.gpu_uuids:
            if uuid not in uuids:
                info.remove(self.model_type, self.job_id, uuid)
        self.gpu_uuids = tuple(dict.fromkeys(uuids))
        for uuid in self.gpu_uuids:
            info.labels(**self._job, uuid=uuid).set(1)
        if self.gpu_uuids and not self._gpu_memory_given:
            self.gpu_memory_source = gpu_memory.torch_reserved_memory(self.gpu_uuids)

    def track_gpu_memory(self, source: gpu_memory.MemorySource | None) -> None:
        """Where this rank's device memory per GPU comes from ({UUID: bytes} at every scrape; None:
        none reported). The default, for a job holding GPUs, is PyTorch's reserved memory."""
        self.gpu_memory_source = source
        self._gpu_memory_given = True

    # --- progress -----------------------------------------------------------------------------
    def record_training_iteration(
        self, epoch: int, train_loss: float, val_loss: float | None, duration_secs: float
    ) -> None:
        """One epoch (or iteration) done: losses, epoch number, duration, speed and convergence.

        A non-finite loss (NaN or infinity) counts in `ml_training_nan_count` by itself
        (`tensor_type` "loss" or "validation_loss"): the script needs no NaN check of its own.
        `val_loss` None: no validation this epoch. Called inside a span, the duration's bucket
        carries that span's trace ID as an exemplar."""
        duration_secs = _check_seconds(duration_secs, "duration_secs")
        m, child = self._m, self._child
        child(m.loss).set(train_loss)
        self.check_finite(train_loss, LOSS)
        if val_loss is not None:
            child(m.validation_loss).set(val_loss)
            self.check_finite(val_loss, VALIDATION_LOSS)
        child(m.current_epoch).set(epoch)
        self.epoch = epoch
        child(m.iteration_seconds).observe(duration_secs, trace_exemplar())
        if duration_secs > 0:
            child(m.epochs_per_second).set(1.0 / duration_secs)
        with self._lock:
            previous, self._previous_loss = self._previous_loss, train_loss
        if previous is not None and math.isfinite(previous) and math.isfinite(train_loss):
            child(m.convergence_rate).set(train_loss - previous)

    def check_finite(self, value: float, tensor_type: str = LOSS) -> bool:
        """Counts a NaN or infinite `value` as a NaN detection of `tensor_type`; returns whether
        `value` is finite."""
        if math.isfinite(value):
            if tensor_type == LOSS:
                with self._lock:
                    self._suspect_state = False  # training recovered (a skipped step)
            return True
        self.record_nan_detection(tensor_type)
        return False

    def record_step(self, samples: int = 0, tokens: int = 0, flops: float | None = None, *, count: int = 1) -> int:
        """One optimizer step done by this rank (with the samples and tokens it consumed); returns
        the rank's step count. The first step ends the job's start-up: from then on, time in no
        named phase counts as idle. `count` records that many steps at once, with the samples and
        tokens of them all (a framework integration that hands its steps over in batches).

        The step's model FLOPs count in `ml_training_model_flops_total`: `flops` where the caller
        knows them for this step (a step whose size varies), else the job's FLOPs per step
        (`set_model_flops` or `measure_model_flops`), else none; `count` steps count `count` times
        as many."""
        if samples < 0 or tokens < 0:
            raise ValueError(f"samples and tokens of a step are counts of at least 0, got {samples} and {tokens}")
        if count < 1:
            raise ValueError(f"count is a number of steps of at least 1, got {count}")
        step_flops = self.model_flops_per_step if flops is None else flops_module.check_flops(flops)
        precision = self.model_flops_precision
        if step_flops is not None and precision is None:
            raise ValueError("a step's FLOPs need the model's precision: call set_model_flops first")
        self.tally.step(samples, tokens, None if step_flops is None else step_flops * count, precision, count)
        with self._lock:
            self.steps_done += count
            done = self.steps_done
            redone = self._lost_work_until is not None and done >= self._lost_work_until
            if redone:
                self._lost_work_until = None
            first, self._past_startup = not self._past_startup, True
        if redone:
            self.phases.substitute(COMPUTE, None)
        if first and self.phases.base == STARTUP:
            self.phases.set_base(IDLE)
        return done

    def set_model_flops(self, flops_per_step: float | None, precision: str) -> None:
        """Declare the model FLOPs of one training step (forward and backward: about 6 x parameters x
        tokens for a transformer) and the precision its matrix multiplies run in (fp32, tf32, bf16,
        fp16, fp8): every `record_step` then counts them. None keeps the precision for per-step
        FLOPs given to `record_step`."""
        precision = flops_module.check_precision(precision)
        per_step = None if flops_per_step is None else flops_module.check_flops(flops_per_step)
        with self._lock:
            self.model_flops_per_step, self.model_flops_precision = per_step, precision
        self.tally.declare_precision(precision)

    def measure_model_flops(
        self, step: Callable[..., T], *args: Any, precision: str | None = None, model: Any = None, **kwargs: Any
    ) -> T:
        """Run one real training step, `step(*args, **kwargs)`, under PyTorch's FLOP counter and take
        what it counted as the job's FLOPs per step; returns the step's result. The precision is
        `precision`, else that of `model`'s parameters (`flops.model_precision`)."""
        if precision is None and model is None:
            raise ValueError("measure_model_flops needs the precision or the model to read it from")
        result, counted = flops_module.measure_step_flops(step, *args, **kwargs)
        self.set_model_flops(counted.flops, precision or flops_module.model_precision(model))
        return result

    def phase(self, phase: str) -> AbstractContextManager[None]:
        """`with job.phase("checkpoint"):` counts the block's wall time in that phase
        (`foxhunt_trainer.phases.PHASES`); the previous phase resumes after it."""
        return self.phases.phase(phase)

    def mark_lost_work(self, until_step: int) -> None:
        """The job went back (a rollback to an earlier checkpoint, or a restart from one) and will
        redo steps up to `until_step` (its step count before going back): until this rank's step
        count reaches it again, its compute time counts as lost work."""
        with self._lock:
            if until_step <= self.steps_done:
                return
            self._lost_work_until = until_step
        self.phases.substitute(COMPUTE, LOST_WORK)

    def rewind_steps(self, to_step: int) -> None:
        """Set this rank's step count back to `to_step` (the step of the checkpoint it resumed
        from); the exported step counter keeps growing, as counters do."""
        if to_step < 0:
            raise ValueError(f"a step count is at least 0, got {to_step}")
        with self._lock:
            self.steps_done = to_step

    def set_progress(self, percent: float) -> None:
        if not 0 <= percent <= 100:
            raise ValueError(f"progress is a percentage 0-100, got {percent}")
        self._m.progress_percent.labels(**self._job).set(percent)
        self._progress_percent = float(percent)

    def set_planned(self, *, steps: int | None = None, epochs: int | None = None) -> None:
        """The run's planned length (optimizer steps, epochs): the progress lines show it and the
        time left at the current pace. None leaves a value as it was."""
        if steps is not None:
            self.steps_planned = _check_count(steps, "steps")
        if epochs is not None:
            self.epochs_planned = _check_count(epochs, "epochs")

    # --- NaN and errors -------------------------------------------------------------------------
    def record_nan_detection(self, tensor_type: str = LOSS) -> None:
        """Non-finite values found in a tensor of `tensor_type` (loss, validation_loss, gradient,
        activation, weights): counted in `ml_training_nan_count`."""
        self._m.nan_count.labels(**self._job, tensor_type=tensor_type).inc()
        with self._lock:
            self._suspect_state = True
            self._nan_events[tensor_type] = self._nan_events.get(tensor_type, 0) + 1

    def record_rollback(self) -> None:
        """One rollback to the last good checkpoint (`ml_training_rollbacks_total`)."""
        self._m.rollbacks.labels(**self._job).inc()
        with self._lock:
            self._rollbacks += 1

    def record_gradient_explosion(self) -> None:
        self._m.gradient_explosions.labels(**self._job).inc()

    def record_failure(self, error_type: str) -> None:
        """A training failure by type (`FAILURE_ERROR_TYPES`: nan, oom, timeout, config, io, exception)."""
        if error_type not in FAILURE_ERROR_TYPES:
            raise ValueError(f"unknown failure error type {error_type!r}; expected one of {FAILURE_ERROR_TYPES}")
        self._m.failures.labels(**self._job, error_type=error_type).inc()

    # --- checkpoints ------------------------------------------------------------------------------
    def checkpoint(
        self, path: str | os.PathLike[str], *, step: int, state: object = None, suppress_errors: bool = False
    ) -> CheckpointSave:
        """`with job.checkpoint(path, step=step, state=model.state_dict()) as ckpt:` save inside the
        block: timed, errors classified and counted, non-finite state refused as a good save
        (`foxhunt_trainer.checkpoints`). A good save sets `last_good_checkpoint`."""
        return CheckpointSave(self, path, step=step, state=state, suppress_errors=suppress_errors)

    def record_checkpoint_save(
        self, success: bool, duration: float, size: int | None, error_type: str | None = None
    ) -> None:
        """A checkpoint save attempt; a failed one counts under `error_type` (default io_error).
        `size` None: unknown (the size gauge keeps its value).

        Called inside a span, a successful save's duration carries that span's trace ID as an exemplar."""
        m, job = self._m, self._job
        duration = _check_seconds(duration, "duration")
        if success:
            m.checkpoint_saves.labels(**job).inc()
            m.checkpoint_duration.labels(**job).observe(duration, trace_exemplar())
            if size is not None:
                m.checkpoint_size.labels(**job).set(size)
                m.checkpoint_written.labels(**self.rank_labels).inc(size)
            with self._lock:
                self._checkpoints_saved += 1
                self._checkpoint_bytes += size or 0
                self._checkpoint_seconds += duration
        else:
            error_type = error_type or errors.CHECKPOINT_IO
            if error_type not in CHECKPOINT_ERROR_TYPES:
                raise ValueError(
                    f"unknown checkpoint error type {error_type!r}; expected one of {CHECKPOINT_ERROR_TYPES}"
                )
            m.checkpoint_failures.labels(**job, error_type=error_type).inc()
            with self._lock:
                self._checkpoint_failures += 1

    def record_good_checkpoint(self, checkpoint: GoodCheckpoint) -> None:
        """The checkpoint a rollback would restore: `last_good_checkpoint`, and its step and time
        as gauges."""
        with self._lock:
            self.last_good_checkpoint = checkpoint
            self._suspect_state = False
        self._m.checkpoint_last_good_step.labels(**self._job).set(checkpoint.step)
        self._m.checkpoint_last_good_time.labels(**self._job).set(checkpoint.time)

    def record_resume(self, checkpoint: GoodCheckpoint) -> None:
        """This process resumed the job from `checkpoint` (a restarted pod): its step count goes
        to the checkpoint's, it is the last good checkpoint, and `ml_training_resumed` is 1 (a
        restarted pod: what the alert on a job that keeps restarting counts; a gauge, not a counter,
        because the resume comes before the first scrape, where `increase()` cannot see it)."""
        self.rewind_steps(checkpoint.step)
        self.record_good_checkpoint(checkpoint)
        self._m.resumed.labels(**self._job).set(1)

    @property
    def suspect_state(self) -> bool:
        """Whether the training state is suspect: a NaN or infinity was counted after the latest
        finite loss and the latest good checkpoint (what judges a save made without its state)."""
        with self._lock:
            return self._suspect_state

    # --- data pipeline ------------------------------------------------------------------------------
    def record_data_load(self, seconds: float, batches: int = 0) -> None:
        """One data load that took `seconds` (`ml_training_data_loading_seconds`) and delivered
        `batches` batches (`ml_training_data_batches_total`)."""
        self.tally.data_load(_check_seconds(seconds, "seconds"), _check_count(batches, "batches"))

    def record_batches(self, count: int = 1) -> None:
        self.tally.add_batches(_check_count(count, "count"))

    def record_feature_engineering_error(self, error_type: str) -> None:
        self._m.feature_errors.labels(model_type=self.model_type, error_type=error_type).inc()

    # --- optimization ----------------------------------------------------------------------------------
    def record_step_loss(self, loss: float) -> bool:
        """The mean training loss of the latest steps (`ml_training_step_loss`); a non-finite one
        counts as a NaN detection of the loss. Returns whether it is finite."""
        self._child(self._m.step_loss).set(loss)
        return self.check_finite(loss, LOSS)

    def record_gradient_norm(self, norm: float) -> bool:
        """The global gradient norm at a check (`ml_training_gradient_norm`); a non-finite one
        counts as a NaN detection of the gradient. Returns whether it is finite."""
        self._child(self._m.gradient_norm).set(norm)
        return self.check_finite(norm, GRADIENT)

    def set_learning_rates(self, rates: Mapping[str, float]) -> None:
        """Learning rate per optimizer parameter group (`param_group`: its name or index)."""
        for group, rate in rates.items():
            self._child(self._m.learning_rate, group).set(rate)

    def set_hyperparameters(self, values: hyperparameters.Hyperparameters) -> None:
        """The job's one `ml_training_hyperparameters_info` series (replacing an earlier one)."""
        labels = values.labels()
        info = self._m.hyperparameters
        with self._lock:
            previous, self._hyperparameter_labels = self._hyperparameter_labels, labels
        if previous is not None and previous != labels:
            info.remove(self.model_type, self.job_id, *previous.values())
        info.labels(**self._job, **labels).set(1)

    # --- per fold -------------------------------------------------------------------------------------
    def record_fold(self, fold: int, train_loss: float, val_loss: float, epochs: int, duration_secs: float) -> None:
        """A fold finished: its best losses, epochs and wall time; counts it as completed."""
        m, labels = self._m, {**self._job, "fold": str(fold)}
        m.fold_loss.labels(**labels).set(train_loss)
        m.fold_validation_loss.labels(**labels).set(val_loss)
        m.fold_epoch.labels(**labels).set(epochs)
        m.fold_duration.labels(**labels).set(duration_secs)
        m.folds_completed.labels(**self._job).inc()
        with self._lock:
            self._folds_done += 1

    # --- model quality and resources -------------------------------------------------------------------
    def set_model_quality(
        self,
        accuracy: float | None = None,
        f1: float | None = None,
        precision: float | None = None,
        recall: float | None = None,
    ) -> None:
        m, job = self._m, self._job
        for gauge, value in ((m.accuracy, accuracy), (m.f1_score, f1), (m.precision, precision), (m.recall, recall)):
            if value is not None:
                if not 0 <= value <= 1:
                    raise ValueError(f"model quality values are ratios 0-1, got {value}")
                gauge.labels(**job).set(value)

    def set_regression_quality(
        self, rmse: float | None = None, mae: float | None = None, r2: float | None = None
    ) -> None:
        """A regression model's quality on the validation set: RMSE and MAE (in the target's unit,
        at least 0), R squared (at most 1). None leaves a value as it was. A NaN (the model
        predicted non-finite values) is recorded and counts as a NaN detection of the model's
        output (`tensor_type` "activation"); `integrations.torch.record_regression_quality`
        computes all three from prediction and target tensors."""
        m, job = self._m, self._job
        given = [
            (name, gauge, value, low, high)
            for name, gauge, value, low, high in (
                ("rmse", m.rmse, rmse, 0.0, math.inf),
                ("mae", m.mae, mae, 0.0, math.inf),
                ("r2", m.r2_score, r2, -math.inf, 1.0),
            )
            if value is not None
        ]
        for name, _, value, low, high in given:  # all checked before any is set
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if not math.isnan(value) and not low <= value <= high:
                expected = "at least 0 (an error in the target's unit)" if high == math.inf else "at most 1"
                raise ValueError(f"{name} must be {expected}, got {value!r}")
        for _, gauge, value, _, _ in given:
            gauge.labels(**job).set(value)
        if any(not math.isfinite(value) for _, _, value, _, _ in given):
            self.record_nan_detection(ACTIVATION)  # one evaluation, one detection

    def set_resource_usage(self, memory_bytes: float, cpu_percent: float) -> None:
        self._m.memory_used.labels(**self._job).set(memory_bytes)
        self._m.cpu_usage.labels(**self._job).set(cpu_percent)

    def set_active_workers(self, workers: int) -> None:
        self._m.active_workers.labels(**self._job).set(workers)

    # --- lifecycle ------------------------------------------------------------------------------------
    def start_reporting(self, interval: float | None) -> None:
        """Start the job's progress lines every `interval` seconds (None: none) and its end-of-run
        summary (`foxhunt_trainer.summary`); `TrainingMetrics.start_job` calls it."""
        if self.reporter is None:
            self.reporter = RunReporter(
                self.run_state, self._job, rank=self.rank.rank, gpu_uuids=self.gpu_uuids, interval=interval
            )

    def run_state(self) -> RunState:
        """What the job has counted so far: its clock, steps, samples, FLOPs and events."""
        wall, totals = self.phases.wall(), self.phases.totals()
        steps, samples, _, flops, _, _ = self.tally.snapshot()
        with self._lock:
            return RunState(
                at=time.monotonic(),
                wall=wall,
                phases=totals,
                steps=steps,
                samples=samples,
                flops=flops,
                epoch=self.epoch,
                epochs_planned=self.epochs_planned,
                steps_planned=self.steps_planned,
                progress_percent=self._progress_percent,
                folds_planned=self.folds_planned,
                folds_done=self._folds_done,
                nan_events=dict(self._nan_events),
                rollbacks=self._rollbacks,
                checkpoints_saved=self._checkpoints_saved,
                checkpoint_failures=self._checkpoint_failures,
                checkpoint_bytes=self._checkpoint_bytes,
                checkpoint_seconds=self._checkpoint_seconds,
            )

    def at_finish(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the job finishes, before its clock stops (an extension records what
        it learns only at the end, e.g. the last step's collective timing). A callback that raises is
        logged and does not stop the job from finishing."""
        with self._lock:
            self._at_finish.append(callback)

    def set_status(self, status: str) -> None:
        self.status = _check_status(status)
        self._m._refresh_status_counts()

    def finish(self, status: str = "completed") -> float:
        """End the job: final status, job duration observed, workers to 0. Returns the duration."""
        if _check_status(status) not in FINAL_STATUSES:
            raise ValueError(f"a job finishes as one of {sorted(FINAL_STATUSES)}, not {status!r}")
        if self.finished:
            raise ValueError(f"job {self.job_id!r} already finished as {self.status!r}")
        with self._lock:
            callbacks, self._at_finish = self._at_finish, []
        for callback in callbacks:
            try:
                callback()
            except Exception as error:  # the job still finishes; what the callback missed is logged
                LOG.warning("a callback at the job's finish failed", extra={**self._job, "error": repr(error)})
        duration = time.monotonic() - self._started
        self.phases.stop()
        self._m.job_duration.labels(model_type=self.model_type, status=status).observe(duration)
        self._m.job_end_time.labels(**self._job).set(time.time())
        self.set_active_workers(0)
        self.set_status(status)
        if self.reporter is not None:
            self.reporter.finish(status)
        return duration
