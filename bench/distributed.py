"""Distributed training: what the rank and collective timing costs a DDP step, and how fast the
straggler and hang alerts fire at a stack's own scrape interval.

    flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench distributed       # both parts
    .venv/bin/python -m bench.distributed --overhead-only | --detection-only [--stack dev]

Overhead (`bench/_ddp_overhead.py`): two ranks over gloo train two DDP copies of one model side by
side, the plain one (DDP's own all-reduce) and the instrumented one (job phases, per-rank steps,
the timed communication hook and a timed collective, metrics served), alternating in blocks, so
both see the same load; the overhead is the median over pairs of blocks of instrumented / plain - 1.

Detection (`bench/_ddp_trainer.py`): four ranks (torchrun, gloo) scraped by Prometheus 2.42 at the
stack's scrape and evaluation interval with the stack's rendered rules and thresholds: a balanced
phase (no alert may fire), rank 3 made 30 % slower in compute until TrainingRankStraggler fires,
then rank 1 stopped with SIGSTOP until TrainingJobHung fires, and continued.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._prometheus import PrometheusServer, config_yaml, free_port
from bench._report import write_section
from infra import REPO_ROOT
from infra.settings import read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.rules import distributed, rules_file_yaml
from observability.trainer_env import METRICS_BASE_PORT_ENV

BEGIN = "<!-- bench.distributed: begin -->"
END = "<!-- bench.distributed: end -->"
RANKS = 4
SLOW_RANK, STOPPED_RANK = 3, 1


def _torchrun(nproc: int, program: str, args: Sequence[str], base_port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, METRICS_BASE_PORT_ENV: str(base_port), "PYTHONPATH": str(REPO_ROOT)}
    command = [
        str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}",
        program, *args,
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def overhead(work: Path, pairs: int = 30, block: int = 40) -> dict[str, Any]:
    out = work / "overhead.json"
    args = ["--out", str(out), "--pairs", str(pairs), "--block", str(block)]
    proc = _torchrun(2, "bench/_ddp_overhead.py", args, free_port(), work / "overhead.log")
    try:
        if proc.wait(timeout=1800) != 0:
            raise RuntimeError(f"overhead run failed:\n{(work / 'overhead.log').read_text()[-3000:]}")
    finally:
        _stop(proc)
    result = json.loads(out.read_text())
    by_pair: dict[int, dict[str, float]] = {}
    for entry in result["blocks"]:
        by_pair.setdefault(entry["pair"], {})[entry["run"]] = entry["seconds_per_step"]
    ratios = [p["instrumented"] / p["plain"] - 1 for p in by_pair.values()]
    plain = statistics.median(p["plain"] for p in by_pair.values())
    instrumented = statistics.median(p["instrumented"] for p in by_pair.values())
    return {
        **{k: result[k] for k in ("world_size", "block", "device_seconds", "gradient_bytes")},
        "pairs": len(by_pair),
        "plain_step_ms": plain * 1000,
        "instrumented_step_ms": instrumented * 1000,
        "overhead_median": statistics.median(ratios),
        "overhead_quartiles": statistics.quantiles(ratios, n=4),
    }


def stack_config(stack: str) -> ObservabilityConfig:
    return validate_stack(read_stack_config(stack)).observability_config()


def _firing(prom: PrometheusServer, alert: str) -> list[dict[str, str]]:
    result = prom.api.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')
    return [r["metric"] for r in result]


def _wait(what: str, check: Any, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen within {timeout:g}s\n{log.read_text()[-3000:]}")
        time.sleep(1)


def detection(work: Path, stack: str) -> dict[str, Any]:
    cfg = stack_config(stack)
    # training pods are scraped at the stack's critical interval (their prometheus.io/interval)
    interval = cfg.critical_scrape_interval_seconds
    control = work / "control"
    control.mkdir()
    base = free_port()
    targets = [f"127.0.0.1:{base + r}" for r in range(RANKS)]
    scrape = {
        "job_name": "training-ranks",
        "scrape_interval": f"{interval}s",
        "scrape_timeout": f"{min(interval, 10)}s",
        "static_configs": [{"targets": targets, "labels": {"namespace": "bench", "service": cfg.training_job_service}}],
    }
    rules = work / "prometheus" / "rules.yml"
    config = config_yaml([scrape], [str(rules)], scrape_interval=f"{interval}s",
                         evaluation_interval=f"{cfg.evaluation_interval_seconds}s")  # fmt: skip
    prom = PrometheusServer(work / "prometheus", config, {"rules.yml": rules_file_yaml(cfg)})
    log = work / "ranks.log"
    names = "|".join(a.name for a in distributed.alerts(cfg))
    figures: dict[str, Any] = {"stack": stack, "scrape_interval_seconds": interval,
                               "evaluation_interval_seconds": cfg.evaluation_interval_seconds,
                               "hang_seconds": cfg.thresholds.training_rank_hang_seconds.value}  # fmt: skip
    prom.start()
    proc = _torchrun(RANKS, "bench/_ddp_trainer.py", ["--job-id", "bench-ddp", "--control", str(control),
                                                       "--max-seconds", "3000"], base, log)  # fmt: skip
    pid = 0
    try:
        _wait("every rank's first step", lambda: all((control / f"ready-{r}").exists() for r in range(RANKS)), 300,
              proc, log)  # fmt: skip
        started = time.time()
        balanced = 2 * distributed.window_seconds(cfg)
        time.sleep(balanced)
        quiet = prom.api.query_range(f'ALERTS{{alertname=~"{names}"}}', started, time.time(), f"{interval}s")
        figures["balanced_seconds"] = balanced
        figures["balanced_alerts"] = len(quiet)
        (control / f"slow-{SLOW_RANK}").write_text("")
        slowed = time.time()
        firing = _wait("TrainingRankStraggler", lambda: _firing(prom, "TrainingRankStraggler"), 600, proc, log)
        figures["straggler_seconds"] = time.time() - slowed
        figures["straggler_ranks"] = sorted(a["rank"] for a in firing)
        (control / f"slow-{SLOW_RANK}").unlink()
        _wait("the straggler alert to resolve", lambda: not _firing(prom, "TrainingRankStraggler"), 600, proc, log)
        time.sleep(2 * distributed.window_seconds(cfg))
        pid = int((control / f"pid-{STOPPED_RANK}").read_text())
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        firing = _wait("TrainingJobHung", lambda: _firing(prom, "TrainingJobHung"), 1200, proc, log)
        figures["hang_seconds_to_fire"] = time.time() - stopped
        figures["hang_ranks"] = sorted(a["rank"] for a in firing)
        os.kill(pid, signal.SIGCONT)
        pid = 0
        continued = time.time()
        _wait("the hang alert to resolve", lambda: not _firing(prom, "TrainingJobHung"), 600, proc, log)
        figures["hang_resolved_seconds"] = time.time() - continued
        seen = prom.api.query_range(f'ALERTS{{alertname=~"{names}", alertstate="firing"}}', started, time.time(),
                                    f"{interval}s")  # fmt: skip
        figures["alerts_seen"] = sorted({(s["metric"]["alertname"], s["metric"].get("rank", "")) for s in seen})
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        (control / "stop").write_text("")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
        _stop(proc)
        prom.stop()
    return figures


def section(over: dict[str, Any] | None, detect: dict[str, Any] | None, command: str) -> str:
    lines = [BEGIN, "## Distributed training: rank and collective timing", "", f"Command: `{command}`", ""]
    if over is not None:
        q1, _, q3 = over["overhead_quartiles"]
        lines += [
            f"**Overhead** ({over['world_size']} ranks over gloo on this machine's CPUs, one run: {over['pairs']} "
            f"pairs of {over['block']}-step blocks, plain DDP and instrumented DDP alternating; a step is "
            f"{over['device_seconds'] * 1000:g} ms of simulated device time, forward and backward of a "
            f"{over['gradient_bytes'] / 1e6:.1f} MB model with 1 MB buckets and one flag all-reduce):",
            "",
            "| | median step |",
            "| --- | --- |",
            f"| plain DDP | {over['plain_step_ms']:.2f} ms |",
            f"| instrumented (phases, steps, comm hook, timed collective, metrics served) | "
            f"{over['instrumented_step_ms']:.2f} ms |",
            "",
            f"Overhead: median over pairs **{over['overhead_median'] * 100:+.2f} %** of step time "
            f"(quartiles {q1 * 100:+.2f} % to {q3 * 100:+.2f} %); the goal is at most 1 %.",
            "",
        ]
    if detect is not None:
        lines += [
            f"**Detection** at stack `{detect['stack']}`'s own intervals (training pods scraped every "
            f"{detect['scrape_interval_seconds']} s, the group evaluated every "
            f"{detect['evaluation_interval_seconds']} s, "
            f"hang threshold {detect['hang_seconds']:g} s), 4 ranks (torchrun, gloo), Prometheus 2.42 with the "
            "rendered rules:",
            "",
            "| what | measured | goal |",
            "| --- | --- | --- |",
            f"| balanced, {detect['balanced_seconds']} s | {detect['balanced_alerts']} alert samples | 0 |",
            f"| rank {SLOW_RANK} 30 % slower in compute: TrainingRankStraggler firing | "
            f"{detect['straggler_seconds']:.0f} s, ranks {detect['straggler_ranks']} | "
            f"within 120 s, rank {SLOW_RANK} only |",
            f"| rank {STOPPED_RANK} SIGSTOPped: TrainingJobHung firing | {detect['hang_seconds_to_fire']:.0f} s, ranks "
            f"{detect['hang_ranks']} | the threshold plus a scrape and an evaluation, rank {STOPPED_RANK} |",
            f"| after SIGCONT: TrainingJobHung resolved | {detect['hang_resolved_seconds']:.0f} s | |",
            "",
            f"Every alert of the group that fired during the run: {detect['alerts_seen']}.",
            "",
        ]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.distributed")
    parser.add_argument("--overhead-only", action="store_true")
    parser.add_argument("--detection-only", action="store_true")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--pairs", type=int, default=30, help="pairs of plain and instrumented blocks")
    parser.add_argument("--block", type=int, default=40, help="steps per block")
    args = parser.parse_args([] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        work = Path(tmp)
        over = None if args.detection_only else overhead(work, args.pairs, args.block)
        if over is not None:
            print(json.dumps(over, indent=1), flush=True)
        detect = None if args.overhead_only else detection(work, args.stack)
        if detect is not None:
            print(json.dumps(detect, indent=1), flush=True)
    shown = (
        " ".join(["python -m bench.distributed", *([] if argv is None else argv)])
        if argv
        else "python -m bench distributed"
    )
    write_section(section(over, detect, shown), BEGIN, END)


if __name__ == "__main__":
    main(sys.argv[1:])
