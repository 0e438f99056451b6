"""Counters that outlive a collection pass: XID events, GPU errors and collection failures.

Written from the pass (under the pass lock) and from the XID event thread, read on every scrape,
so every access takes one lock. The GPU error and failure children exist at 0 from the moment
their GPU (or the process) is first seen, so that a first increment is visible to `increase()`.

Per-code XID children are the exception: XID codes are an open set, and creating even a dozen
codes up front on every GPU made them most of a fleet's GPU series (all zeros). A code's child
appears on its first occurrence, with that occurrence counted (1); its first occurrence is
still visible to `increase()` at once, because the same event increments
`ml_gpu_errors_total{error_type="xid"}`, which exists at 0 for every GPU. Alerts read that
counter; the per-code series say which codes occurred.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from poller.exported_metrics import ERROR_TYPES, FAILURE_REASONS
from poller.samples import GpuIdentity


@dataclass(frozen=True)
class GpuErrorCounts:
    gpu: GpuIdentity
    xids: tuple[tuple[int, int], ...]  # (XID code, count), by code; only codes seen at least once
    errors: tuple[tuple[str, int], ...]  # (error_type, count), in ERROR_TYPES order


@dataclass(frozen=True)
class CountersSnapshot:
    failures: tuple[tuple[str, int], ...]  # (reason, count)
    gpus: tuple[GpuErrorCounts, ...]


class ErrorCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: CountersSnapshot | None = None  # valid until the next change
        self._failures: dict[str, int] = dict.fromkeys(FAILURE_REASONS, 0)
        self._xids: dict[GpuIdentity, dict[int, int]] = {}
        self._errors: dict[GpuIdentity, dict[str, int]] = {}

    def register_gpu(self, gpu: GpuIdentity) -> None:
        """Create the GPU's error counters at 0 (no-op when it was seen before); XID codes come later."""
        with self._lock:
            self._register_locked(gpu)

    def _register_locked(self, gpu: GpuIdentity) -> None:
        self._snapshot = None
        if gpu not in self._xids:
            self._xids[gpu] = {}  # a code's child is created by its first occurrence
            self._errors[gpu] = dict.fromkeys(ERROR_TYPES, 0)

    def record_xid(self, gpu: GpuIdentity, code: int) -> None:
        with self._lock:
            self._register_locked(gpu)
            xids = self._xids[gpu]
            xids[code] = xids.get(code, 0) + 1  # first occurrence creates the child at 1
            self._errors[gpu]["xid"] += 1  # pre-created at 0: increase() sees every XID, new codes too

    def record_error(self, gpu: GpuIdentity, error_type: str, amount: int = 1) -> None:
        if error_type not in ERROR_TYPES:
            raise ValueError(f"unknown error_type {error_type!r}; expected one of {ERROR_TYPES}")
        with self._lock:
            self._register_locked(gpu)
            self._errors[gpu][error_type] += amount

    def record_failure(self, reason: str) -> None:
        if reason not in FAILURE_REASONS:
            raise ValueError(f"unknown failure reason {reason!r}; expected one of {FAILURE_REASONS}")
        with self._lock:
            self._snapshot = None
            self._failures[reason] += 1

    def snapshot(self) -> CountersSnapshot:
        """The counters now; the same object until something changes (writers may cache on it)."""
        with self._lock:
            if self._snapshot is None:
                self._snapshot = self._take_snapshot_locked()
            return self._snapshot

    def _take_snapshot_locked(self) -> CountersSnapshot:
        return CountersSnapshot(
            failures=tuple(self._failures.items()),
            gpus=tuple(
                GpuErrorCounts(gpu, tuple(sorted(xids.items())), tuple(self._errors[gpu].items()))
                for gpu, xids in self._xids.items()
            ),
        )
