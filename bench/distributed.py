"""Distributed training: what the rank and collective timing costs a DDP step, and how fast the
straggler and hang alerts fire at a stack's own scrape interval.

    flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench distributed       # both parts
    .venv/bin/python -m bench.distributed --overhead-only | --detection-only [--stack dev]

Overhead (`bench/_ddp_overhead.py`): two ranks over gloo train four DDP copies of one model in
the same processes: plain (DDP's built-in all-reduce), PyTorch's own Python all-reduce hook,
instrumented (the compute phase, per-rank steps, DDP's all-reduce timed per step: the default)
and instrumented with the per-bucket communication hook, alternating step by step through the
orders of the four, so all see the same load from one moment to the next. Per round and
comparison: one median step over the other (wall time), and the difference of their median CPU
times over the other's step (what one computes more, which load does not stretch); the report
gives the median and quartiles over the rounds. Because that spread on a shared machine is of the
order of the goal, the same run measures each variant's fixed CPU cost per step on a one-bucket
model without device time (the least of interleaved runs), set against the real model's plain
step. Last, the CPU one scrape of the rank's metrics costs, as a share of the stack's scrape
interval for training pods.

Detection (`harness/ddp_trainer.py`): four ranks (torchrun, gloo) scraped by Prometheus 2.42 at the
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

from bench import write_section
from foxhunt_trainer.trainer_env import METRICS_BASE_PORT_ENV
from harness.ports import free_port
from harness.prometheus import PrometheusServer, config_yaml
from infra import REPO_ROOT
from infra.settings import read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.rules import distributed, rules_file_yaml

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


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median and quartiles."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3


# (variant, baseline): what each comparison of the overhead part says
COMPARISONS = (
    ("instrumented", "plain", "instrumented (per-step DDP timing, the default) over plain DDP: the whole cost"),
    ("per_bucket", "plain", "instrumented with the per-bucket hook over plain DDP: the whole cost"),
    ("per_bucket", "python_hook", "the per-bucket hook over PyTorch's Python all-reduce hook: its timing's own cost"),
    ("python_hook", "plain", "PyTorch's Python all-reduce hook over plain DDP: what any Python hook costs"),
)
# The figure the overhead goal (at most 1 % of step time) is judged on.
GOAL = COMPARISONS[0][2]


def overhead(work: Path, rounds: int, cycles: int, device_seconds: float, scrape_interval: int) -> dict[str, Any]:
    out = work / "overhead.json"
    args = [
        "--out",
        str(out),
        "--rounds",
        str(rounds),
        "--cycles",
        str(cycles),
        "--device-seconds",
        str(device_seconds),
    ]
    proc = _torchrun(2, "bench/_ddp_overhead.py", args, free_port(), work / "overhead.log")
    try:
        if proc.wait(timeout=3600) != 0:
            raise RuntimeError(f"overhead run failed:\n{(work / 'overhead.log').read_text()[-3000:]}")
    finally:
        _stop(proc)
    result = json.loads(out.read_text())
    names = {name for steps in result["rounds"] for name in steps}
    pooled: dict[str, list[float]] = {name: [] for name in sorted(names)}
    per_round: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for _, _, label in COMPARISONS}
    for steps in result["rounds"]:
        wall = {name: statistics.median(w for w, _ in steps[name]) for name in names}
        cpu = {name: statistics.median(c for _, c in steps[name]) for name in names}
        for variant, baseline, label in COMPARISONS:
            per_round[label][0].append(wall[variant] / wall[baseline] - 1)
            per_round[label][1].append((cpu[variant] - cpu[baseline]) / wall[baseline])
        for name in names:
            pooled[name] += [w for w, _ in steps[name]]
    # The per-bucket hook's CPU per gradient bucket: its whole cost over plain DDP, per bucket reduced.
    plain_cpu = statistics.median(c for steps in result["rounds"] for _, c in steps["plain"])
    per_bucket_cpu = statistics.median(c for steps in result["rounds"] for _, c in steps["per_bucket"])
    per_bucket = (per_bucket_cpu - plain_cpu) / result["buckets"]
    fixed = result["fixed_cpu_seconds"]
    plain_step = statistics.median(pooled["plain"])
    keys = ("world_size", "cycles", "device_seconds", "gradient_bytes", "buckets", "bucket_cap_mb", "scrapes",
            "fixed_runs", "fixed_steps")  # fmt: skip
    return {
        **{k: result[k] for k in keys},
        "rounds": len(result["rounds"]),
        "step_ms": {name: statistics.median(times) * 1000 for name, times in pooled.items()},
        "comparisons": {
            label: {"wall": _spread(walls), "cpu": _spread(cpus)} for label, (walls, cpus) in per_round.items()
        },
        # the fixed CPU cost per step over plain DDP (one bucket), and as a share of the real model's plain step
        "fixed_us": {name: (fixed[name] - fixed["plain"]) * 1e6 for name in fixed if name != "plain"},
        "fixed_plain_us": fixed["plain"] * 1e6,
        "fixed_share": {name: (fixed[name] - fixed["plain"]) / plain_step for name in fixed if name != "plain"},
        "cpu_per_bucket_us": per_bucket * 1e6,
        # buckets reduced per second of training at which the per-bucket hook's cost is 1 % of the time
        "buckets_per_second_at_one_percent": 0.01 / per_bucket if per_bucket > 0 else None,
        "scrape_cpu_ms": result["scrape_cpu_seconds"] * 1000,
        "scrape_interval_seconds": scrape_interval,
        "scrape_share": result["scrape_cpu_seconds"] / scrape_interval,
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
    proc = _torchrun(RANKS, "harness/ddp_trainer.py", ["--job-id", "bench-ddp", "--control", str(control),
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
        ms = over["step_ms"]
        lines += [
            f"**Overhead** ({over['world_size']} ranks over gloo on this machine's CPUs, one run: {over['rounds']} "
            f"rounds; in each, {over['cycles']} steps of every variant, alternating step by step through the orders "
            "of the four in the same processes. A step is "
            f"{over['device_seconds'] * 1000:g} ms of simulated device time, forward and backward of a "
            f"{over['gradient_bytes'] / 1e6:.2f} MB model reduced in {over['buckets']:.0f} buckets of "
            f"{over['bucket_cap_mb'] * 1024:g} KB, and one flag all-reduce):",
            "",
            "| variant | median step (wall) |",
            "| --- | --- |",
            f"| plain DDP (built-in all-reduce) | {ms['plain']:.2f} ms |",
            f"| PyTorch's Python all-reduce hook (`default_hooks.allreduce_hook`) | {ms['python_hook']:.2f} ms |",
            "| instrumented, the default (compute phase, steps, DDP's all-reduce timed per step, timed collective) | "
            f"{ms['instrumented']:.2f} ms |",
            "| instrumented with the per-bucket hook (`register_ddp(ddp, per_bucket=True)`) | "
            f"{ms['per_bucket']:.2f} ms |",
            "",
            "Per round: the median step of one variant over the median step of the other, - 1 (wall), and the "
            "difference of their median CPU times (the whole process) over the other's wall step (what the "
            "variant computes more, which machine load does not stretch); median and quartiles over the rounds:",
            "",
            "| comparison | wall: median (quartiles) | CPU: median (quartiles) |",
            "| --- | --- | --- |",
        ]
        for label, figures in over["comparisons"].items():
            (w, w1, w3), (c, c1, c3) = figures["wall"], figures["cpu"]
            lines.append(
                f"| {label} | **{w * 100:+.2f} %** ({w1 * 100:+.2f} % to {w3 * 100:+.2f} %) | "
                f"**{c * 100:+.2f} %** ({c1 * 100:+.2f} % to {c3 * 100:+.2f} %) |"
            )
        at_one = over["buckets_per_second_at_one_percent"]
        fixed_us, share = over["fixed_us"], over["fixed_share"]
        lines += [
            "",
            f"Fixed cost per step, the sharper figure (the same four variants on a one-layer model: one bucket, no "
            f"device time, plain step {over['fixed_plain_us']:.0f} µs of CPU; the least CPU per step of "
            f"{over['fixed_runs']} interleaved runs of {over['fixed_steps']} steps, minus plain's), and as a share of "
            "the model above's plain step:",
            "",
            "| variant | CPU per step over plain DDP | share of the plain step |",
            "| --- | --- | --- |",
            f"| instrumented, the default | {fixed_us['instrumented']:+.0f} µs | "
            f"**{share['instrumented'] * 100:+.3f} %** |",
            f"| instrumented with the per-bucket hook (one bucket) | {fixed_us['per_bucket']:+.0f} µs | "
            f"{share['per_bucket'] * 100:+.3f} % |",
            f"| PyTorch's Python all-reduce hook (one bucket) | {fixed_us['python_hook']:+.0f} µs | "
            f"{share['python_hook'] * 100:+.3f} % |",
            "",
            f"Per gradient bucket, the per-bucket hook's step computes {over['cpu_per_bucket_us']:.0f} µs more than "
            "plain DDP's (median CPU per step over the buckets of a step)"
            + (
                f": its cost reaches 1 % of the time at {at_one:.0f} buckets reduced per second."
                if at_one is not None
                else "."
            ),
            "",
            f"Serving the metrics: {over['scrape_cpu_ms']:.2f} ms of the process's CPU per scrape (both ends of "
            f"the request, mean of {over['scrapes']}), at the stack's {over['scrape_interval_seconds']} s interval "
            f"for training pods **{over['scrape_share'] * 100:.3f} %** of the time. Goal: at most 1 % of step time.",
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
    parser.add_argument("--rounds", type=int, default=30, help="rounds of the overhead part")
    parser.add_argument("--cycles", type=int, default=12, help="steps of each variant per round (one per order)")
    parser.add_argument("--device-seconds", type=float, default=0.1, help="simulated device time per step")
    args = parser.parse_args([] if argv is None else argv)
    if args.rounds < 2 or args.cycles < 1 or args.device_seconds < 0:
        parser.error(
            f"--rounds {args.rounds}, --cycles {args.cycles}, --device-seconds {args.device_seconds:g}: expected at "
            "least two rounds (their spread is reported) of one cycle each and a device time of 0 s or more"
        )
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        work = Path(tmp)
        interval = stack_config(args.stack).critical_scrape_interval_seconds
        over = None if args.detection_only else overhead(work, args.rounds, args.cycles, args.device_seconds, interval)
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
