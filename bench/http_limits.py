"""Metrics servers under a noisy or hostile client; figures go to the "Metrics server limits"
section of BENCHMARKS.md.

1. 50 concurrent scrapers against the GPU poller (fake NVML, 8 GPUs, a pass per scrape) for a
   bounded time: errors and latency, with the bounded server and with the previous design (a
   thread per connection, no timeouts, no cap), side by side in one run.
2. 5,000 half-open connections (`GET /metrics HTTP/1.1` without the blank line) held against the
   poller (its memory limit is 64 MiB) and against a trainer (the synthetic trainer): resident
   memory, threads and open files at the peak, the slowest scrape while they are held, and the
   threads once they closed; the poller with the previous design for comparison.

The previous design is the poller of PREVIOUS_REVISION, run from that revision's own tree.

Run: `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench http_limits`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import half_open, write_section
from bench.poller import CONCURRENT_SCRAPERS, CONCURRENT_SECONDS, GPUS, Distribution, _scrape_loop
from harness import fake_nvml as harness
from harness.ports import free_port
from harness.revision import revision_tree
from harness.trainer_process import TrainerProcess
from infra import REPO_ROOT

# The last commit before the bounded metrics server: the poller's server was a thread per
# connection with no timeouts and no cap.
PREVIOUS_REVISION = "e8f3f4f6a0063ea65a737871b8349df51fd0e299"
SECTION_START = "<!-- http-limits:start -->"
SECTION_END = "<!-- http-limits:end -->"
HALF_OPEN = 5_000
POLLER_MEMORY_LIMIT_MIB = 64


@dataclass(frozen=True)
class ScraperFigures:
    design: str
    scrapes: int
    errors: int
    latency_ms: Distribution
    max_ms: float


def poller(work: Path, lib_dir: Path, previous: Path | None, *args: str) -> harness.ServedProcess:
    """The poller of this checkout, or (previous: that revision's tree) the one before its server was bounded."""
    config = work / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(GPUS)]).write(config)
    port = free_port()
    command = [sys.executable, "-m", "poller", "--listen", f"127.0.0.1:{port}", "--min-interval", "0", *args]
    env = harness.poller_env(lib_dir, config, {"NODE_NAME": "bench", "FAKE_NVML_RELOAD_MS": "1000"})
    name = "poller-previous" if previous else "poller"
    process = harness.ServedProcess(name, command, work, env, port, cwd=previous or REPO_ROOT)
    process.wait_ready()
    return process


def measure_scrapers(work: Path, lib_dir: Path, previous: Path | None) -> ScraperFigures:
    process = poller(work, lib_dir, previous)
    try:
        latencies: list[float] = []
        errors: list[str] = []
        deadline = time.monotonic() + CONCURRENT_SECONDS

        async def run_all() -> None:
            loops = (
                _scrape_loop(process.host, process.port, deadline, latencies, errors)
                for _ in range(CONCURRENT_SCRAPERS)
            )
            await asyncio.gather(*loops)

        asyncio.run(run_all())
    finally:
        process.stop()
    design = "previous (thread per connection)" if previous else "bounded (event loop, 8 workers, cap 64)"
    return ScraperFigures(
        design, len(latencies), len(errors), Distribution.of(latencies or [0.0]), max(latencies or [0.0])
    )


def measure_half_open(work: Path, lib_dir: Path, what: str, previous: Path) -> half_open.HalfOpenFigures:
    if what == "trainer":
        process: harness.ServedProcess = TrainerProcess(work, "--epoch-seconds", "0.05", "--linger", "-1")
        process.wait_ready()
    elif what == "poller-previous":
        process = poller(work, lib_dir, previous)  # no read-header timeout to lift: it had none
    else:
        process = poller(work, lib_dir, None, "--read-header-timeout", "60")
    try:
        return half_open.measure(
            process.process.pid, process.host, process.port, HALF_OPEN, batch=500, hold_seconds=2.0
        )
    finally:
        process.stop()


def render_section(
    scrapers: list[ScraperFigures], held: dict[str, half_open.HalfOpenFigures], load: tuple[float, ...]
) -> str:
    mib = 1024.0
    lines = [
        SECTION_START,
        "## Metrics server limits",
        "",
        "`flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench http_limits` (fake NVML, 8 GPUs, loopback; "
        f"load average {load[0]:.1f} at the start: the machine is shared, so compare within this run).",
        "",
        f"**{CONCURRENT_SCRAPERS} concurrent scrapers** against the poller, {CONCURRENT_SECONDS:g} s each, a pass per "
        "scrape, before and after in one run:",
        "",
        "| server | scrapes | errors | p50 latency | p99 latency | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in scrapers:
        lines.append(
            f"| {s.design} | {s.scrapes:,} | {s.errors} | {s.latency_ms.median:.1f} ms | {s.latency_ms.p99:.1f} ms | "
            f"{s.max_ms:.1f} ms |"
        )
    before, after = scrapers[1], scrapers[0]
    if before.latency_ms.p99 > 0:
        lines += ["", f"p99 after / before: {after.latency_ms.p99 / before.latency_ms.p99:.2f}x."]
    lines += [
        "",
        f"**{HALF_OPEN:,} half-open connections** (`GET /metrics HTTP/1.1` without the blank line) held, a scrape "
        f"between every 500 and every 0.1 s while all are held (poller memory limit: {POLLER_MEMORY_LIMIT_MIB} MiB):",
        "",
        "| process | RSS before | RSS peak | threads before / peak / after | open files peak | slowest scrape | "
        "failed scrapes |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in held.items():
        lines.append(
            f"| {name} | {f.baseline.rss_kib / mib:.1f} MiB | {f.peak.rss_kib / mib:.1f} MiB | "
            f"{f.baseline.threads} / {f.peak.threads} / {f.after.threads} | {f.peak.open_files:,} | "
            f"{f.max_scrape_seconds * 1000:.0f} ms | {f.failed_scrapes} of {f.scrapes} |"
        )
    lines += ["", SECTION_END, ""]
    return "\n".join(lines)


def main() -> None:
    load = os.getloadavg()
    half_open.raise_own_open_files_limit(3 * HALF_OPEN)
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        work = Path(tmp)
        lib_dir = harness.build_fake_nvml(work / "lib")
        with revision_tree(PREVIOUS_REVISION) as previous:
            scrapers = [measure_scrapers(work, lib_dir, tree) for tree in (None, previous)]
            held = {
                what: measure_half_open(work, lib_dir, what, previous)
                for what in ("poller", "trainer", "poller-previous")
            }
    section = render_section(scrapers, held, load)
    print(section)
    write_section(section, SECTION_START, SECTION_END)


if __name__ == "__main__":
    main()
