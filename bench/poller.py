"""GPU poller benchmarks; figures go to the "GPU poller" section of BENCHMARKS.md.

1. CPU time of one full collection of 8 GPUs including writing `/metrics`, with GPM profiling
   metrics (two GPM calls per GPU per pass) and without, side by side in one run with spawning
   one trivial subprocess (the floor of any nvidia-smi based poller) and with the same page
   written by prometheus-client's generic `generate_latest`.
2. Resident memory of the poller process after start and after 10,000 scrapes.
3. 50 concurrent scrapers on loopback for a bounded time: errors and latency.
4. The image size (buildah, offline), when buildah is available and we are root.

Everything runs against the fake libnvidia-ml.so.1 of tests/poller (no GPU here): its calls cost
almost nothing, so the figures are the poller's own cost; on real hardware each NVML call adds
the driver's time.

Run: `make bench` or `.venv/bin/python -m bench poller` (with BENCH_POLLER_KEEP_IMAGE_FIGURES=1 the
image is not built again and its last figures are kept). With BENCH_POLLER_ONLY_CPU=1 only part 1
runs and its figures are printed, BENCHMARKS.md is left as it is (a quick check while changing the
poller).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from prometheus_client import CollectorRegistry, generate_latest

from bench import BENCHMARKS, write_section
from foxhunt_trainer.contract import catalog
from harness import fake_nvml as fake_nvml_harness
from harness import poller_image as images
from harness.reference_collector import GpuCollector
from poller.error_counters import ErrorCounters
from poller.metrics_page import TextPageWriter
from poller.nvml_source import NvmlSource
from poller.shared_pass import SharedPass

SECTION_START = "<!-- gpu-poller:start -->"
SECTION_END = "<!-- gpu-poller:end -->"
GPUS = 8
CPU_ITERATIONS = 2000
RSS_SCRAPES = 10_000
CONCURRENT_SCRAPERS = 50
CONCURRENT_SECONDS = 10.0
# Set to 1 to keep the image figures BENCHMARKS.md already holds instead of building the image.
ENV_SKIP_IMAGE = "BENCH_POLLER_KEEP_IMAGE_FIGURES"
# Set to 1 to measure and print only the collection CPU time, without writing BENCHMARKS.md.
ENV_ONLY_CPU = "BENCH_POLLER_ONLY_CPU"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Distribution:
    median: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        return cls(statistics.median(values), _quantile(values, 0.99))


@dataclass(frozen=True)
class CpuFigures:
    poller_us: Distribution  # GPM on
    poller_without_gpm_us: Distribution
    generate_latest_us: Distribution
    spawn_us: Distribution
    page_bytes: int
    page_samples: int
    page_samples_without_gpm: int


def _rusage_cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure_cpu(harness: ModuleType, work: Path) -> CpuFigures:
    """In this process: the fake library preloaded by path, then the poller's own objects."""
    lib_dir = harness.build_fake_nvml(work / "lib")
    config = work / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(GPUS)]).write(config)
    os.environ["FAKE_NVML_CONFIG"] = str(config)
    os.environ["FAKE_NVML_RELOAD_MS"] = "3600000"  # the fake's own file check is not the poller's cost
    ctypes.CDLL(str(lib_dir / harness.SONAME))  # nvidia-ml-py's CDLL("libnvidia-ml.so.1") now finds this one

    counters = ErrorCounters()
    source = NvmlSource(counters)
    shared = SharedPass(source, counters, min_interval=0.0)
    writer = TextPageWriter("bench-node")
    registry = CollectorRegistry()
    registry.register(GpuCollector(shared, counters, "bench-node"))
    # The same poller on the same GPUs without GPM (as on a GPU older than Hopper).
    plain_counters = ErrorCounters()
    plain_source = NvmlSource(plain_counters)
    plain_shared = SharedPass(plain_source, plain_counters, min_interval=0.0)
    plain_writer = TextPageWriter("bench-node")

    def page() -> bytes:
        return writer.render(shared.latest(), counters.snapshot())

    def plain_page() -> bytes:
        return plain_writer.render(plain_shared.latest(), plain_counters.snapshot())

    page()  # the first pass only takes the GPM baseline
    first = page()
    if b'ml_gpu_poller_devices{node="bench-node"} 8' not in first:
        raise RuntimeError("the fake library did not give 8 GPUs:\n" + first.decode())
    if first.count(catalog.GPU_SM_ACTIVE_PERCENT.name.encode() + b"{") != GPUS:
        raise RuntimeError("GPM is not on for every GPU:\n" + first.decode())
    plain_page()
    assert plain_source.session is not None
    for device in plain_source.session.devices:
        if device.gpm is not None:
            device.gpm.free()
            device.gpm = None
    plain_first = plain_page()
    if catalog.GPU_SM_ACTIVE_PERCENT.name.encode() + b"{" in plain_first:
        raise RuntimeError("GPM is still on in the comparison poller")
    for _ in range(200):
        page()
        plain_page()
        generate_latest(registry)

    poller: list[float] = []
    plain: list[float] = []
    reference: list[float] = []
    spawn: list[float] = []
    # The two pollers take turns going first: the first after a spawn finds the caches cold.
    order = ((page, poller), (plain_page, plain))
    for i in range(CPU_ITERATIONS):
        for render, figures in order if i % 2 == 0 else order[::-1]:
            started = time.thread_time_ns()
            render()
            figures.append((time.thread_time_ns() - started) / 1000)
        if i % 4 == 0:
            started = time.thread_time_ns()
            generate_latest(registry)
            reference.append((time.thread_time_ns() - started) / 1000)
        before = _rusage_cpu_seconds()
        subprocess.run(["/bin/true"], check=True)
        spawn.append((_rusage_cpu_seconds() - before) * 1e6)
    source.close()
    plain_source.close()

    def samples(text: bytes) -> int:
        return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))

    return CpuFigures(
        Distribution.of(poller),
        Distribution.of(plain),
        Distribution.of(reference),
        Distribution.of(spawn),
        len(first),
        samples(first),
        samples(plain_first),
    )


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@dataclass(frozen=True)
class RssFigures:
    after_start_kib: int
    after_scrapes_kib: int
    after_twice_kib: int  # after as many scrapes again: steady state, not a leak
    scrapes: int
    seconds: float


def measure_rss(harness: ModuleType, lib_dir: Path, work: Path) -> RssFigures:
    config = work / "rss.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(GPUS)]).write(config)
    with harness.PollerProcess(lib_dir, config, work, env={"FAKE_NVML_RELOAD_MS": "1000"}) as poller:
        poller.scrape()
        after_start = _rss_kib(poller.process.pid)
        started = time.monotonic()
        for _ in range(RSS_SCRAPES):
            status, _, _ = harness.http_get(poller.host, poller.port, "/metrics")
            if status != 200:
                raise RuntimeError(f"/metrics answered {status}")
        seconds = time.monotonic() - started
        after = _rss_kib(poller.process.pid)
        for _ in range(RSS_SCRAPES):
            harness.http_get(poller.host, poller.port, "/metrics")
        after_twice = _rss_kib(poller.process.pid)
    return RssFigures(after_start, after, after_twice, RSS_SCRAPES, seconds)


@dataclass(frozen=True)
class ConcurrencyFigures:
    min_interval: float
    scrapes: int
    errors: int
    latency_ms: Distribution
    max_ms: float
    seconds: float


async def _scrape_loop(host: str, port: int, deadline: float, latencies: list[float], errors: list[str]) -> None:
    request = f"GET /metrics HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode()
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            await writer.drain()
            response = await asyncio.wait_for(reader.read(), timeout=30)
            writer.close()
            page_ok = catalog.GPU_POLLER_DEVICES.name.encode() in response
            if not response.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")) or not page_ok:
                errors.append(response[:80].decode(errors="replace"))
                continue
        except (TimeoutError, OSError) as err:
            errors.append(repr(err))
            continue
        latencies.append((time.monotonic() - started) * 1000)


def measure_concurrency(harness: ModuleType, lib_dir: Path, work: Path, min_interval: float) -> ConcurrencyFigures:
    config = work / "concurrency.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(GPUS)]).write(config)
    args = ("--min-interval", f"{min_interval:g}")
    with harness.PollerProcess(lib_dir, config, work, args=args, env={"FAKE_NVML_RELOAD_MS": "1000"}) as poller:
        latencies: list[float] = []
        errors: list[str] = []
        started = time.monotonic()
        deadline = started + CONCURRENT_SECONDS

        async def run_all() -> None:
            await asyncio.gather(
                *(
                    _scrape_loop(poller.host, poller.port, deadline, latencies, errors)
                    for _ in range(CONCURRENT_SCRAPERS)
                )
            )

        asyncio.run(run_all())
        seconds = time.monotonic() - started
    return ConcurrencyFigures(
        min_interval, len(latencies), len(errors), Distribution.of(latencies or [0.0]), max(latencies or [0.0]), seconds
    )


@dataclass(frozen=True)
class ImageFigures:
    size_bytes: int | None
    build_seconds: float | None
    note: str
    layer_sizes: tuple[int, ...] = ()
    paragraph: str = ""  # the previous run's image paragraph, kept as it was


def previous_image_paragraph(path: Path = BENCHMARKS) -> str | None:
    """The image paragraph of the section as BENCHMARKS.md holds it, if it has measured figures."""
    if not path.exists() or SECTION_START not in path.read_text():
        return None
    section = path.read_text().split(SECTION_START, 1)[1].split(SECTION_END, 1)[0]
    suffix = " (from the run that built it)"
    for paragraph in (p.strip() for p in section.split("\n\n")):
        if paragraph.startswith("**Image** ("):
            return paragraph if paragraph.endswith(suffix) else paragraph + suffix
    return None


def measure_image() -> ImageFigures:
    if shutil.which("buildah") is None or shutil.which("debootstrap") is None or os.geteuid() != 0:
        return ImageFigures(None, None, "not measured: needs root, buildah and debootstrap")
    store = Path(tempfile.mkdtemp(prefix="poller-image-bench-", dir="/var/tmp"))
    try:
        started = time.monotonic()
        image = images.build_poller_image(store)
        seconds = time.monotonic() - started
        return ImageFigures(
            image.size_bytes, seconds, f"Layers (bytes, base first): {list(image.layer_sizes)}", image.layer_sizes
        )
    finally:
        images.Buildah(store).remove_store()


def _time(label: str, function: Callable[[], object]) -> object:
    started = time.monotonic()
    result = function()
    print(f"  {label}: {time.monotonic() - started:.1f} s", flush=True)
    return result


def render_section(
    cpu: CpuFigures,
    rss: RssFigures,
    concurrency: list[ConcurrencyFigures],
    image: ImageFigures,
    load: tuple[float, float, float],
) -> str:
    mib = 1024.0
    lines = [
        SECTION_START,
        "## GPU poller",
        "",
        "Command: `make bench` (or `.venv/bin/python -m bench poller`). Against the fake "
        "`libnvidia-ml.so.1` of `tests/poller` (no GPU on this machine), so these are the poller's own "
        "costs; on a real node every NVML call adds the driver's time. "
        f"Machine: {os.cpu_count()} CPU cores shared with other work (load average at start "
        f"{load[0]:.1f}), Python {platform.python_version()}.",
        "",
        f"**One full collection of {GPUS} GPUs including writing `/metrics`** ({cpu.page_samples} samples, "
        f"{cpu.page_bytes / 1000:.1f} kB, with GPM; {cpu.page_samples_without_gpm} samples without), CPU time, "
        f"{CPU_ITERATIONS} runs interleaved in one process:",
        "",
        "| what | median | p99 |",
        "|---|---|---|",
        f"| poller with GPM: NVML pass (2 GPM calls a GPU) + text page | {cpu.poller_us.median:.0f} µs | "
        f"{cpu.poller_us.p99:.0f} µs |",
        f"| poller without GPM (a GPU older than Hopper) | {cpu.poller_without_gpm_us.median:.0f} µs | "
        f"{cpu.poller_without_gpm_us.p99:.0f} µs |",
        f"| spawn `/bin/true` (parent + child; the floor of an nvidia-smi poller) | "
        f"{cpu.spawn_us.median:.0f} µs | {cpu.spawn_us.p99:.0f} µs |",
        f"| same page via prometheus-client `generate_latest` (reference) | "
        f"{cpu.generate_latest_us.median:.0f} µs | {cpu.generate_latest_us.p99:.0f} µs |",
        "",
        f"With GPM the poller is **{cpu.spawn_us.median / cpu.poller_us.median:.1f}x** cheaper than the spawn "
        f"floor at the median and {cpu.spawn_us.p99 / cpu.poller_us.p99:.1f}x at p99 (goal: 3x); without GPM "
        f"{cpu.spawn_us.median / cpu.poller_without_gpm_us.median:.1f}x at the median (GPM adds "
        f"{cpu.poller_us.median - cpu.poller_without_gpm_us.median:.0f} µs a pass for {GPUS} GPUs). nvidia-smi "
        "itself costs tens of milliseconds a call (about 50 ms).",
        "",
        f"**Resident memory** (VmRSS of `python -m poller`, {GPUS} fake GPUs with GPM): "
        f"{rss.after_start_kib / mib:.1f} MiB after start and a first scrape, "
        f"{rss.after_scrapes_kib / mib:.1f} MiB after {rss.scrapes:,} sequential scrapes "
        f"(growth {(rss.after_scrapes_kib - rss.after_start_kib) / mib:+.2f} MiB; goal: under 40 MiB, growth "
        f"under 1 MiB); {rss.after_twice_kib / mib:.1f} MiB after {rss.scrapes:,} more "
        f"({(rss.after_twice_kib - rss.after_scrapes_kib) / mib:+.2f} MiB: the growth is warm-up, not a leak). "
        f"{rss.scrapes:,} scrapes took {rss.seconds:.1f} s ({rss.scrapes / rss.seconds:.0f} scrapes/s, "
        "client on the same 2 cores).",
        "",
        f"**{CONCURRENT_SCRAPERS} concurrent scrapers** on loopback, {CONCURRENT_SECONDS:g} s each run "
        "(asyncio clients, a new connection per scrape):",
        "",
        "| --min-interval | scrapes | errors | p50 latency | p99 latency | max |",
        "|---|---|---|---|---|---|",
    ]
    for figures in concurrency:
        lines.append(
            f"| {figures.min_interval:g} s | {figures.scrapes:,} | {figures.errors} | "
            f"{figures.latency_ms.median:.1f} ms | {figures.latency_ms.p99:.1f} ms | {figures.max_ms:.1f} ms |"
        )
    lines.append("")
    if image.paragraph:
        lines.append(image.paragraph)
    elif image.size_bytes is not None and image.build_seconds is not None:
        lines.append(
            f"**Image** (`poller/Dockerfile`, built offline with buildah on a debootstrap bookworm+python3 base; "
            f"uncompressed): **{image.size_bytes / 1e6:.1f} MB** (goal: under 150 MB; dcgm-exporter images "
            f"have been 1.4-2 GB); the poller's own layer is {image.layer_sizes[-1] / 1e6:.1f} MB. Build "
            f"{image.build_seconds:.0f} s with the base cached. {image.note}. The Dockerfile's default base "
            "(distroless python3-debian12) is not measured: no registry access here."
        )
    else:
        lines.append(f"**Image**: {image.note}.")
    lines += ["", SECTION_END]
    return "\n".join(lines) + "\n"


def cpu_summary(cpu: CpuFigures, load: tuple[float, float, float]) -> str:
    return (
        f"load average at start {load[0]:.1f}; with GPM {cpu.poller_us.median:.0f} µs median, "
        f"{cpu.poller_us.p99:.0f} µs p99; without GPM {cpu.poller_without_gpm_us.median:.0f} µs; "
        f"spawn {cpu.spawn_us.median:.0f} µs median, "
        f"{cpu.spawn_us.p99:.0f} µs p99: with GPM {cpu.spawn_us.median / cpu.poller_us.median:.2f}x cheaper at the "
        f"median, {cpu.spawn_us.p99 / cpu.poller_us.p99:.2f}x at p99; without GPM "
        f"{cpu.spawn_us.median / cpu.poller_without_gpm_us.median:.2f}x"
    )


def main() -> None:
    load = os.getloadavg()
    harness = fake_nvml_harness
    with tempfile.TemporaryDirectory(prefix="bench-poller-") as tmp:
        work = Path(tmp)
        if os.environ.get(ENV_ONLY_CPU) == "1":
            print(cpu_summary(measure_cpu(harness, work), load))
            return
        lib_dir = harness.build_fake_nvml(work / "subprocess-lib")
        cpu = _time("collection CPU time", lambda: measure_cpu(harness, work))
        rss = _time("resident memory", lambda: measure_rss(harness, lib_dir, work))
        concurrency = [
            _time(
                f"{CONCURRENT_SCRAPERS} scrapers, min interval {m:g}",
                lambda m=m: measure_concurrency(harness, lib_dir, work, m),  # type: ignore[misc]
            )
            for m in (0.0, 5.0)
        ]
    previous = previous_image_paragraph()
    if os.environ.get(ENV_SKIP_IMAGE) == "1" and previous is not None:
        # The image build shares one container storage with the image test: keep the last figures.
        image = ImageFigures(None, None, "", paragraph=previous)
    else:
        image = _time("image", measure_image)  # type: ignore[assignment]
    section = render_section(cpu, rss, concurrency, image, load)  # type: ignore[arg-type]
    print(section)
    write_section(section, SECTION_START, SECTION_END)


if __name__ == "__main__":
    main()
