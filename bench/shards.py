"""Sharded fleet benchmark: each shard's rule-group cost and the global tier's, at 1, 2 and 4 shards.

`python -m bench shards` (part of `make bench`) or `python -m bench.shards --nodes 1000 --shards 1,2,4`:
for each shard count, the synthetic fleet (the same series and values as the fleet benchmark's
live half) listens on one port per target; that many Prometheus shards scrape it by `hashmod`,
evaluate the shard tier of the rules (`rules-shard.yaml`) and remote-write to a global Prometheus
that evaluates the global tier (`rules-global.yaml`, `bench.fleet.sharded_topology`). After a warm-up, every
group's evaluation time is read from each server's rule manager, and expressed in whole-fleet
reads: the baseline group (`count()` over every GPU's series of one metric) evaluated by the
global tier, which holds the whole fleet, in the same run. Writes the "Sharded fleet" section of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import BENCHMARKS, write_section
from bench.fleet.data import FleetShape
from bench.fleet.live import (
    BASELINE_GROUP,
    Target,
    baseline_group,
    collect_group_evaluations,
    group_timings,
    targets,
)
from bench.fleet.query_timing import GroupTiming
from bench.fleet.sharded_topology import TargetServers, Topology, start_topology
from bench.fleet.values import Patterns
from harness.prometheus import PrometheusApi, PrometheusServer
from observability.config import ObservabilityConfig, RemoteWrite
from observability.rules import Tier, tier_rule_groups
from observability.rules.render import dump_groups

BEGIN = "<!-- sharded-fleet:begin (written by `python -m bench shards`) -->"
END = "<!-- sharded-fleet:end -->"
WARMUP_SECONDS = 150  # the widest rate window a GPU rule reads ([2m]) is full
EVALUATIONS = 6
ISOLATED_EVALUATIONS = 3


class DiscardingReceiver:
    """A remote-write endpoint on 127.0.0.1 that reads each request and answers 204: the shards write
    one mode's stream to it when no global Prometheus for that mode fits the machine (the samples
    they send are counted by the shards' own `prometheus_remote_storage_samples_total`)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v1/write"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DiscardingReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class AdvancingPages:
    """The fleet's `/metrics` pages; values advance one sample per scrape interval (then hold)."""

    def __init__(self, fleet: list[Target], interval: int) -> None:
        self._fleet = fleet
        self._interval = interval
        self._started = time.monotonic()

    def page(self, index: int) -> bytes | None:
        if not 0 <= index < len(self._fleet):
            return None
        lines = self._fleet[index].lines
        if not lines:
            return b""
        at = min(int((time.monotonic() - self._started) // self._interval), len(lines[0][1]) - 1)
        return "".join(f"{prefix}{values[at]}\n" for prefix, values in lines).encode()


def _self_metrics(api: PrometheusApi) -> dict[str, float]:
    """The sums of the remote-write and head-series counters a Prometheus exposes about itself."""
    status, body = api.get_raw("/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered HTTP {status}")
    wanted = {"prometheus_remote_storage_samples_total", "prometheus_tsdb_head_series",
              "prometheus_remote_storage_bytes_total", "process_resident_memory_bytes",
              "process_cpu_seconds_total"}  # fmt: skip
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in wanted:
                key = sample.name + "/" + sample.labels.get("remote_name", "")
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


@dataclass(frozen=True)
class Isolated:
    """One server's tier timed while every other Prometheus of the topology is stopped (SIGSTOP),
    so it has the machine's cores to itself, as a server of its own would: what its evaluations
    cost, from the series it holds. A global tier evaluates the partials it last received (the
    shards are stopped, its windows of 5 m and more stay full); a shard keeps scraping its targets."""

    ms: float  # the sum over its groups of each group's median evaluation
    cpu_ms_per_interval: float  # its process's CPU over the timed minutes, per evaluation interval
    missing: tuple[str, ...] = ()  # groups not evaluated in the time allowed


@contextmanager
def _stopped(servers: Sequence[PrometheusServer]) -> Iterator[None]:
    """SIGSTOP every server for the block, and SIGCONT them after it whatever happens."""
    pids = [s.pid for s in servers if s.pid is not None]
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def isolated(
    server: PrometheusServer, topology: Topology, names: Sequence[str], interval: int, evaluations: int
) -> Isolated:
    """Time `server`'s groups `names` over `evaluations` new evaluations with every other server of
    `topology` stopped."""
    others = [s for s in topology.servers if s is not server]
    with _stopped(others):
        cpu = "process_cpu_seconds_total/"
        before, started = _self_metrics(server.api).get(cpu, 0.0), time.monotonic()
        wait = (evaluations + 2) * interval * 2
        seen = collect_group_evaluations(server.api, names, evaluations, wait, only_new=True)
        after, elapsed = _self_metrics(server.api).get(cpu, 0.0), time.monotonic() - started
    timed = [n for n in names if n != BASELINE_GROUP]
    missing = tuple(n for n in timed if n not in seen or len(seen[n].totals) < evaluations)
    ms = sum(1000 * statistics.median(seen[n].totals) for n in timed if n in seen and seen[n].totals)
    return Isolated(ms, 1000 * (after - before) / elapsed * interval, missing)


@dataclass(frozen=True)
class ShardRun:
    shards: int
    targets_per_shard: tuple[int, ...]
    per_shard: tuple[tuple[GroupTiming, ...], ...]  # each shard's shard-tier groups
    global_tier: tuple[GroupTiming, ...]  # the global tier's groups, the baseline last
    nodes: int = 0
    interval: int = 15
    # Per remote-write mode (the first is `global_tier`'s): its global tier's groups, the samples
    # per second every shard together wrote to it, and its head series.
    modes: tuple[RemoteWrite, ...] = ()
    global_by_mode: tuple[tuple[GroupTiming, ...], ...] = ()
    samples_per_second: tuple[float, ...] = ()
    head_series: tuple[int, ...] = ()
    resident_bytes: tuple[int, ...] = ()  # per mode: the global tier's resident memory
    shard_resident_bytes: tuple[int, ...] = ()  # each shard's
    # Modes whose stream went to a discarding receiver (no global tier): samples/s written in each.
    sunk_modes: tuple[RemoteWrite, ...] = ()
    sunk_samples_per_second: tuple[float, ...] = ()
    shard_head_series: tuple[int, ...] = ()  # each shard's
    # CPU over the timed minutes, in cores (CPU seconds a second): per mode's global tier, each shard.
    global_cpu_cores: tuple[float, ...] = ()
    shard_cpu_cores: tuple[float, ...] = ()
    # With every other server stopped (`isolated`): per mode's global tier, then each shard's tier.
    global_isolated: tuple[Isolated, ...] = ()
    shard_isolated: tuple[Isolated, ...] = ()

    @property
    def fleet_read_ms(self) -> float:
        baseline = next((g for g in self.global_tier if g.name == BASELINE_GROUP), None)
        if baseline is None or baseline.total.error or not baseline.rule_ms:
            return math.nan
        return baseline.rule_ms[0][1]


def run_shards(
    root: Path,
    shape: FleetShape,
    shards: int,
    warmup: float,
    modes: tuple[RemoteWrite, ...] = (RemoteWrite.ALL,),
    sunk: tuple[RemoteWrite, ...] = (),
) -> ShardRun:
    cfg = ObservabilityConfig(shards=shards, cluster="bench", clusters=("bench",))
    interval = shape.interval_seconds
    collect_wait = (EVALUATIONS + 4) * interval * 2
    samples = int((60 + warmup + collect_wait) // interval) + 1
    fleet = targets(cfg, shape, Patterns(samples, interval, int(time.time())))
    tiers = tier_rule_groups(cfg)
    global_groups = [*tiers[Tier.GLOBAL], baseline_group(cfg)]
    rules = {Tier.SHARD: dump_groups(tiers[Tier.SHARD]), Tier.GLOBAL: dump_groups(global_groups)}
    print(f"  {shards} shard(s): {len(fleet)} targets on their own ports ...", flush=True)
    pages = AdvancingPages(fleet, interval)
    with TargetServers(len(fleet), pages.page) as servers, DiscardingReceiver() as sink:
        topology = start_topology(root / f"shards-{shape.nodes}-{shards}", cfg, servers, [t.labels for t in fleet],
                                  reference=False, rules=rules, modes=modes,
                                  sinks={m: sink.url for m in sunk})  # fmt: skip
        try:
            topology.wait_scraping(len(fleet), timeout=120)
            time.sleep(warmup)
            shard_names = [str(g["name"]) for g in tiers[Tier.SHARD]]
            global_names = [str(g["name"]) for g in global_groups]
            # Every server's evaluations are recorded over the same minutes (one thread each).
            before, started = [_self_metrics(s.api) for s in topology.shards], time.monotonic()
            global_before = [_self_metrics(g.api) for g in topology.global_tiers.values()]
            with ThreadPoolExecutor(max_workers=len(topology.servers)) as pool:
                shard_seen = [
                    pool.submit(collect_group_evaluations, s.api, shard_names, EVALUATIONS, collect_wait)
                    for s in topology.shards
                ]
                global_seen = [
                    pool.submit(collect_group_evaluations, g.api, global_names, EVALUATIONS, collect_wait)
                    for g in topology.global_tiers.values()
                ]
                per_shard = [
                    tuple(group_timings(s.api, seen.result(), tiers[Tier.SHARD]))
                    for s, seen in zip(topology.shards, shard_seen, strict=True)
                ]
                by_mode = tuple(
                    tuple(group_timings(g.api, seen.result(), global_groups))
                    for g, seen in zip(topology.global_tiers.values(), global_seen, strict=True)
                )
            after, elapsed = [_self_metrics(s.api) for s in topology.shards], time.monotonic() - started
            key = "prometheus_remote_storage_samples_total/"
            rates = tuple(
                sum(a.get(key + m.value, 0.0) - b.get(key + m.value, 0.0) for a, b in zip(after, before, strict=True))
                / elapsed
                for m in (*topology.global_tiers, *sunk)
            )
            global_self = [_self_metrics(g.api) for g in topology.global_tiers.values()]
            cpu = "process_cpu_seconds_total/"
            global_cores = tuple(
                (a.get(cpu, 0.0) - b.get(cpu, 0.0)) / elapsed for a, b in zip(global_self, global_before, strict=True)
            )
            shard_cores = tuple(
                (a.get(cpu, 0.0) - b.get(cpu, 0.0)) / elapsed for a, b in zip(after, before, strict=True)
            )
            heads = tuple(int(m.get("prometheus_tsdb_head_series/", 0)) for m in global_self)
            resident = tuple(int(m.get("process_resident_memory_bytes/", 0)) for m in global_self)
            shard_resident = tuple(int(m.get("process_resident_memory_bytes/", 0)) for m in after)
            shard_heads = tuple(int(m.get("prometheus_tsdb_head_series/", 0)) for m in after)
            counts = [len(s.api.get("/api/v1/targets", {"state": "active"})["activeTargets"]) for s in topology.shards]
            # Then each tier alone: the global tiers first (the shards' last partials are freshest),
            # then every shard.
            global_alone = tuple(
                isolated(g, topology, global_names, interval, ISOLATED_EVALUATIONS)
                for g in topology.global_tiers.values()
            )
            shard_alone = tuple(
                isolated(s, topology, shard_names, interval, ISOLATED_EVALUATIONS) for s in topology.shards
            )
        finally:
            topology.stop()
    run = ShardRun(shards, tuple(counts), tuple(per_shard), by_mode[0], shape.nodes, interval,
                   tuple(topology.global_tiers), by_mode, rates[: len(modes)], heads, resident, shard_resident,
                   sunk, rates[len(modes) :], shard_heads, global_cores, shard_cores, global_alone,
                   shard_alone)  # fmt: skip
    for i, timed in enumerate(run.per_shard):
        total = sum(g.total.median_ms for g in timed if not g.total.error)
        print(f"    shard {i}: {run.targets_per_shard[i]} targets, shard tier {total:.0f} ms an evaluation, "
              f"{run.shard_cpu_cores[i]:.2f} cores", flush=True)  # fmt: skip
    for mode, timed, rate, head, rss, cores in zip(
        run.modes, run.global_by_mode, run.samples_per_second, run.head_series, run.resident_bytes,
        run.global_cpu_cores, strict=True,
    ):  # fmt: skip
        total = _global_ms(timed)
        print(f"    global tier ({mode.value}) {total:.0f} ms an evaluation, {rate:.0f} samples/s written to it, "
              f"{head} head series, {rss / 2**20:.0f} MiB resident, {cores:.3f} cores", flush=True)  # fmt: skip
    for mode, alone in zip(run.modes, run.global_isolated, strict=True):
        print(f"    alone: global tier ({mode.value}) {alone.ms:.0f} ms an evaluation, "
              f"{alone.cpu_ms_per_interval:.0f} ms CPU an interval{_missing(alone)}", flush=True)  # fmt: skip
    for i, alone in enumerate(run.shard_isolated):
        print(f"    alone: shard {i} ({run.targets_per_shard[i]} targets) {alone.ms:.0f} ms an evaluation, "
              f"{alone.cpu_ms_per_interval:.0f} ms CPU an interval{_missing(alone)}", flush=True)  # fmt: skip
    for mode, rate in zip(run.sunk_modes, run.sunk_samples_per_second, strict=True):
        print(f"    {mode.value} stream: {rate:.0f} samples/s written to a discarding receiver", flush=True)
    print(f"    whole-fleet read {run.fleet_read_ms:.0f} ms", flush=True)
    return run


def _missing(alone: Isolated) -> str:
    return f" (not evaluated in time: {', '.join(alone.missing)})" if alone.missing else ""


def _global_ms(timed: tuple[GroupTiming, ...]) -> float:
    return sum(g.total.median_ms for g in timed if g.name != BASELINE_GROUP and not g.total.error)


def _reads(ms: float, read: float) -> str:
    if math.isnan(ms) or math.isnan(read) or read <= 0:
        return "n/a"
    return f"{ms / read:.1f}"


def _cell(timing: GroupTiming | None, read: float) -> str:
    if timing is None:
        return "-"
    if timing.total.error:
        return f"failed: {timing.total.error[:40]}"
    return f"{_ms(timing.total.median_ms)} ms ({_reads(timing.total.median_ms, read)})"


def _ms_or_not_run(value: float) -> str:
    return "not run" if math.isnan(value) else f"{_ms(value)} ms"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def render(runs: list[ShardRun], shape: FleetShape, command: str, machine: str, warmup: float) -> str:
    lines = [
        BEGIN,
        "## Sharded fleet",
        "",
        f"Command: `{command}` ({machine}). {shape.nodes} nodes x {shape.gpus_per_node} GPUs and "
        f"{shape.training_jobs} training jobs (the fleet benchmark's live series and values), every target on its "
        f"own 127.0.0.1 port, scraped every {shape.interval_seconds} s by N Prometheus 2.42 shards (`hashmod` "
        "on the node of the pod, the rendered relabelling) that evaluate `rules-shard.yaml` and remote-write "
        "everything to one global Prometheus (`--web.enable-remote-write-receiver`) evaluating "
        f"`rules-global.yaml`. After {warmup:.0f} s of scraping, the median of {EVALUATIONS} evaluations of each "
        "group as each server's rule manager timed it. All servers and the fleet share this machine's cores, "
        "so the figures of one run compare with each other, not with a dedicated server.",
        "",
        "Cells: median ms an evaluation (whole-fleet reads: the median over the cost of one `count()` over "
        "every GPU's series of one metric, evaluated by the global tier, which holds the whole fleet, in the "
        "same run). Shard columns give the slowest shard; the global tier's groups are the same at every N.",
        "",
    ]
    header = "| group | tier |" + "".join(f" {r.shards} shard(s) |" for r in runs)
    lines += [header, "|---|---|" + "---:|" * len(runs)]
    shard_names = [str(g.name) for g in runs[0].per_shard[0]] if runs and runs[0].per_shard else []
    for name in shard_names:
        cells = []
        for run in runs:
            timings = [t for shard in run.per_shard for t in shard if t.name == name]
            slowest = max(timings, key=lambda t: -1 if t.total.error else t.total.median_ms, default=None)
            cells.append(_cell(slowest, run.fleet_read_ms))
        lines.append(f"| {name} | shard |" + "".join(f" {c} |" for c in cells))
    global_names = [g.name for g in runs[0].global_tier if g.name != BASELINE_GROUP] if runs else []
    for name in global_names:
        cells = [_cell(next((t for t in r.global_tier if t.name == name), None), r.fleet_read_ms) for r in runs]
        lines.append(f"| {name} | global |" + "".join(f" {c} |" for c in cells))
    lines += ["", "| per evaluation | " + " | ".join(f"{r.shards} shard(s)" for r in runs) + " |"]
    lines.append("|---|" + "---:|" * len(runs))
    lines.append("| targets per shard | " + " | ".join(", ".join(map(str, r.targets_per_shard)) for r in runs) + " |")
    lines.append("| whole-fleet read (baseline), ms | " + " | ".join(_ms(r.fleet_read_ms) for r in runs) + " |")
    for label, pick in (("slowest shard's shard tier", max), ("fastest shard's shard tier", min)):
        cells = []
        for r in runs:
            totals = [sum(t.total.median_ms for t in shard if not t.total.error) for shard in r.per_shard]
            value = pick(totals) if totals else math.nan
            cells.append(f"{_ms(value)} ms ({_reads(value, r.fleet_read_ms)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for r in runs:
        value = sum(t.total.median_ms for t in r.global_tier if t.name != BASELINE_GROUP and not t.total.error)
        cells.append(f"{_ms(value)} ms ({_reads(value, r.fleet_read_ms)})")
    lines.append("| global tier | " + " | ".join(cells) + " |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


SCALING_BEGIN = "<!-- sharded-scaling:begin (written by `python -m bench.shards --scaling`) -->"
SCALING_END = "<!-- sharded-scaling:end -->"


def render_scaling(runs: list[ShardRun], shape: FleetShape, command: str, machine: str, warmup: float) -> str:
    """The "Sharded fleet at scale" section: per fleet size, each shard's tier and the global tier's
    cost in both remote-write modes, and what the shards write to each global tier."""
    lines = [
        SCALING_BEGIN,
        "## Sharded fleet at scale: partial aggregation",
        "",
        f"Command: `{command}` ({machine}). {_gpus_a_node(shape)}, {shape.training_jobs} training "
        "jobs, every target on its own 127.0.0.1 port, scraped by the shards (`hashmod` on the node); each shard "
        "evaluates `rules-shard.yaml` (its partials included) and remote-writes two streams at once: everything "
        "(`remoteWrite: all`) and the aggregates (`remoteWrite: aggregates`), each to its own global Prometheus "
        "evaluating the same `rules-global.yaml`"
        + (
            " (except the "
            + ", ".join(f"`{m.value}`" for m in runs[0].sunk_modes)
            + " stream, written to a receiver that discards it: a global Prometheus holding every series does "
            "not fit this machine beside the shards at these sizes; its cost at 1,000 nodes is in the "
            "section above)"
            if runs[0].sunk_modes
            else ""
        )
        + f". {_memory_limit_note()}After "
        f"{warmup:.0f} s of scraping, the median of {EVALUATIONS} evaluations of each group as each server's rule "
        "manager timed it; samples/s from the shards' `prometheus_remote_storage_samples_total` over the same "
        "minutes. Every process shares this machine's cores (the machine is shared with other work): compare "
        "within a run.",
        "",
        "| nodes (GPUs) | shards | targets per shard | slowest / fastest shard tier | global tier, all | "
        "global tier, aggregates | share of interval (aggregates) | samples/s written, all | "
        "samples/s, aggregates | all / aggregates | head series, all (without a global `all` tier: the "
        "shards' together) / aggregates | "
        "resident memory, all / aggregates / largest shard | CPU (cores), global aggregates / busiest shard |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in runs:
        totals = [sum(t.total.median_ms for t in shard if not t.total.error) for shard in r.per_shard]
        by = dict(zip(r.modes, r.global_by_mode, strict=True))
        rate = dict(zip(r.modes, r.samples_per_second, strict=True)) | dict(
            zip(r.sunk_modes, r.sunk_samples_per_second, strict=True)
        )
        head = dict(zip(r.modes, r.head_series, strict=True))
        rss = dict(zip(r.modes, r.resident_bytes, strict=True))
        cores = dict(zip(r.modes, r.global_cpu_cores, strict=True))
        g_all = _global_ms(by[RemoteWrite.ALL]) if RemoteWrite.ALL in by else math.nan
        g_agg = _global_ms(by[RemoteWrite.AGGREGATES]) if RemoteWrite.AGGREGATES in by else math.nan
        r_all, r_agg = rate.get(RemoteWrite.ALL, math.nan), rate.get(RemoteWrite.AGGREGATES, math.nan)
        lines.append(
            f"| {r.nodes:,} ({r.nodes * shape.gpus_per_node:,}) | {r.shards} | "
            f"{', '.join(map(str, r.targets_per_shard))} | {_ms(max(totals))} / {_ms(min(totals))} ms | "
            f"{_ms_or_not_run(g_all)} | {_ms_or_not_run(g_agg)} | {100 * g_agg / (1000 * r.interval):.1f} % | "
            f"{r_all:,.0f} | {r_agg:,.0f} | {r_all / r_agg:.1f}x | "
            f"{head.get(RemoteWrite.ALL, 0) or sum(r.shard_head_series):,} / "
            f"{head.get(RemoteWrite.AGGREGATES, 0):,} | {_mib(rss.get(RemoteWrite.ALL, 0))} / "
            f"{_mib(rss.get(RemoteWrite.AGGREGATES, 0))} / {_mib(max(r.shard_resident_bytes, default=0))} | "
            f"{cores.get(RemoteWrite.AGGREGATES, math.nan):.3f} / {max(r.shard_cpu_cores, default=math.nan):.2f} |"
        )
    if len(runs) > 1:
        first, last = runs[0], runs[-1]
        growth = {
            m.value: _global_ms(last.global_by_mode[i]) / _global_ms(first.global_by_mode[i])
            for i, m in enumerate(first.modes)
        }
        shard_growth = max(sum(t.total.median_ms for t in s if not t.total.error) for s in last.per_shard) / max(
            sum(t.total.median_ms for t in s if not t.total.error) for s in first.per_shard
        )
        targets = max(last.targets_per_shard) / max(first.targets_per_shard)
        lines += [
            "",
            f"From {first.nodes:,} to {last.nodes:,} nodes ({last.nodes / first.nodes:.1f}x): the global tier's "
            "evaluation grows "
            + ", ".join(f"{v:.2f}x ({k})" for k, v in growth.items())
            + f"; the slowest shard's tier {shard_growth:.2f}x for {targets:.2f}x the targets of its shard.",
        ]
    if any(r.global_isolated for r in runs):
        lines += ["", *render_isolated(runs, shape)]
    if len(runs) > 1:
        lines += ["", *sizing(runs, shape)]
    lines += ["", SCALING_END]
    return "\n".join(lines) + "\n"


def _aggregates_alone(run: ShardRun) -> Isolated | None:
    """The `aggregates` global tier timed alone, where the run had one."""
    return dict(zip(run.modes, run.global_isolated, strict=True)).get(RemoteWrite.AGGREGATES)


def render_isolated(runs: list[ShardRun], shape: FleetShape) -> list[str]:
    """Each tier alone (`isolated`): what an evaluation costs a server with the cores to itself."""
    lines = [
        f"Each tier alone, after the minutes above: every other Prometheus stopped (SIGSTOP) while one server's "
        f"next {ISOLATED_EVALUATIONS} evaluations are timed, the global tier first (evaluating the partials it "
        "last received), then each shard (still scraping its targets); then all continue. The sum over the "
        "groups of each group's median evaluation, and the server's CPU per evaluation interval (rules, and "
        "for a shard its scrapes):",
        "",
        "| nodes (GPUs) | global tier alone: evaluation (share of interval) / CPU an interval | "
        "each shard alone: evaluation (targets) | shard evaluation per 100 targets, min-max | "
        "shard CPU an interval, min-max |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        g = _aggregates_alone(r)
        cell = (
            f"{_ms(g.ms)} ms ({100 * g.ms / (1000 * r.interval):.1f} %) / {_ms(g.cpu_ms_per_interval)} ms{_missing(g)}"
            if g
            else "not run"
        )
        shards = ", ".join(
            f"{_ms(a.ms)} ms ({t}){_missing(a)}" for a, t in zip(r.shard_isolated, r.targets_per_shard, strict=True)
        )
        per_100 = [100 * a.ms / t for a, t in zip(r.shard_isolated, r.targets_per_shard, strict=True) if t]
        cpu = [a.cpu_ms_per_interval for a in r.shard_isolated]
        lines.append(
            f"| {r.nodes:,} ({r.nodes * shape.gpus_per_node:,}) | {cell} | {shards} | "
            f"{_ms(min(per_100, default=math.nan))}-{_ms(max(per_100, default=math.nan))} ms | "
            f"{_ms(min(cpu, default=math.nan))}-{_ms(max(cpu, default=math.nan))} ms |"
        )
    alone = [(r, g) for r in runs if (g := _aggregates_alone(r)) is not None]
    if len(alone) > 1:
        (first, g0), (last, g1) = alone[0], alone[-1]
        s0 = sum(a.ms for a in first.shard_isolated) / sum(first.targets_per_shard)
        s1 = sum(a.ms for a in last.shard_isolated) / sum(last.targets_per_shard)
        cpu_growth = g1.cpu_ms_per_interval / g0.cpu_ms_per_interval
        targets = max(last.targets_per_shard) / max(first.targets_per_shard)
        lines += [
            "",
            f"Alone, from {first.nodes:,} to {last.nodes:,} nodes ({last.nodes / first.nodes:.1f}x): the global "
            f"tier's evaluation grows {g1.ms / g0.ms:.2f}x (its CPU an interval {cpu_growth:.2f}x); a shard's "
            f"evaluation per target {s1 / s0:.2f}x for {targets:.2f}x the targets of a shard.",
        ]
    return lines


SIZING_NODES = (1_000, 4_000, 10_000)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line through the measured points: (intercept, slope per node)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def sizing(runs: list[ShardRun], shape: FleetShape) -> list[str]:
    """A global Prometheus at 1,000, 4,000 and 10,000 nodes in each remote-write mode: a straight line
    through the measured sizes (head series, ingest and resident memory grow with what the shards
    write; evaluation with what the global rules read), marked as measured where a run had that size."""
    nodes = [float(r.nodes) for r in runs]
    lines = [
        "Sizing a global Prometheus: a least-squares line through the sizes measured above "
        f"({', '.join(f'{r.nodes:,}' for r in runs)} nodes, {_gpus_a_node(shape)}), evaluated at "
        "each size; values at a measured size are the fit, not the measurement. Resident memory is the "
        "server's own `process_resident_memory_bytes` after the warm-up (it grows further with retention "
        "and queries: leave headroom); rule evaluation is the tier's beside the shards (an upper bound: it "
        "includes waiting for a core; the tier alone is in the table above).",
        "",
        "| mode | nodes | head series | samples/s ingested | rule evaluation (ms, share of interval) | "
        "resident memory | CPU (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for i, mode in enumerate(runs[0].modes):
        fits = [
            _fit(nodes, [float(r.head_series[i]) for r in runs]),
            _fit(nodes, [r.samples_per_second[i] for r in runs]),
            _fit(nodes, [_global_ms(r.global_by_mode[i]) for r in runs]),
            _fit(nodes, [float(r.resident_bytes[i]) for r in runs]),
            _fit(nodes, [r.global_cpu_cores[i] for r in runs]),
        ]
        for size in SIZING_NODES:
            head, ingest, ms, rss, cores = (max(0.0, a + b * size) for a, b in fits)
            lines.append(
                f"| {mode.value} | {size:,} | {head:,.0f} | {ingest:,.0f} | {ms:,.0f} "
                f"({100 * ms / (1000 * runs[0].interval):.1f} %) | {_mib(int(rss))} | {cores:.2f} |"
            )
    return lines


MEMORY_LIMIT_ENV = "GOMEMLIMIT"


def _memory_limit_note() -> str:
    limit = os.environ.get(MEMORY_LIMIT_ENV)
    return (
        f"Every Prometheus runs with `{MEMORY_LIMIT_ENV}={limit}` (the Go runtime's soft memory limit, as a server "
        "in a container sets it below the container's limit). "
        if limit
        else ""
    )


def _gpus_a_node(shape: FleetShape) -> str:
    return f"{shape.gpus_per_node} GPU{'' if shape.gpus_per_node == 1 else 's'} a node"


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB" if value else "n/a"


def _machine() -> str:
    return f"{os.cpu_count()} CPU cores, {platform.machine()}, Prometheus 2.42 (Debian)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__)
    parser.add_argument("--nodes", default="1000", help="comma-separated node counts (default 1000)")
    parser.add_argument(
        "--scaling", action="store_true",
        help="both remote-write modes at each node count (the 'Sharded fleet at scale' section)",
    )  # fmt: skip
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50, help="concurrent training jobs")
    parser.add_argument("--shards", default="1,2,4", help="comma-separated shard counts (default 1,2,4)")
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS, help="seconds of scraping before timing")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    parser.add_argument(
        "--discard-all", action="store_true",
        help="with --scaling: the shards write the `all` stream to a discarding receiver, not a global Prometheus",
    )  # fmt: skip
    parser.add_argument(
        "--memory-limit", default="",
        help=f"{MEMORY_LIMIT_ENV} for every Prometheus started (e.g. 3GiB); default: none",
    )  # fmt: skip
    args = parser.parse_args(argv if argv is not None else [])
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one listening socket per target
    nodes = sorted({int(n) for n in str(args.nodes).split(",") if n})
    counts = sorted({int(n) for n in args.shards.split(",") if n})
    command = "make bench" if argv is None else "python -m bench.shards " + " ".join(argv)
    print(f"sharded fleet: {nodes} nodes, shards {counts}", flush=True)
    with tempfile.TemporaryDirectory(prefix="shards-bench-", dir=args.workdir) as scratch:
        if args.memory_limit:
            os.environ[MEMORY_LIMIT_ENV] = args.memory_limit  # inherited by every Prometheus started
        if args.scaling:
            modes = (RemoteWrite.AGGREGATES,) if args.discard_all else (RemoteWrite.ALL, RemoteWrite.AGGREGATES)
            sunk = (RemoteWrite.ALL,) if args.discard_all else ()
            runs = [
                run_shards(Path(scratch), FleetShape(n, args.gpus_per_node, args.jobs), s, args.warmup, modes, sunk)
                for n in nodes
                for s in counts
            ]
        else:
            shape = FleetShape(nodes[0], args.gpus_per_node, args.jobs)
            runs = [run_shards(Path(scratch), shape, n, args.warmup) for n in counts]
    shape = FleetShape(nodes[0], args.gpus_per_node, args.jobs)
    if args.scaling:
        section, markers = render_scaling(runs, shape, command, _machine(), args.warmup), (SCALING_BEGIN, SCALING_END)
    else:
        section, markers = render(runs, shape, command, _machine(), args.warmup), (BEGIN, END)
    if args.no_write:
        print(section)
    else:
        write_section(section, *markers)
        print(f"shards: wrote the section {markers[0]} of {BENCHMARKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
