"""A fleet that holds still, so that two Prometheus topologies over it can be compared exactly.

Pages of the fleet's targets: 404 until `open()`, then gauges at their first synthesized value and
counters growing linearly (histogram buckets keep their order: each grows in proportion to its
value). Every sample carries its own timestamp on a grid of the scrape interval per target, `ahead`
seconds after the scrape: every server that scrapes a target within half an interval of another
stores the same sample (same timestamp, same value), and a rule evaluated at time T reads only
samples scraped before T - ahead, which remote write has delivered by then.
"""

from __future__ import annotations

import threading
import time

from bench.fleet.live import Target
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import MetricType


def counter_series() -> frozenset[str]:
    """The series names of the catalog's counters and histograms (they grow)."""
    names: set[str] = set()
    for metric in catalog.ALL_METRICS:
        if metric.type is MetricType.COUNTER:
            names.add(metric.name)
        elif metric.type is MetricType.HISTOGRAM:
            names.update(metric.series_names)
    return frozenset(names)


class SteadyFleet:
    """The fleet's pages (module doc); `set_first`/`set_all` change a gauge while it is served."""

    def __init__(self, fleet: list[Target], interval: float, ahead: float = 1.0, ramp: float = 300.0) -> None:
        counters = counter_series()
        self._lines = [
            [(prefix, float(values[0]), prefix.split("{", 1)[0] in counters) for prefix, values in t.lines]
            for t in fleet
        ]
        self.interval = interval
        self.ahead = ahead
        self.ramp = ramp  # counters grow by their first value every `ramp` seconds
        self._opened: float | None = None
        self._phases: dict[int, float] = {}
        self._lock = threading.Lock()

    def set_first(self, target: int, series: str, value: float) -> None:
        """Give the first `series` of a target this value (to make an alert fire)."""
        with self._lock:
            lines = self._lines[target]
            index = next(i for i, (prefix, _, _) in enumerate(lines) if prefix.startswith(series + "{"))
            prefix, _, counter = lines[index]
            lines[index] = (prefix, value, counter)

    def set_all(self, series: str, value: float) -> None:
        with self._lock:
            for lines in self._lines:
                for i, (prefix, _, counter) in enumerate(lines):
                    if prefix.startswith(series + "{"):
                        lines[i] = (prefix, value, counter)

    def open(self) -> None:
        with self._lock:
            self._opened = time.time()

    def page(self, index: int) -> bytes | None:
        now = time.time()
        with self._lock:
            opened = self._opened
            # Every server scrapes a target at some phase of the interval: its scrapes fall on the
            # nearest point of the target's grid, set by the target's first scrape, which decides
            # whether the fleet is open yet and is the samples' timestamp.
            phase = self._phases.setdefault(index, now)
            lines = list(self._lines[index]) if index >= 0 else []
        grid = phase + round((now - phase) / self.interval) * self.interval
        if opened is None or grid < opened or index < 0:
            return None
        at = grid + self.ahead
        growth = 1.0 + (at - opened) / self.ramp
        stamp = round(at * 1000)
        return "".join(
            f"{prefix}{value * growth if counter else value!r} {stamp}\n" for prefix, value, counter in lines
        ).encode()
