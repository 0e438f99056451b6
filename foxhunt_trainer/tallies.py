"""Per-step tallies: the numbers a training loop updates every step, kept as plain Python numbers
and exported when the page is rendered.

A step of a small model on a CPU takes a few milliseconds. prometheus-client's `labels()` lookup,
the lock of every value it updates and its histogram's linear bucket search cost microseconds
each, several times a step; that alone was more than 1 % of such a step. So a job's per-step
series (steps, samples, tokens, model FLOPs, the last step's time, data-loading time and batches)
are tallied here, under one lock a step, and `TallyCollector` reads them at scrape time, as the
phase totals are read from the job's clock. Every other training-job family stays a
prometheus-client object: it changes at most once per check, epoch or save.

The exposed families are the catalog's, exactly as prometheus-client would expose them (counters
under their catalog names without `_created`, the histogram's cumulative `_bucket{le}`, `_sum`
and `_count`), present at 0 from the job's first scrape.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import cast

from prometheus_client import utils as client_utils
from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import Collector

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Metric

# The families a tally exposes, in the order the collector yields them.
TALLIED: tuple[Metric, ...] = (
    catalog.TRAINING_STEPS_TOTAL,
    catalog.TRAINING_SAMPLES_TOTAL,
    catalog.TRAINING_TOKENS_TOTAL,
    catalog.TRAINING_MODEL_FLOPS_TOTAL,
    catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS,
    catalog.TRAINING_DATA_LOADING_SECONDS,
    catalog.TRAINING_DATA_BATCHES_TOTAL,
)

_LOADING = catalog.TRAINING_DATA_LOADING_SECONDS
_BOUNDS: tuple[float, ...] = (*(float(b) for b in _LOADING.buckets), math.inf)
# The `le` labels as prometheus-client writes them ("0.005", "1.0", "+Inf").
_go_float = cast(Callable[[float], str], client_utils.floatToGoString)
_LE: tuple[str, ...] = tuple(_go_float(b) for b in _BOUNDS)


class StepTally:
    """One job rank's per-step numbers. `job_labels` label the per-job series (`catalog.JOB`),
    `rank_labels` the per-rank ones (`catalog.RANK_JOB`)."""

    def __init__(self, job_labels: Mapping[str, str], rank_labels: Mapping[str, str]) -> None:
        self.job_labels = dict(job_labels)
        self.rank_labels = dict(rank_labels)
        self._lock = threading.Lock()
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self.flops: dict[str, float] = {}  # by precision
        self.last_step_time: float | None = None
        self._loading_counts = [0] * len(_BOUNDS)  # per bucket, not cumulative
        self._loading_sum = 0.0
        self.batches = 0

    def step(self, samples: int, tokens: int, flops: float | None, precision: str | None, count: int = 1) -> None:
        """`count` optimizer steps with the samples, tokens and FLOPs they consumed (checked by the caller)."""
        now = time.time()
        with self._lock:
            self.steps += count
            self.samples += samples
            self.tokens += tokens
            if flops is not None and precision is not None:
                self.flops[precision] = self.flops.get(precision, 0.0) + flops
            self.last_step_time = now

    def declare_precision(self, precision: str) -> None:
        """Expose the model-FLOPs counter of `precision` (at 0 until a step adds to it)."""
        with self._lock:
            self.flops.setdefault(precision, 0.0)

    def data_load(self, seconds: float, batches: int) -> None:
        """One load of `batches` batches that took `seconds` (finite, at least 0: checked by the caller)."""
        with self._lock:
            self._loading_counts[bisect.bisect_left(_BOUNDS, seconds)] += 1
            self._loading_sum += seconds
            self.batches += batches

    def add_batches(self, count: int) -> None:
        with self._lock:
            self.batches += count

    def loading(self) -> tuple[list[int], float]:
        """(cumulative count per bucket bound, sum of seconds) of the data loads so far."""
        with self._lock:
            counts, total = list(self._loading_counts), self._loading_sum
        cumulative, running = [], 0
        for count in counts:
            running += count
            cumulative.append(running)
        return cumulative, total

    def snapshot(self) -> tuple[int, int, int, dict[str, float], float | None, int]:
        with self._lock:
            return self.steps, self.samples, self.tokens, dict(self.flops), self.last_step_time, self.batches


class TallyCollector(Collector):
    """The tallied families of every tally `tallies()` returns, read at scrape time."""

    def __init__(self, tallies: Callable[[], Iterable[StepTally]]) -> None:
        self._tallies = tallies

    def describe(self) -> list[ClientFamily]:
        return [ClientFamily(m.name, m.help, m.type.value) for m in TALLIED]

    def collect(self) -> Iterator[ClientFamily]:
        families = {m.name: ClientFamily(m.name, m.help, m.type.value) for m in TALLIED}

        def add(metric: Metric, labels: Mapping[str, str], value: float, suffix: str = "") -> None:
            families[metric.name].add_sample(metric.name + suffix, dict(labels), value)

        for tally in self._tallies():
            steps, samples, tokens, flops, last_step, batches = tally.snapshot()
            ranked, job = tally.rank_labels, tally.job_labels
            add(catalog.TRAINING_STEPS_TOTAL, ranked, steps)
            add(catalog.TRAINING_SAMPLES_TOTAL, ranked, samples)
            add(catalog.TRAINING_TOKENS_TOTAL, ranked, tokens)
            for precision, value in sorted(flops.items()):
                add(catalog.TRAINING_MODEL_FLOPS_TOTAL, {**ranked, "precision": precision}, value)
            if last_step is not None:
                add(catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS, ranked, last_step)
            cumulative, total = tally.loading()
            for le, count in zip(_LE, cumulative, strict=True):
                add(_LOADING, {**job, "le": le}, count, "_bucket")
            add(_LOADING, job, cumulative[-1], "_count")
            add(_LOADING, job, total, "_sum")
            add(catalog.TRAINING_DATA_BATCHES_TOTAL, job, batches)
        yield from families.values()
