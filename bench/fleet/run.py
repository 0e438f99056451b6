"""The fleet benchmark's driver: one run per fleet size, then the report (see the package doc)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import BENCHMARKS, write_section
from bench.fleet.baseline import previous_gpu_group
from bench.fleet.data import FleetShape, backfill, data_end
from bench.fleet.live import (
    FleetExporter,
    baseline_group,
    collect_group_evaluations,
    gpu_alert_group_alone,
    group_timings,
    part_costs,
    targets,
)
from bench.fleet.query_timing import GroupTiming, Timing, first_label_values, recording_levels, time_panel
from bench.fleet.report import BEGIN, END, GROUPS_BEGIN, GROUPS_END, ScaleResult, render, render_rule_groups
from bench.fleet.values import Patterns
from dashboards import build_all
from dashboards.queries import PanelQuery, panel_queries
from harness.ports import free_port
from harness.prometheus import PrometheusApi, PrometheusError, PrometheusServer, binary, config_yaml
from observability.config import ObservabilityConfig
from observability.rules import health, rule_groups
from observability.rules.render import dump_groups

# Equal minimum and maximum block durations: Prometheus never compacts the backfilled blocks into
# larger ones (it still merges overlapping ones, which the benchmark waits for before timing).
PROMETHEUS_ARGS = (
    "--storage.tsdb.min-block-duration=2h",
    "--storage.tsdb.max-block-duration=2h",
    "--storage.tsdb.retention.time=3650d",
)


# Live rule evaluation: wait until the widest rate window a GPU rule reads ([2m]) is full, then
# record this many evaluations of every group.
LIVE_WARMUP_SECONDS = 150
LIVE_EVALUATIONS = 6


def prometheus_queries(cfg: ObservabilityConfig, api: PrometheusApi) -> list[PanelQuery]:
    """Every Prometheus target of every dashboard, its variables as Grafana sets them on load."""
    queries = []
    for dashboard in build_all(cfg).values():
        chosen = first_label_values(dashboard, api)
        for query in panel_queries(dashboard):
            if query.datasource_type == "prometheus":
                queries.append(dataclasses.replace(query, variables={**query.variables, **chosen}))
    return queries


def _server(workdir: Path, data_dir: Path, name: str) -> PrometheusServer:
    return PrometheusServer(
        workdir / name, config_yaml([], []), data_dir=data_dir, extra_args=PROMETHEUS_ARGS, api_timeout=300.0
    )


def backfill_recording_rules(
    workdir: Path, data_dir: Path, cfg: ObservabilityConfig, shape: FleetShape, end: int
) -> float:
    """Backfill every recording rule over the hour, one dependency level at a time."""
    started = time.perf_counter()
    start = end - shape.duration_seconds + shape.interval_seconds
    for level, groups in enumerate(recording_levels(rule_groups(cfg))):
        rules_path = workdir / f"recording-level-{level}.yml"
        rules_path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
        out_dir = workdir / f"recording-blocks-{level}"
        with _server(workdir, data_dir, f"prometheus-rules-{level}") as prometheus:
            command = [
                binary("promtool"),
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={start}",
                f"--end={end + 1}",
                f"--url={prometheus.url}",
                f"--output-dir={out_dir}",
                f"--eval-interval={cfg.evaluation_interval_seconds}s",
                str(rules_path),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"recording-rule backfill failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        for block in out_dir.iterdir():
            shutil.move(str(block), data_dir / block.name)
        out_dir.rmdir()
    return time.perf_counter() - started


def _blocks_loaded(prometheus: PrometheusServer) -> int:
    _, body = prometheus.api.get_raw("/metrics")
    for line in body.decode().splitlines():
        if line.startswith("prometheus_tsdb_blocks_loaded "):
            return int(float(line.split()[1]))
    raise PrometheusError("prometheus_tsdb_blocks_loaded missing from /metrics")


def wait_compacted(prometheus: PrometheusServer, timeout: float = 900.0) -> float:
    """Wait until Prometheus has merged the overlapping backfilled blocks into one (its compaction
    loop first runs a minute after start); returns the seconds waited."""
    started = time.perf_counter()
    while _blocks_loaded(prometheus) > 1:
        if time.perf_counter() - started > timeout:
            raise PrometheusError(f"blocks not compacted after {timeout:.0f}s:\n{prometheus.log_tail()}")
        time.sleep(2)
    return time.perf_counter() - started


def run_scale(
    root: Path, cfg: ObservabilityConfig, shape: FleetShape, repeat: int, warmup: float, previous: bool = False
) -> ScaleResult:
    """One fleet size; with `previous`, the GPU alert group of the previous design is timed as well,
    alone with the baseline on a second live Prometheus (so it contends with nothing)."""
    workdir = root / f"fleet-{shape.nodes}"
    data_dir = workdir / "data"
    end = data_end(time.time(), shape)
    print(f"fleet {shape.nodes} nodes: generating and backfilling one hour ...", flush=True)
    backfilled = backfill(workdir / "generate", data_dir, cfg, shape, end)
    print(
        f"  {backfilled.series:,} series, {backfilled.samples:,} samples in {backfilled.wall_seconds:.0f}s", flush=True
    )
    rules_seconds = backfill_recording_rules(workdir, data_dir, cfg, shape, end)
    print(f"  recording rules backfilled in {rules_seconds:.0f}s; waiting for compaction ...", flush=True)
    with _server(workdir, data_dir, "prometheus-timing") as prometheus:
        compaction = wait_compacted(prometheus)
        print(f"  compacted in {compaction:.0f}s; timing panels and rule groups ...", flush=True)
        panels = []
        for query in prometheus_queries(cfg, prometheus.api):
            panels.append(time_panel(prometheus.api, query, end, repeat))
            print(
                f"    {_describe(panels[-1].range)} {query.dashboard_uid} / {query.panel_title} ({query.ref_id})",
                flush=True,
            )
    shutil.rmtree(workdir, ignore_errors=True)
    groups = time_rule_groups_live(workdir, cfg, shape, warmup)
    shutil.rmtree(workdir, ignore_errors=True)
    before: list[GroupTiming] = []
    if previous:
        print("  live: the previous design's GPU alert group ...", flush=True)
        before = time_rule_groups_live(workdir, cfg, shape, warmup, [previous_gpu_group(cfg), baseline_group(cfg)])
        shutil.rmtree(workdir, ignore_errors=True)
    alone: dict[str, float] = {}
    if previous:
        print("  live: the GPU alert group alone, with its yardstick and floor ...", flush=True)
        sequenced = gpu_alert_group_alone(cfg)
        (timing,) = time_rule_groups_live(workdir, cfg, shape, warmup, [sequenced.group])
        shutil.rmtree(workdir, ignore_errors=True)
        alone = part_costs(sequenced, timing) if not timing.total.error else {}
    return ScaleResult(shape, backfilled, rules_seconds, compaction, panels, groups, before, alone)


def time_rule_groups_live(
    workdir: Path,
    cfg: ObservabilityConfig,
    shape: FleetShape,
    warmup: float,
    rule_groups_to_time: list[dict[str, Any]] | None = None,
) -> list[GroupTiming]:
    """Every rule group (and the baseline), or the given groups, evaluated by Prometheus on a live
    scrape of the fleet."""
    interval = shape.interval_seconds
    scrape_wait = 3 * interval + 30  # the first scrape of every target
    collect_wait = (LIVE_EVALUATIONS + 4) * interval * 2  # evaluations, with slack for slow groups
    # Values for every scrape of the live phase (they hold at the last one after that).
    samples = int((scrape_wait + warmup + collect_wait) // interval) + 1
    fleet = targets(cfg, shape, Patterns(samples, interval, int(time.time())))
    groups = rule_groups_to_time or [*rule_groups(cfg), baseline_group(cfg)]
    print(f"  live: {len(fleet)} targets scraped every {interval}s, {len(groups)} rule groups ...", flush=True)
    with FleetExporter(fleet, interval) as exporter:
        # Prometheus scrapes itself, as in production: the health group reads its rule-group metrics.
        port = free_port()
        self_scrape = {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        config = config_yaml(
            [*exporter.scrape_configs(), self_scrape],
            ["rules.yml"],
            scrape_interval=f"{interval}s",
            evaluation_interval=f"{cfg.evaluation_interval_seconds}s",
        )
        with PrometheusServer(
            workdir / "prometheus-live", config, {"rules.yml": dump_groups(groups)}, port=port
        ) as prometheus:
            exporter.wait_scraped(prometheus.api, timeout=scrape_wait)
            time.sleep(warmup)
            evaluations = collect_group_evaluations(
                prometheus.api,
                [str(g["name"]) for g in groups],
                LIVE_EVALUATIONS,
                timeout=collect_wait,
            )
            timed = group_timings(prometheus.api, evaluations, groups)
    for group in timed:
        print(f"    {_describe(group.total)} rule group {group.name}", flush=True)
    return timed


def _describe(timing: Timing) -> str:
    if timing.error:
        return f"FAILED ({timing.error[:80]})"
    return f"{timing.median_ms:8.1f} ms {timing.series:6d} series"


def _machine() -> str:
    return f"{os.cpu_count()} CPU cores, {platform.machine()}, Prometheus 2.42 (Debian)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--nodes", default="100,1000", help="comma-separated fleet sizes (default 100,1000)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50, help="concurrent training jobs")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per query after a warm-up")
    parser.add_argument(
        "--live-warmup",
        type=float,
        default=LIVE_WARMUP_SECONDS,
        help="seconds of live scraping before rule evaluations are recorded",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    parser.add_argument(
        "--rule-groups-only",
        action="store_true",
        help="only the live rule-group half (no backfill, no panels); writes its own section",
    )
    args = parser.parse_args(argv if argv is not None else [])
    cfg = ObservabilityConfig()
    sizes = sorted({int(n) for n in args.nodes.split(",") if n})
    command = "make bench" if argv is None else "python -m bench.fleet " + " ".join(argv)
    if args.rule_groups_only:
        with tempfile.TemporaryDirectory(prefix="fleet-groups-", dir=args.workdir) as scratch:
            timed = []
            for n in sizes:
                shape = FleetShape(n, args.gpus_per_node, args.jobs)
                print(f"fleet {n} nodes: rule groups on a live fleet ...", flush=True)
                timed.append((shape, time_rule_groups_live(Path(scratch) / f"fleet-{n}", cfg, shape, args.live_warmup)))
        section = render_rule_groups(timed, command, _machine(), args.live_warmup, LIVE_EVALUATIONS, health.GROUP)
        if args.no_write:
            print(section)
        else:
            write_section(section, GROUPS_BEGIN, GROUPS_END)
            print(f"fleet: wrote the rule-groups section of {BENCHMARKS}")
        return 0
    with tempfile.TemporaryDirectory(prefix="fleet-bench-", dir=args.workdir) as scratch:
        results = [
            run_scale(
                Path(scratch),
                cfg,
                FleetShape(n, args.gpus_per_node, args.jobs),
                args.repeat,
                args.live_warmup,
                previous=n == max(sizes),
            )
            for n in sizes
        ]
    section = render(results, command, _machine(), args.repeat, args.live_warmup, LIVE_EVALUATIONS)
    if args.no_write:
        print(section)
    else:
        write_section(section, BEGIN, END)
        print(f"fleet: wrote the Fleet scale section of {BENCHMARKS}")
    return 0
