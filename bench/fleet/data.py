"""Synthesize an hour of fleet data as OpenMetrics text and backfill it with promtool.

The hour is placed inside one 2-hour-aligned TSDB block window, so `promtool tsdb
create-blocks-from openmetrics` parses each file once (it re-reads the whole input for every
block window the data touches). The samples are split by time into `parts` files that are
written and backfilled in parallel processes (one per core): the blocks do not overlap, and the
benchmark's Prometheus runs with the maximum block duration equal to the minimum so it never
compacts them while queries are being timed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.fleet.series import (
    HistogramSpec,
    SeriesSpec,
    gpu_uuid,
    holder_utilization,
    poller_series,
    service_series,
    tempo_series,
    training_job_series,
    training_worker_series,
)
from bench.fleet.values import PLACEHOLDER, Patterns, body, le_text
from harness.prometheus import binary
from observability.config import ObservabilityConfig

BLOCK_SECONDS = 2 * 3600
_FLUSH_CHARS = 32 * 1024 * 1024


@dataclass(frozen=True)
class FleetShape:
    nodes: int
    gpus_per_node: int = 8
    training_jobs: int = 50
    duration_seconds: int = 3600
    interval_seconds: int = 15
    # Multi-node jobs: (job index, node index) for each further node a job holds all GPUs of, with a
    # worker pod of its own there (job i holds node i through its first pod).
    spanning: tuple[tuple[int, int], ...] = ()

    def holder_of(self, node: int) -> int | None:
        """The job holding a node's GPUs (None: no job)."""
        extra = {n: job for job, n in self.spanning}
        if node in extra:
            return extra[node]
        return node if node < self.training_jobs else None

    @property
    def samples_per_series(self) -> int:
        return self.duration_seconds // self.interval_seconds


def data_end(now: float, shape: FleetShape) -> int:
    """The last sample's time: the hour ends just before the latest 2 h block boundary that
    leaves a whole hour inside its block (so the data touches one block window only)."""
    boundary = int(now) // BLOCK_SECONDS * BLOCK_SECONDS
    return boundary - shape.interval_seconds


def timestamps(shape: FleetShape, end: int) -> list[int]:
    n = shape.samples_per_series
    return [end - (n - 1 - i) * shape.interval_seconds for i in range(n)]


@dataclass(frozen=True)
class WriteStats:
    series: int
    samples: int
    bytes: int
    seconds: float


def all_series(cfg: ObservabilityConfig, shape: FleetShape) -> Iterator[SeriesSpec | HistogramSpec]:
    for node in range(shape.nodes):
        holder = shape.holder_of(node)
        yield from poller_series(cfg, node, shape.gpus_per_node, holder_utilization(holder))
    for index in range(shape.training_jobs):
        held = tuple(gpu_uuid(index, gpu) for gpu in range(shape.gpus_per_node)) if index < shape.nodes else ()
        plain, histograms = training_job_series(cfg, index, held)
        yield from plain
        yield from histograms
    for worker, (index, node) in enumerate(shape.spanning, start=1):
        if not (index < shape.training_jobs and shape.training_jobs <= node < shape.nodes):
            raise ValueError(f"spanning job {index} on node {node}: expected a job and a node no other job holds")
        yield from training_worker_series(
            cfg, index, worker, tuple(gpu_uuid(node, g) for g in range(shape.gpus_per_node))
        )
    for group in (service_series(cfg), tempo_series(cfg)):
        yield from group[0]
        yield from group[1]


def series_text(name: str, labels: Sequence[tuple[str, str]], extra: str = "") -> str:
    """`name{l1="v1",...,extra}` as a sample line starts, in OpenMetrics and the text format."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    if extra:
        inner = f"{inner},{extra}" if inner else extra
    return f"{name}{{{inner}}}"


class _Bodies:
    """Text bodies per (pattern, variant) for one slice of the hour, built once each."""

    def __init__(self, patterns: Patterns, stamps: list[str], first: int, last: int) -> None:
        self._patterns = patterns
        self._stamps = stamps
        self._slice = slice(first, last)
        self._plain: dict[tuple[str, int], str] = {}
        self._histograms: dict[tuple[str, int, tuple[float, ...]], dict[str, str]] = {}

    def plain(self, spec: SeriesSpec) -> str:
        key = (spec.pattern, spec.key % 32)
        text = self._plain.get(key)
        if text is None:
            text = body(self._patterns.values(spec.pattern, spec.key)[self._slice], self._stamps)
            self._plain[key] = text
        return text

    def histogram(self, spec: HistogramSpec) -> dict[str, str]:
        key = (spec.pattern, spec.key % 32, spec.metric.buckets)
        texts = self._histograms.get(key)
        if texts is None:
            values = self._patterns.histogram(spec.pattern, spec.key, spec.metric.buckets)
            texts = {name: body(v[self._slice], self._stamps) for name, v in values.items()}
            self._histograms[key] = texts
        return texts


def write_openmetrics(
    path: Path, cfg: ObservabilityConfig, shape: FleetShape, end: int, part: int = 0, parts: int = 1
) -> WriteStats:
    """Write part `part` of `parts` (a slice of the hour) of every series to `path`."""
    started = time.perf_counter()
    every = timestamps(shape, end)
    n = len(every)
    first, last = part * n // parts, (part + 1) * n // parts
    bodies = _Bodies(Patterns(n, shape.interval_seconds, every[0]), [str(t) for t in every[first:last]], first, last)
    series = written = 0
    chunk: list[str] = []
    size = 0
    with path.open("w", encoding="utf-8") as out:
        for spec in all_series(cfg, shape):
            if isinstance(spec, SeriesSpec):
                texts = [bodies.plain(spec).replace(PLACEHOLDER, spec.prefix())]
            else:
                texts = _histogram_texts(spec, bodies)
            for text in texts:
                chunk.append(text)
                size += len(text)
                series += 1
            if size > _FLUSH_CHARS:
                written += out.write("".join(chunk))
                chunk, size = [], 0
        chunk.append("# EOF\n")
        written += out.write("".join(chunk))
    return WriteStats(series, series * (last - first), written, time.perf_counter() - started)


def _histogram_texts(spec: HistogramSpec, bodies: _Bodies) -> list[str]:
    texts = bodies.histogram(spec)
    metric = spec.metric
    out = []
    for le in (*metric.buckets, float("inf")):
        le_label = f'le="{le_text(le)}"'
        out.append(texts[le_text(le)].replace(PLACEHOLDER, series_text(metric.bucket, spec.labels, le_label)))
    out.append(texts["sum"].replace(PLACEHOLDER, series_text(metric.sum, spec.labels)))
    out.append(texts["count"].replace(PLACEHOLDER, series_text(metric.count, spec.labels)))
    return out


@dataclass(frozen=True)
class BackfillStats:
    series: int
    samples: int
    bytes: int
    generate_seconds: float
    promtool_seconds: float
    wall_seconds: float


def _generate_and_backfill(
    workdir: Path, cfg: ObservabilityConfig, shape: FleetShape, end: int, part: int, parts: int
) -> tuple[WriteStats, float, Path]:
    path = workdir / f"fleet-{part}.om"
    out_dir = workdir / f"blocks-{part}"
    stats = write_openmetrics(path, cfg, shape, end, part, parts)
    started = time.perf_counter()
    try:
        subprocess.run(
            [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(path), str(out_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"promtool backfill of {path} failed:\n{error.stdout}\n{error.stderr}") from None
    finally:
        path.unlink(missing_ok=True)
    return stats, time.perf_counter() - started, out_dir


def backfill(workdir: Path, data_dir: Path, cfg: ObservabilityConfig, shape: FleetShape, end: int) -> BackfillStats:
    """Generate the fleet's hour and turn it into TSDB blocks under `data_dir`."""
    parts = max(1, min(os.cpu_count() or 1, 4))
    started = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=parts) as pool:
        futures = [pool.submit(_generate_and_backfill, workdir, cfg, shape, end, p, parts) for p in range(parts)]
        results = [f.result() for f in futures]
    for _, _, out_dir in results:
        for block in out_dir.iterdir():
            shutil.move(str(block), data_dir / block.name)
        out_dir.rmdir()
    writes = [r[0] for r in results]
    return BackfillStats(
        series=writes[0].series,
        samples=sum(w.samples for w in writes),
        bytes=sum(w.bytes for w in writes),
        generate_seconds=max(w.seconds for w in writes),
        promtool_seconds=max(r[1] for r in results),
        wall_seconds=time.perf_counter() - started,
    )
