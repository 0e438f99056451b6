"""GPU poller on GPUs in MIG mode: the CPU time of one collection pass with its `/metrics` page, for
8 whole GPUs and for the same 8 GPUs in MIG mode with 7 MIG devices each (56 MIG devices: each read
for its memory and GPM, the parent's MIG devices listed again at every pass). Figures go to the
"GPU poller on MIG devices" section of BENCHMARKS.md.

Against the fake libnvidia-ml.so.1 of tests/poller (no GPU here): its calls cost almost nothing, so
the figures are the poller's own cost. Each shape runs in its own process (the fake reads one
configuration per process).

Run: `.venv/bin/python -m bench poller_mig`.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import write_section

GPUS = 8
MIGS_PER_GPU = 7
ITERATIONS = 1000
BEGIN, END = "<!-- gpu-poller-mig:start -->", "<!-- gpu-poller-mig:end -->"


def measure(shape: str, work: Path) -> dict[str, float]:
    """In this process (a child): CPU time (microseconds) of one pass and page for `shape`."""
    from foxhunt_trainer.contract import catalog
    from harness import fake_nvml as harness
    from poller.error_counters import ErrorCounters
    from poller.metrics_page import TextPageWriter
    from poller.nvml_source import NvmlSource
    from poller.shared_pass import SharedPass

    lib_dir = harness.build_fake_nvml(work / "lib")
    config = work / "nvml.conf"
    gpus = []
    for index in range(GPUS):
        if shape == "mig":
            migs = {
                slot: harness.mig(f"MIG-{index:08d}-0000-0000-0000-{slot:012d}", "1g.10gb", slot + 1)
                for slot in range(MIGS_PER_GPU)
            }
            gpus.append(harness.FakeGpu(mig_mode=True, migs=migs, errors={"utilization": 3}))
        else:
            gpus.append(harness.FakeGpu())
    harness.FakeNvml(gpus=gpus).write(config)
    os.environ["FAKE_NVML_CONFIG"] = str(config)
    os.environ["FAKE_NVML_RELOAD_MS"] = "3600000"  # the fake's own file check is not the poller's cost
    ctypes.CDLL(str(lib_dir / harness.SONAME))
    counters = ErrorCounters()
    source = NvmlSource(counters)
    shared = SharedPass(source, counters, min_interval=0.0)
    writer = TextPageWriter("bench-node")

    def page() -> bytes:
        return writer.render(shared.latest(), counters.snapshot())

    page()  # the GPM baseline
    first = page()
    devices = first.count(catalog.GPU_MIG_DEVICE_INFO.name.encode() + b"{")
    if devices != (GPUS * MIGS_PER_GPU if shape == "mig" else 0):
        raise RuntimeError(f"{shape}: {devices} MIG devices on the page:\n{first.decode()[:2000]}")
    for _ in range(100):
        page()
    times = []
    for _ in range(ITERATIONS):
        started = time.thread_time_ns()
        page()
        times.append((time.thread_time_ns() - started) / 1000)
    listing = []
    assert source.session is not None
    parents = [d for d in source.session.devices if d.mig_layout is not None]
    for _ in range(200):
        started = time.thread_time_ns()
        for parent in parents:
            source._mig_handles(parent)
        listing.append((time.thread_time_ns() - started) / 1000)
    source.close()
    times.sort()
    samples = sum(1 for line in first.splitlines() if line and not line.startswith(b"#"))
    return {
        "median": statistics.median(times),
        "p99": times[int(0.99 * len(times)) - 1],
        "samples": samples,
        "bytes": len(first),
        "listing": statistics.median(listing) if parents else 0.0,
    }


def main() -> None:
    figures: dict[str, dict[str, float]] = {}
    for shape in ("whole", "mig"):
        with tempfile.TemporaryDirectory(prefix=f"bench-mig-{shape}-") as work:
            done = subprocess.run(
                [sys.executable, "-m", "bench.poller_mig", "--child", shape, work],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parents[1],
            )
            figures[shape] = json.loads(done.stdout.strip().splitlines()[-1])
    whole, mig = figures["whole"], figures["mig"]
    load = os.getloadavg()
    section = "\n".join(
        [
            BEGIN,
            "## GPU poller on MIG devices",
            "",
            "Command: `.venv/bin/python -m bench poller_mig`. Against the fake `libnvidia-ml.so.1` (no GPU here: the "
            f"poller's own cost). Machine: {os.cpu_count()} CPU cores shared with other work (load average at start "
            f"{load[0]:.1f}), Python {platform.python_version()}; CPU time of one collection pass with its page, "
            f"{ITERATIONS} runs.",
            "",
            "| what | samples | page | median | p99 |",
            "|---|---|---|---|---|",
            f"| 8 whole GPUs with GPM | {whole['samples']:.0f} | {whole['bytes'] / 1000:.1f} kB | "
            f"{whole['median']:.0f} µs | {whole['p99']:.0f} µs |",
            f"| 8 GPUs in MIG mode, 7 MIG devices each (56), GPM per instance | {mig['samples']:.0f} | "
            f"{mig['bytes'] / 1000:.1f} kB | {mig['median']:.0f} µs | {mig['p99']:.0f} µs |",
            "",
            "Each MIG device costs its memory call, its GPM sample (`nvmlGpmMigSampleGet`) and metrics call and its "
            "lines on the page; listing the parents' MIG devices again at every pass (a handle and a UUID per slot, "
            f"through nvidia-ml-py, what notices a reconfiguration) is {mig['listing']:.0f} µs of it (median).",
            "",
            END,
        ]
    )
    print(section)
    write_section(section, BEGIN, END)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        print(json.dumps(measure(sys.argv[2], Path(sys.argv[3]))))
    else:
        main()
