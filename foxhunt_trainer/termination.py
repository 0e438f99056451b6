"""SIGTERM: how Kubernetes stops a training pod (preemption, a node drain, the Job deleted), before
it kills it `terminationGracePeriodSeconds` later.

Python's default is to die of the signal at once: the job would stay "running" on its last page
and its last values would never be scraped. Once a training process has a job or a metrics
server, the library handles SIGTERM (installed from the main thread, the only one that may).
The grace period is `FOXHUNT_TERMINATION_GRACE_PERIOD_SECONDS`, which the job template sets to the
pod's `terminationGracePeriodSeconds` (out of Kubernetes, Kubernetes' default of 30 s); every
metrics server's flush after SIGTERM is bounded to end within it, leaving `GRACE_RESERVE` of it
for what runs after.
- A handler the program installed before (one that sets the flag its loop stops at, or writes a
  last checkpoint) runs first. If it returns, the program stops in its own time: a job that ends
  after SIGTERM ends "stopped" (whether its block exits cleanly or by SystemExit), and the flush of
  its servers on close or at exit is bounded by what is left of the grace period. If it ends the
  process (sys.exit, an exception), the running jobs finish "stopped" and the servers are flushed
  before its exception propagates.
- A handler installed later that calls this one as the handler it found (Lightning's) decides
  likewise: Lightning stops its fit loop and raises SystemExit in the trainer.
- Otherwise (Python's default): every running job finishes "stopped", every server is flushed
  (one more scrape of the changed page, within the grace period), and the process dies of SIGTERM
  as it would have without the library (exit status 143 in the pod).
"Stopped" is stopped from outside, not failed: no failure is counted, so TrainingJobFailed does
not fire for a preemption. A SIGTERM that was ignored (SIG_IGN) when the library first needed the
handler stays ignored; a handler installed later that does not call this one replaces it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Mapping
from types import FrameType
from typing import Any, Protocol

from foxhunt_trainer.trainer_env import TERMINATION_GRACE_ENV

LOG = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds
# Share of the grace period left for the earlier handler and the exit (at least a second).
GRACE_RESERVE = 0.1


class Stoppable(Protocol):
    def stop_running_jobs(self) -> int: ...


class Flushable(Protocol):
    def close(self, final_scrape_wait: float | None = None) -> bool: ...


def grace_period_from_env(environ: Mapping[str, str] | None = None) -> float:
    """The pod's grace period in seconds, from FOXHUNT_TERMINATION_GRACE_PERIOD_SECONDS (default 30)."""
    text = (os.environ if environ is None else environ).get(TERMINATION_GRACE_ENV, "").strip()
    if not text:
        return DEFAULT_GRACE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86400:  # NaN fails too
        raise ValueError(
            f"{TERMINATION_GRACE_ENV}={text!r}: expected the grace period, seconds above 0 (at most a day)"
        )
    return seconds


def flush_budget(grace: float) -> float:
    """How long the flush may take of a grace period of `grace` seconds."""
    return max(0.0, grace - max(1.0, GRACE_RESERVE * grace))


class _Handler:
    """The process's one SIGTERM handler; jobs' owners and servers register with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: weakref.WeakSet[Any] = weakref.WeakSet()
        self._servers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._installed = False
        self._previous: Any = None
        self._grace = DEFAULT_GRACE_SECONDS
        self._deadline: float | None = None  # monotonic end of the flush budget, once SIGTERM arrived

    def watch_jobs(self, owner: Stoppable) -> None:
        with self._lock:
            self._owners.add(owner)
        self._install()

    def watch_server(self, server: Flushable) -> None:
        with self._lock:
            self._servers.add(server)
        self._install()

    def _install(self) -> None:
        # Read (and checked) before the handler is installed, so a bad value stops the trainer at start.
        grace = grace_period_from_env()
        with self._lock:
            if self._installed or threading.current_thread() is not threading.main_thread():
                return
            previous = signal.getsignal(signal.SIGTERM)
            self._installed = True
            if previous is signal.SIG_IGN:
                return
            self._previous, self._grace = previous, grace
            signal.signal(signal.SIGTERM, self._handle)

    @property
    def received(self) -> bool:
        """Whether this process got SIGTERM (a job ending after it ends "stopped")."""
        return self._deadline is not None

    def time_left(self) -> float | None:
        """Seconds left for flushing since SIGTERM arrived (None: no SIGTERM)."""
        deadline = self._deadline
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + flush_budget(self._grace)
        previous = self._previous
        if callable(previous):
            # The program's own handler first (it may write a last checkpoint, or set a flag its
            # loop stops at). If it ends the process (sys.exit, an exception), record and flush
            # first; if it returns, the program stops in its own time: its jobs end "stopped" and
            # its servers' flush on close or exit is bounded by what is left of the grace period.
            try:
                previous(signum, frame)
            except BaseException:
                self._stop_and_flush()
                raise
            return
        if signal.getsignal(signum) != self._handle:
            # Called by a handler installed later that chains to this one (Lightning's): it decides
            # what happens next (Lightning stops its fit loop and raises in the trainer); the job
            # and the flush follow as above.
            return
        self._stop_and_flush()
        # Python's default (or a handler not set from Python, which cannot be called): die of the signal.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _stop_and_flush(self) -> None:
        """Stop the jobs and flush the servers from another thread, waited for at most until the
        flush budget ends: the signal interrupted the main thread anywhere, possibly holding a lock
        that stopping a job takes (a clock's, a metric value's), which it releases only when the
        handler returns. Then the work is cut short at the deadline instead of hanging the pod
        until it is killed."""
        worker = threading.Thread(target=self._stop_and_flush_now, name="foxhunt-sigterm-flush", daemon=True)
        worker.start()
        worker.join(timeout=(self.time_left() or 0.0) + 1.0)
        if worker.is_alive():
            LOG.warning("SIGTERM: the metrics flush did not finish within the grace period")

    def _stop_and_flush_now(self) -> None:
        with self._lock:
            owners, servers = list(self._owners), list(self._servers)
        stopped = sum(owner.stop_running_jobs() for owner in owners)
        left = self.time_left()
        LOG.warning("SIGTERM: %d training job(s) stopped, flushing metrics for at most %.0fs", stopped, left)
        for server in servers:
            try:
                server.close()  # bounded by time_left()
            except Exception:
                LOG.exception("SIGTERM: flushing a metrics server failed")


HANDLER = _Handler()
