"""SIGTERM: how Kubernetes stops a training pod (preemption, a node drain, the Job deleted), before
it kills it `terminationGracePeriodSeconds` later.

Python's default is to die of the signal at once: the job would stay "running" on its last page
and its last values would never be scraped. Once a training process has a job or a metrics
server, the library handles SIGTERM (installed from the main thread, the only one that may):
1. every job still running finishes "stopped" (stopped from outside, not failed: no failure is
   counted, so TrainingJobFailed does not fire for a preemption);
2. every metrics server is flushed as at exit (one more scrape of the changed page), each wait
   bounded so that the whole handler ends within the grace period: the job template sets
   `FOXHUNT_TERMINATION_GRACE_PERIOD_SECONDS` to the pod's `terminationGracePeriodSeconds`; out
   of Kubernetes, Kubernetes' default of 30 s is assumed. `GRACE_RESERVE` of it is left for
   what runs after the flush;
3. the handler that was installed before it runs next (a launcher's or framework's own, such as
   the one that writes a last checkpoint): if it returns, so does this one and the process
   carries on as that handler decided;
4. with no earlier handler (Python's default), the process then dies of SIGTERM as it would have
   without the library (exit status 143 in the pod).
A SIGTERM that was ignored (SIG_IGN) when the library first needed the handler stays ignored.
A handler installed later that does not call this one replaces it (Lightning's calls the one it
found).
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

from observability.trainer_env import TERMINATION_GRACE_ENV

LOG = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds
# Share of the grace period left for the earlier handler and the exit (at least a second).
GRACE_RESERVE = 0.1


class Stoppable(Protocol):
    def stop_running_jobs(self) -> int: ...


class Flushable(Protocol):
    def flush_wait(self) -> float: ...

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

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        received = time.monotonic()
        deadline = received + flush_budget(self._grace)
        with self._lock:
            owners, servers = list(self._owners), list(self._servers)
        stopped = sum(owner.stop_running_jobs() for owner in owners)
        LOG.warning(
            "SIGTERM: %d training job(s) stopped, flushing metrics for at most %.0fs", stopped, deadline - received
        )
        for server in servers:
            try:
                server.close(final_scrape_wait=max(0.0, min(server.flush_wait(), deadline - time.monotonic())))
            except Exception:
                LOG.exception("SIGTERM: flushing a metrics server failed")
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
            return
        # Python's default (or a handler not set from Python, which cannot be called): die of the signal.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


HANDLER = _Handler()
