"""`with job.checkpoint(path, step=..., state=...) as ckpt:` the caller saves inside the block.

The block is timed (the job's "checkpoint" phase), and its outcome is one of:
- failed: the block raised. The error is classified into the catalog's checkpoint error types
  (`errors.checkpoint_error_type`: a `RuntimeError` from `torch.save` on a read-only path is an
  `io_error`, a pickling error is `serialization`, an object-store client's error is `storage`),
  counted in `ml_checkpoint_save_failures_total`, and re-raised (or kept in `ckpt.error` with
  `suppress_errors=True`, for trainers that treat a checkpoint as best-effort);
- refused: the save went through but the state is not worth rolling back to. With `state` (a
  `state_dict()`, a module, nested tensors) any NaN or infinity in it refuses the save and counts
  `ml_training_nan_count{tensor_type="weights"}`; `ckpt.finite` says so before the caller writes,
  so a trainer can skip writing bad weights. Without `state`, a save is refused when the job
  counted a non-finite value after its latest finite loss and its latest good checkpoint;
- good: counted in `ml_checkpoint_saves_total`, its duration and size recorded, and
  `job.last_good_checkpoint` set (path, step, Unix time): what a rollback restores.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

from foxhunt_trainer import errors, finite

LOG = logging.getLogger(__name__)

WEIGHTS = "weights"  # the NaN tensor type of a refused checkpoint's state


@dataclass(frozen=True)
class GoodCheckpoint:
    """The latest checkpoint a job can be rolled back to."""

    path: str
    step: int
    time: float  # Unix time the save finished
    size_bytes: int | None = None


class CheckpointOwner(Protocol):
    """What a checkpoint save reports to: the job (`JobMetrics`)."""

    @property
    def suspect_state(self) -> bool: ...

    def phase(self, name: str) -> AbstractContextManager[object]: ...

    def record_checkpoint_save(
        self, success: bool, duration: float, size: int | None, error_type: str | None = None
    ) -> None: ...

    def record_nan_detection(self, tensor_type: str = "loss") -> None: ...

    def record_good_checkpoint(self, checkpoint: GoodCheckpoint) -> None: ...


def size_on_disk(path: str) -> int | None:
    """Bytes of a local file, or of every file under a local directory; None for what is not
    on the local filesystem (an object-store URL) or not there."""
    local = Path(path)
    try:
        if local.is_file():
            return local.stat().st_size
        if local.is_dir():
            return sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    except OSError:
        return None
    return None


class CheckpointSave:
    """One checkpoint save; see the module docstring. Use through `job.checkpoint(...)`."""

    def __init__(
        self,
        owner: CheckpointOwner,
        path: str | os.PathLike[str],
        *,
        step: int,
        state: object = None,
        suppress_errors: bool = False,
    ) -> None:
        if step < 0:
            raise ValueError(f"checkpoint step must not be negative, got {step}")
        self._owner = owner
        self.path = os.fspath(path)
        self.step = step
        self.state = state
        self.suppress_errors = suppress_errors
        # Set by the caller when the size cannot be read from the path (an object store).
        self.size_bytes: int | None = None
        self.nonfinite: list[str] = []
        self.good: bool | None = None
        self.error: BaseException | None = None
        self.error_type: str | None = None
        self.refused_reason = ""
        self._phase: AbstractContextManager[object] | None = None
        self._started = 0.0

    @property
    def finite(self) -> bool:
        """Whether the state is free of NaN and infinity (True without a state)."""
        return not self.nonfinite

    def __enter__(self) -> CheckpointSave:
        self._phase = self._owner.phase("checkpoint")
        self._phase.__enter__()
        self._started = time.monotonic()
        if self.state is not None:
            self.nonfinite = finite.nonfinite_entries(self.state)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        duration = time.monotonic() - self._started
        try:
            if exc is not None:
                if not isinstance(exc, Exception):
                    return False  # KeyboardInterrupt, SystemExit: not a save failure
                return self._failed(exc, duration)
            self._finished(duration)
            return False
        finally:
            assert self._phase is not None
            self._phase.__exit__(None, None, None)

    def _failed(self, exc: Exception, duration: float) -> bool:
        self.good, self.error, self.error_type = False, exc, errors.checkpoint_error_type(exc)
        self._owner.record_checkpoint_save(False, duration, None, self.error_type)
        LOG.error(
            "checkpoint save failed",
            extra={"path": self.path, "step": self.step, "error_type": self.error_type, "error": str(exc)},
        )
        return self.suppress_errors

    def _finished(self, duration: float) -> None:
        if self.nonfinite:
            self.refused_reason = f"non-finite values in {finite.describe(self.nonfinite)}"
            self._owner.record_nan_detection(WEIGHTS)
        elif self.state is None and self._owner.suspect_state:
            self.refused_reason = "the job counted non-finite values after its latest finite loss"
        if self.refused_reason:
            self.good = False
            LOG.warning(
                "checkpoint not counted as good: %s",
                self.refused_reason,
                extra={"path": self.path, "step": self.step},
            )
            return
        size = self.size_bytes if self.size_bytes is not None else size_on_disk(self.path)
        self._owner.record_checkpoint_save(True, duration, size)
        self._owner.record_good_checkpoint(GoodCheckpoint(self.path, self.step, time.time(), size))
        self.good = True
