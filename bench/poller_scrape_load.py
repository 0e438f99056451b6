"""The GPU poller's CPU at the scrape intervals the stacks give it; figures go to the "GPU poller
scrape load" section of BENCHMARKS.md.

The critical alerts need the poller scraped every `scrape.criticalIntervalSeconds` (5 s) instead of
the stack's `scrape.intervalSeconds` (10-15 s). This measures what that costs the poller itself:
pollers started side by side in one run (8 fake GPUs with GPM, each stack's `minIntervalSeconds`),
one left unscraped, one scraped at each stack's interval, one at the critical interval and one at
the critical interval by two Prometheus servers (an HA pair), each by its own scraper thread on the
scrape schedule for the same wall time. A process's CPU is the kernel's run time of all its
threads (`/proc/<pid>/task/*/schedstat`, nanoseconds) over that time, in millicores, compared with
the poller's CPU request (`poller.resources.cpuRequest`) of every stack.

Run: `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench poller_scrape_load`
(BENCH_POLLER_SCRAPE_SECONDS sets the measured time, default 180).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import write_section
from foxhunt_trainer.contract import catalog
from harness import fake_nvml as harness
from infra.settings import read_stack_config
from infra.settings.stack_files import validate_stack
from infra.stacks import available_stacks

SECTION_START = "<!-- poller-scrape-load:start -->"
SECTION_END = "<!-- poller-scrape-load:end -->"
GPUS = 8
SECONDS_ENV = "BENCH_POLLER_SCRAPE_SECONDS"
DEFAULT_SECONDS = 180.0


@dataclass(frozen=True)
class StackFigures:
    stack: str
    interval_seconds: int
    critical_interval_seconds: int
    min_interval_seconds: float
    cpu_request_millicores: float


@dataclass(frozen=True)
class Setup:
    """One poller of the run: scraped every `interval` seconds by `scrapers` servers (0: never)."""

    label: str
    interval: float
    scrapers: int


@dataclass(frozen=True)
class Measured:
    setup: Setup
    scrapes: int
    errors: int
    cpu_seconds: float
    wall_seconds: float

    @property
    def millicores(self) -> float:
        return self.cpu_seconds / self.wall_seconds * 1000


def millicores(quantity: str) -> float:
    """A Kubernetes CPU quantity (20m, 0.5, 2) in millicores."""
    return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000


def stack_figures() -> list[StackFigures]:
    figures = []
    for stack in available_stacks():
        settings = validate_stack(read_stack_config(stack))
        cfg = settings.observability
        figures.append(
            StackFigures(
                stack,
                cfg.scrape_interval_seconds,
                cfg.critical_scrape_interval_seconds,
                settings.poller.min_interval_seconds,
                millicores(settings.poller.resources.cpu_request),
            )
        )
    return figures


def cpu_seconds(pid: int) -> float:
    """Run time of every thread of `pid` so far (schedstat's first field, nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
    return total / 1e9


def scrape_on_schedule(
    poller: harness.PollerProcess, interval: float, offset: float, stop: float, out: list[int]
) -> None:
    """Scrape `/metrics` every `interval` seconds from `offset` until `stop` (monotonic time)."""
    due = time.monotonic() + offset
    while due < stop:
        time.sleep(max(0.0, due - time.monotonic()))
        try:
            status, body, _ = harness.http_get(poller.host, poller.port, "/metrics")
            ok = status == 200 and catalog.GPU_POLLER_DEVICES.name.encode() in body
        except OSError:
            ok = False
        out[0 if ok else 1] += 1
        due += interval


def measure(setups: list[Setup], min_interval: float, seconds: float, work: Path) -> list[Measured]:
    lib_dir = harness.build_fake_nvml(work / "lib")
    config = work / "fake.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(GPUS)]).write(config)
    pollers = [
        harness.PollerProcess(
            lib_dir, config, work, args=("--min-interval", f"{min_interval:g}"), env={"FAKE_NVML_RELOAD_MS": "1000"}
        )
        for _ in setups
    ]
    try:
        for poller in pollers:
            poller.wait_ready()
            poller.scrape()  # warmed up: the first pass and page are not the steady state
        time.sleep(2)
        counts = [[0, 0] for _ in setups]
        started = time.monotonic()
        stop = started + seconds
        before = [cpu_seconds(p.process.pid) for p in pollers]
        threads = [
            threading.Thread(
                target=scrape_on_schedule,
                args=(poller, setup.interval, setup.interval * k / setup.scrapers, stop, counts[i]),
                daemon=True,
            )
            for i, (poller, setup) in enumerate(zip(pollers, setups, strict=True))
            for k in range(setup.scrapers)
        ]
        for thread in threads:
            thread.start()
        time.sleep(max(0.0, stop - time.monotonic()))
        after = [cpu_seconds(p.process.pid) for p in pollers]
        wall = time.monotonic() - started
        for thread in threads:
            thread.join(timeout=30)
    finally:
        for poller in pollers:
            poller.stop()
    return [
        Measured(setup, count[0], count[1], end - start, wall)
        for setup, count, start, end in zip(setups, counts, before, after, strict=True)
    ]


def render_section(
    stacks: list[StackFigures], measured: list[Measured], min_interval: float, load: tuple[float, float, float]
) -> str:
    idle = measured[0]
    lines = [
        SECTION_START,
        "## GPU poller scrape load",
        "",
        "Command: `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench poller_scrape_load`. "
        f"{len(measured)} pollers side by side in one run (8 fake GPUs with GPM, `--min-interval {min_interval:g}`), "
        f"each scraped on its schedule for {idle.wall_seconds:.0f} s; CPU is the kernel's run time of every thread of "
        f"the poller process (`/proc/<pid>/task/*/schedstat`). Machine: 2 CPU cores shared with other work (load "
        f"average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}). Against the fake libnvidia-ml.so.1, so "
        "this is the poller's own cost; on a node every NVML call adds the driver's time.",
        "",
        "| poller scraped | scrapes (errors) | CPU ms | millicores | added over unscraped | per scrape |",
        "|---|---|---|---|---|---|",
    ]
    for m in measured:
        added = m.millicores - idle.millicores
        per_scrape = (m.cpu_seconds - idle.cpu_seconds) / m.scrapes * 1000 if m.scrapes else 0.0
        lines.append(
            f"| {m.setup.label} | {m.scrapes} ({m.errors}) | {m.cpu_seconds * 1000:.0f} | {m.millicores:.2f} | "
            + (f"{added:+.2f}m | {per_scrape:.2f} ms |" if m.scrapes else "- | - |")
        )
    by_label = {m.setup.label: m for m in measured}
    lines += ["", "Against each stack's poller CPU request (the critical alerts need the critical interval):", ""]
    lines += [
        "| stack | intervals (scrape; critical) | request | at its interval | at the critical interval "
        "| HA pair at the critical interval | HA pair's share of the request |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in stacks:
        base = by_label[f"every {s.interval_seconds} s"]
        critical = by_label[f"every {s.critical_interval_seconds} s"]
        pair = by_label[f"every {s.critical_interval_seconds} s by 2 servers"]
        lines.append(
            f"| {s.stack} | {s.interval_seconds} s; {s.critical_interval_seconds} s | {s.cpu_request_millicores:g}m | "
            f"{base.millicores:.2f}m | {critical.millicores:.2f}m ({critical.millicores / base.millicores:.1f}x) | "
            f"{pair.millicores:.2f}m | {pair.millicores / s.cpu_request_millicores:.0%} |"
        )
    lines += ["", SECTION_END]
    return "\n".join(lines) + "\n"


def main() -> None:
    load = os.getloadavg()
    seconds = float(os.environ.get(SECONDS_ENV, DEFAULT_SECONDS))
    stacks = stack_figures()
    min_interval = min(s.min_interval_seconds for s in stacks)
    intervals = sorted({s.interval_seconds for s in stacks} | {s.critical_interval_seconds for s in stacks})
    setups = [Setup("never (idle)", 0, 0)]
    setups += [Setup(f"every {i} s", i, 1) for i in reversed(intervals)]
    setups += [Setup(f"every {i} s by 2 servers", i, 2) for i in sorted({s.critical_interval_seconds for s in stacks})]
    with tempfile.TemporaryDirectory(prefix="bench-poller-scrape-") as tmp:
        measured = measure(setups, min_interval, seconds, Path(tmp))
    section = render_section(stacks, measured, min_interval, load)
    print(section)
    write_section(section, SECTION_START, SECTION_END)


if __name__ == "__main__":
    main()
