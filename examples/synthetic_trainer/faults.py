"""Faults the synthetic trainer injects: at scheduled epochs, or on a signal."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from types import FrameType


@dataclass
class FaultPlan:
    """When to inject what. Epochs count from 1 over the whole job (all folds)."""

    nan_epochs: frozenset[int] = frozenset()
    nan_tensor: str = "loss"
    checkpoint_failure_epochs: frozenset[int] = frozenset()
    slowdown_from_epoch: int | None = None
    slowdown_factor: float = 1.0
    _pending_nan: threading.Event = field(default_factory=threading.Event, repr=False)
    _pending_checkpoint_failure: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        if self.slowdown_factor < 1.0:
            raise ValueError(f"slowdown_factor must be at least 1, got {self.slowdown_factor}")
        if self.nan_tensor not in ("loss", "gradient", "activation"):
            raise ValueError(f"nan_tensor must be loss, gradient or activation, got {self.nan_tensor!r}")

    def request_nan(self) -> None:
        self._pending_nan.set()

    def request_checkpoint_failure(self) -> None:
        self._pending_checkpoint_failure.set()

    def install_signal_handlers(self) -> None:
        """SIGUSR1: NaN in the next epoch; SIGUSR2: fail the next checkpoint save."""

        def on_usr1(signum: int, frame: FrameType | None) -> None:
            self.request_nan()

        def on_usr2(signum: int, frame: FrameType | None) -> None:
            self.request_checkpoint_failure()

        signal.signal(signal.SIGUSR1, on_usr1)
        signal.signal(signal.SIGUSR2, on_usr2)

    def nan_now(self, epoch: int) -> bool:
        """Whether this epoch's `nan_tensor` is NaN (consumes a signalled request)."""
        requested = self._pending_nan.is_set()
        self._pending_nan.clear()
        return requested or epoch in self.nan_epochs

    def checkpoint_fails_now(self, epoch: int) -> bool:
        requested = self._pending_checkpoint_failure.is_set()
        self._pending_checkpoint_failure.clear()
        return requested or epoch in self.checkpoint_failure_epochs

    def time_factor(self, epoch: int) -> float:
        """How much slower than normal this epoch runs."""
        if self.slowdown_from_epoch is not None and epoch >= self.slowdown_from_epoch:
            return self.slowdown_factor
        return 1.0
