"""Collect on scrape: one shared NVML pass at a time.

Following the Prometheus "Writing exporters" guide, nothing polls on a timer: a scrape asks
`SharedPass.latest()`, which runs a pass unless
- a pass is already running: the scrape waits for it and shares its result (never two passes at
  once against the driver), or
- the last pass started less than `min_interval` seconds ago: the scrape gets that pass.
Counters (XID events, GPU errors, failures) are read live on every scrape, so an XID that arrives
between two passes shows on the next scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from poller.error_counters import ErrorCounters
from poller.samples import GpuIdentity, PassResult

LOG = logging.getLogger(__name__)


class PassSource(Protocol):
    def collect(self) -> PassResult: ...


class SharedPass:
    def __init__(
        self,
        source: PassSource,
        counters: ErrorCounters,
        min_interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0, got {min_interval}")
        self._source = source
        self._counters = counters
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: PassResult | None = None
        self._last_started = 0.0
        self._last_finished = 0.0
        self.passes = 0  # passes run since start (for tests and benchmarks)

    def latest(self, requested_at: float | None = None) -> PassResult:
        """The newest pass, run now unless one finished after `requested_at` (when the scrape
        arrived; default now) or started less than the minimum interval before it."""
        requested = self._clock() if requested_at is None else requested_at
        with self._lock:
            last = self._last
            if last is not None and (
                self._last_finished >= requested  # it ran while this scrape waited: share it
                or requested - self._last_started < self._min_interval
            ):
                return last
            started = self._clock()
            try:
                result = self._source.collect()
            except Exception:  # a bug must not take the exporter down: report NVML down
                LOG.exception("collection pass failed")
                self._counters.record_failure("query")
                result = PassResult(nvml_up=False, started_at=started, finished_at=self._clock())
            self._last, self._last_started, self._last_finished = result, started, self._clock()
            self.passes += 1
            return result


def gpu_label_values(node: str, gpu: GpuIdentity) -> list[str]:
    """Values of catalog.GPU labels (node, gpu_id, uuid, gpu_name), in that order."""
    return [node, gpu.gpu_id, gpu.uuid, gpu.name]
