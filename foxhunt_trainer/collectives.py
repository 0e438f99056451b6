"""Where each rank of a distributed job runs, and the counts of its collectives.

Framework-free (the PyTorch side, DDP's gradient all-reduce timed per step or per bucket and
timed `torch.distributed` calls, is `foxhunt_trainer.integrations.torch_distributed`,
built on this):

- `ml_training_rank_placement_info{model_type, job_id, rank, node, uuid}`: the Kubernetes node
  the rank runs on and the GPU it computes on, so an alert about a rank names both;
- per rank and kind of collective (`ml_training_collective_*`): operations and message bytes,
  counted as NCCL's tests count a collective's size, and busy seconds, the wall time with at least
  one collective of the kind in flight (overlapped with compute or not; for DDP's own all-reduce,
  the span from its first bucket's launch to its last bucket's end, which is no shorter): bytes
  over busy seconds is the rank's algorithmic bandwidth (NCCL's `algbw`). The exposed part, the
  time the rank does nothing but wait for communication, is the job's `collective` phase.

All of it is read at scrape time: a collective hanging right now shows as busy time that grows.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import Collector

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.training import JobMetrics

ALL_REDUCE = "all_reduce"
BROADCAST = "broadcast"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
COLLECTIVES: tuple[str, ...] = (ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER)
# Where a rank finds the Kubernetes node it runs on: the job template's downward-API variable
# (also an OpenTelemetry resource attribute), then the common NODE_NAME; else the host name.
NODE_NAME_ENVS = ("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "NODE_NAME")
LOCAL_WORLD_SIZE_ENV = "LOCAL_WORLD_SIZE"


def node_name(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    for name in NODE_NAME_ENVS:
        value = env.get(name, "").strip()
        if value:
            return value
    return socket.gethostname()


def rank_gpus(held: Sequence[str], local_rank: int, local_world_size: int) -> tuple[str, ...]:
    """The GPUs a rank computes on: with one GPU per local rank (torchrun's usual layout) the one
    at its local rank; otherwise every GPU the container holds."""
    if len(held) == local_world_size > 1:
        return (held[local_rank],)
    return tuple(held)


def local_world_size(environ: Mapping[str, str] | None = None) -> int:
    """torchrun's LOCAL_WORLD_SIZE (processes in this pod); 1 without a launcher."""
    text = (os.environ if environ is None else environ).get(LOCAL_WORLD_SIZE_ENV, "").strip()
    if not text:
        return 1
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"{LOCAL_WORLD_SIZE_ENV}={text!r}: expected a whole number of at least 1 (set by torchrun)")
    return size


class _Kind:
    """Counts of one kind of collective; the owner's lock guards them."""

    __slots__ = ("busy", "bytes", "in_flight", "operations", "since")

    def __init__(self) -> None:
        self.operations = 0
        self.bytes = 0
        self.busy = 0.0
        self.in_flight = 0
        self.since = 0.0


class CollectiveCounts:
    """One rank's collectives: `launched(kind)` when one starts, `completed(kind, nbytes)` when it
    ends (from any thread: process groups complete work on their own threads)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds = {kind: _Kind() for kind in COLLECTIVES}

    def _kind(self, kind: str) -> _Kind:
        counts = self._kinds.get(kind)
        if counts is None:
            raise ValueError(f"unknown collective {kind!r}; expected one of {COLLECTIVES}")
        return counts

    def launched(self, kind: str) -> None:
        with self._lock:
            counts = self._kind(kind)
            if counts.in_flight == 0:
                counts.since = self._clock()
            counts.in_flight += 1

    def completed(self, kind: str, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"a collective moves at least 0 bytes, got {nbytes}")
        with self._lock:
            counts = self._kind(kind)
            if counts.in_flight == 0:
                raise ValueError(f"a {kind} completed that was never launched")
            counts.operations += 1
            counts.bytes += nbytes
            counts.in_flight -= 1
            if counts.in_flight == 0:
                counts.busy += self._clock() - counts.since

    def add(self, kind: str, operations: int, nbytes: int, busy_seconds: float) -> None:
        """Count `operations` completed collectives of `kind` moving `nbytes` in all, in flight for
        `busy_seconds`, measured by someone else (DDP's reducer times its own all-reduce)."""
        if operations < 0 or nbytes < 0 or not busy_seconds >= 0:
            raise ValueError(
                f"collectives completed: {operations} operations, {nbytes} bytes, {busy_seconds} busy seconds; "
                "expected counts and seconds of at least 0"
            )
        with self._lock:
            counts = self._kind(kind)
            counts.operations += operations
            counts.bytes += nbytes
            counts.busy += busy_seconds

    def totals(self) -> dict[str, tuple[int, int, float]]:
        """Per kind: operations, bytes, busy seconds (an open busy interval counted up to now)."""
        with self._lock:
            now = self._clock()
            return {
                kind: (c.operations, c.bytes, c.busy + (now - c.since if c.in_flight else 0.0))
                for kind, c in self._kinds.items()
            }


class CollectiveCollector(Collector):
    """A rank's `CollectiveCounts` as the catalog's three families, read at scrape time."""

    FAMILIES = (
        catalog.TRAINING_COLLECTIVE_OPERATIONS_TOTAL,
        catalog.TRAINING_COLLECTIVE_BYTES_TOTAL,
        catalog.TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL,
    )

    def __init__(self, job: JobMetrics, counts: CollectiveCounts) -> None:
        self._job, self._counts = job, counts

    def describe(self) -> list[ClientFamily]:
        return [ClientFamily(m.name, m.help, m.type.value) for m in self.FAMILIES]

    def collect(self) -> Iterator[ClientFamily]:
        families = [ClientFamily(m.name, m.help, m.type.value) for m in self.FAMILIES]
        ranked = self._job.rank_labels
        for kind, values in self._counts.totals().items():
            labels = {**ranked, "collective": kind}
            for family, value in zip(families, values, strict=True):
                family.add_sample(family.name, labels, float(value))
        yield from families


class PlacementCollector(Collector):
    """`ml_training_rank_placement_info`: one series per rank, its node and GPU(s) (uuid empty without
    a GPU; the UUIDs joined by commas for a rank that computes on several), so the rules that name a
    rank's node and GPU find exactly one placement per rank."""

    def __init__(self, job: JobMetrics, node: str, uuids: Sequence[str]) -> None:
        if not node:
            raise ValueError("a rank's node name must not be empty")
        self._job, self._node, self._uuids = job, node, (",".join(dict.fromkeys(uuids)),)

    def describe(self) -> list[ClientFamily]:
        m = catalog.TRAINING_RANK_PLACEMENT_INFO
        return [ClientFamily(m.name, m.help, "gauge")]

    def collect(self) -> Iterator[ClientFamily]:
        m = catalog.TRAINING_RANK_PLACEMENT_INFO
        family = ClientFamily(m.name, m.help, "gauge")
        for uuid in self._uuids:
            family.add_sample(m.name, {**self._job.rank_labels, "node": self._node, "uuid": uuid}, 1.0)
        yield family


def track_rank(
    job: JobMetrics,
    *,
    node: str | None = None,
    gpu_uuids: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectiveCounts:
    """Publish where this rank runs on the job's registry (`node`: default from the job
    template's downward-API env, else the host name; `gpu_uuids`: default this rank's share of the
    GPUs the job holds) and return the counts its collectives are recorded in."""
    env = os.environ if environ is None else environ
    where = node if node is not None else node_name(env)
    uuids = (
        tuple(gpu_uuids)
        if gpu_uuids is not None
        else rank_gpus(job.gpu_uuids, job.rank.local_rank, local_world_size(env))
    )
    counts = CollectiveCounts()
    job.registry.register(PlacementCollector(job, where, uuids))
    job.registry.register(CollectiveCollector(job, counts))
    return counts
