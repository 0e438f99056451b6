"""The training loop: folds of epochs with data loading, checkpoints, faults, metrics and spans."""

from __future__ import annotations

import logging
import os
import random
import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace

from examples.synthetic_trainer.faults import FaultPlan
from examples.synthetic_trainer.simulation import LossCurve, quality_from_loss
from foxhunt_trainer import JobMetrics, log_context

tracer = trace.get_tracer("examples.synthetic_trainer")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainerSettings:
    job_id: str
    checkpoint_dir: Path
    model_type: str = "dqn"
    folds: int = 3
    epochs_per_fold: int = 10
    epoch_seconds: float = 0.5
    checkpoint_every: int = 2
    checkpoint_bytes: int = 256 * 1024
    batches_per_epoch: int = 32
    stop_on_nan: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.folds < 1 or self.epochs_per_fold < 1:
            raise ValueError("folds and epochs_per_fold must be at least 1")
        if self.epoch_seconds < 0 or self.checkpoint_every < 1:
            raise ValueError("epoch_seconds must be >= 0 and checkpoint_every >= 1")

    @property
    def total_epochs(self) -> int:
        return self.folds * self.epochs_per_fold


class ResourceSampler:
    """Resident memory and CPU percent (100 = one core) of this process since the last sample."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()

    def sample(self) -> tuple[float, float]:
        wall, cpu = time.monotonic(), time.process_time()
        percent = 100.0 * (cpu - self._cpu) / (wall - self._wall) if wall > self._wall else 0.0
        self._wall, self._cpu = wall, cpu
        return _resident_bytes(), percent


def _resident_bytes() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return float(pages * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, IndexError, ValueError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


class SyntheticTrainer:
    def __init__(self, settings: TrainerSettings, faults: FaultPlan, job: JobMetrics, stop: threading.Event) -> None:
        self.settings = settings
        self.faults = faults
        self.job = job
        self.stop = stop
        self.rng = random.Random(settings.seed)
        self.resources = ResourceSampler()
        self.epoch = 0  # over the whole job, from 1

    def run(self) -> str:
        """Train every fold; returns the final status (completed, failed or stopped)."""
        s = self.settings
        with (
            log_context(job_id=s.job_id, model_type=s.model_type),
            tracer.start_as_current_span("training_job") as span,
        ):
            span.set_attribute("ml.model_type", s.model_type)
            span.set_attribute("ml.job_id", s.job_id)
            log.info("job started", extra={"folds": s.folds, "epochs_per_fold": s.epochs_per_fold})
            status = "completed"
            for fold in range(s.folds):
                status = self._fold(fold)
                if status != "running":
                    break
            else:
                status = "completed"
            span.set_attribute("ml.status", status)
            log.log(logging.INFO if status == "completed" else logging.WARNING, "job %s", status)
        return status

    def _fold(self, fold: int) -> str:
        s = self.settings
        with log_context(fold=fold), tracer.start_as_current_span("fold") as span:
            span.set_attribute("ml.fold", fold)
            started = time.monotonic()
            self._load_data()
            curve = LossCurve(fold, self.rng)
            best_train = best_val = float("inf")
            for epoch_in_fold in range(1, s.epochs_per_fold + 1):
                if self.stop.is_set():
                    return "stopped"
                self.epoch += 1
                status, result = self._epoch(curve, epoch_in_fold)
                if status != "running":
                    return status
                if result is not None:
                    best_train, best_val = min(best_train, result[0]), min(best_val, result[1])
                if epoch_in_fold % s.checkpoint_every == 0:
                    self._save_checkpoint(fold)
            seconds = time.monotonic() - started
            self.job.record_fold(fold, best_train, best_val, s.epochs_per_fold, seconds)
            self.job.set_model_quality(*quality_from_loss(best_val))
            log.info(
                "fold finished",
                extra={
                    "best_train_loss": round(best_train, 6),
                    "best_val_loss": round(best_val, 6),
                    "seconds": round(seconds, 3),
                },
            )
        return "running"

    def _epoch(self, curve: LossCurve, epoch_in_fold: int) -> tuple[str, tuple[float, float] | None]:
        s = self.settings
        with tracer.start_as_current_span("epoch") as span:
            span.set_attribute("ml.epoch", self.epoch)
            started = time.monotonic()
            self.stop.wait(s.epoch_seconds * self.faults.time_factor(self.epoch))
            result = curve.epoch(epoch_in_fold)
            self.job.record_batches(s.batches_per_epoch)
            self.job.set_resource_usage(*self.resources.sample())
            self.job.set_progress(100.0 * self.epoch / s.total_epochs)
            if self.faults.nan_now(self.epoch):
                span.add_event("nan_detected", {"ml.tensor_type": self.faults.nan_tensor})
                self.job.record_nan_detection(self.faults.nan_tensor)
                if s.stop_on_nan:
                    log.error(
                        "NaN detected: failing the job",
                        extra={"epoch": self.epoch, "tensor_type": self.faults.nan_tensor},
                    )
                    self.job.record_failure("nan")
                    return "failed", None
                # The step is skipped, as a trainer with a NaN guard does.
                log.warning(
                    "NaN detected: step skipped", extra={"epoch": self.epoch, "tensor_type": self.faults.nan_tensor}
                )
                return "running", None
            elapsed = time.monotonic() - started
            self.job.record_training_iteration(self.epoch, result.train_loss, result.val_loss, elapsed)
            log.info(
                "epoch done",
                extra={
                    "epoch": self.epoch,
                    "train_loss": round(result.train_loss, 6),
                    "val_loss": round(result.val_loss, 6),
                    "seconds": round(elapsed, 3),
                },
            )
            return "running", (result.train_loss, result.val_loss)

    def _load_data(self) -> None:
        with tracer.start_as_current_span("data_load"):
            started = time.monotonic()
            self.stop.wait(self.settings.epoch_seconds * 0.2)
            self.job.record_data_load(time.monotonic() - started)

    def _save_checkpoint(self, fold: int) -> None:
        """A checkpoint through `job.checkpoint`: timed, its error classified (a `RuntimeError` from
        `torch.save` on a read-only path is an io_error too) and training goes on after a failure."""
        s = self.settings
        path = s.checkpoint_dir / f"{s.job_id}-fold{fold}-epoch{self.epoch}.ckpt"
        # The outcome is logged inside the span (before it ends), so the line carries its trace_id/span_id.
        with tracer.start_as_current_span("checkpoint_save") as span:
            with self.job.checkpoint(path, step=self.epoch, suppress_errors=True) as save:
                if self.faults.checkpoint_fails_now(self.epoch):
                    raise OSError(f"injected checkpoint failure writing {path}")
                payload = self.rng.randbytes(s.checkpoint_bytes)
                partial = path.with_suffix(".partial")
                partial.write_bytes(payload)
                partial.replace(path)
            if save.error is not None:  # counted and logged by the helper
                span.record_exception(save.error)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(save.error)))
            elif save.good:
                log.info(
                    "checkpoint saved", extra={"epoch": self.epoch, "path": str(path), "bytes": s.checkpoint_bytes}
                )
