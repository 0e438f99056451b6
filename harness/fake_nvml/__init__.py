"""Build and drive the fake `libnvidia-ml.so.1`, and run the poller against it.

Importable from any test (or benchmark) that needs GPU metrics without a GPU (the repository root
is on the import path):

    from harness import fake_nvml as harness

    lib_dir = harness.build_fake_nvml(tmp_path / "lib")            # gcc; returns the directory
    config = harness.FakeNvml(gpus=[harness.FakeGpu(), harness.hot_gpu()])  # GPU 1 at 90 C
    config.write(tmp_path / "nvml.conf")
    with harness.PollerProcess(lib_dir, tmp_path / "nvml.conf", tmp_path) as poller:
        poller.value("ml_gpu_temperature_celsius", gpu_id="1")  # 90.0
        # a Prometheus can scrape poller.url + "/metrics" (node label: poller.node)
    # Your own process manager instead: poller_env(lib_dir, config) is the environment to run
    # `python -m poller` with (cwd: the repository root); MetricsEndpoint(host, port) scrapes it.

The fake re-reads its config file whenever it changes, so `config.write(...)` again flips values
or faults while the poller runs. The poller must be a subprocess: `LD_LIBRARY_PATH` is read only
when a process starts, and nvidia-ml-py keeps its library and function pointers for life.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

from harness.ports import free_port
from infra import REPO_ROOT

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
SONAME = "libnvidia-ml.so.1"

# NVML return codes the tests inject.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

# The GPM entry points: build with omit=GPM_FUNCTIONS for a driver older than GPM (before R520).
GPM_FUNCTIONS = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
)


def build_fake_nvml(out_dir: Path, omit: Iterable[str] = ()) -> Path:
    """Compile the fake into `out_dir/libnvidia-ml.so.1` (leaving out the `omit` functions).

    Returns `out_dir`, the directory to put on LD_LIBRARY_PATH.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / SONAME
    command = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
        "-pthread",
        f"-Wl,-soname,{SONAME}",
        *(f"-DOMIT_{name}" for name in omit),
        "-o",
        str(target),
        str(SOURCE),
        "-lm",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake NVML library failed:\n{' '.join(command)}\n{result.stderr}")
    return out_dir


# The fake's GPM metrics (config name -> NVML_GPM_METRIC_* id): percent, then MiB/s.
GPM_METRICS: dict[str, int] = {
    "sm_util": 2,
    "sm_occupancy": 3,
    "any_tensor_util": 5,
    "dram_bw_util": 10,
    "pcie_tx": 20,
    "pcie_rx": 21,
    "nvlink_rx": 60,
    "nvlink_tx": 61,
}
DEFAULT_GPM_RATES: dict[str, float] = {
    "sm_util": 42.0,
    "sm_occupancy": 27.5,
    "any_tensor_util": 31.0,
    "dram_bw_util": 36.0,
    "pcie_tx": 120.0,
    "pcie_rx": 480.0,
    "nvlink_rx": 2048.0,
    "nvlink_tx": 1536.0,
}


@dataclass
class FakeMig:
    """One MIG device of a fake GPU in MIG mode (a GPU instance with one compute instance)."""

    uuid: str
    profile: str = "1g.10gb"
    gpu_instance_id: int = 1
    compute_slices: int = 1
    gpu_slices: int = 1
    sm_count: int = 16
    memory_total: int = 10_737_418_240
    memory_used: int = 0
    gpm: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_GPM_RATES))
    errors: dict[str, int] = field(default_factory=dict)  # memory, name, uuid, attributes, gpm_sample

    def render(self, prefix: str) -> list[str]:
        lines = [
            prefix + f"uuid {self.uuid}",
            prefix + f"profile {self.profile}",
            prefix + f"gpu_instance_id {self.gpu_instance_id}",
            prefix + f"compute_slices {self.compute_slices}",
            prefix + f"gpu_slices {self.gpu_slices}",
            prefix + f"sm_count {self.sm_count}",
            prefix + f"memory_total {self.memory_total}",
            prefix + f"memory_used {self.memory_used}",
        ]
        lines += [prefix + f"gpm.{name} {rate!r}" for name, rate in sorted(self.gpm.items())]
        lines += [prefix + f"error.{name} {code}" for name, code in sorted(self.errors.items())]
        return lines


# The H100 80GB MIG profiles the tests use: (compute slices, GPU slices, SMs, memory bytes).
MIG_PROFILES: dict[str, tuple[int, int, int, int]] = {
    "1g.10gb": (1, 1, 16, 10_737_418_240),
    "2g.20gb": (2, 2, 32, 21_474_836_480),
    "3g.40gb": (3, 4, 60, 42_949_672_960),
    "7g.80gb": (7, 8, 132, 85_899_345_920),
}


def mig(uuid: str, profile: str, gpu_instance_id: int, **settings: object) -> FakeMig:
    """A MIG device of `profile` (one of MIG_PROFILES) with its slices, SMs and memory."""
    compute, slices, sms, memory = MIG_PROFILES[profile]
    values: dict[str, object] = {
        "uuid": uuid,
        "profile": profile,
        "gpu_instance_id": gpu_instance_id,
        "compute_slices": compute,
        "gpu_slices": slices,
        "sm_count": sms,
        "memory_total": memory,
    }
    values.update(settings)
    return FakeMig(**values)  # type: ignore[arg-type]


@dataclass
class FakeGpu:
    """One fake GPU: its readings in NVML's units (bytes, milliwatts, MHz) and its faults."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None  # default: GPU-00000000-0000-0000-0000-<index, 12 digits>
    util_gpu: int = 50
    util_memory: int = 20
    memory_total: int = 85_899_345_920
    memory_used: int = 1_073_741_824
    temperature: int = 40
    power_mw: int = 100_000
    power_limit_mw: int = 700_000
    clock_sm_mhz: int = 1980
    clock_mem_mhz: int = 2619
    clocks_event_reasons: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    supported_events: int = 0x8F
    energy_mj: int = 5_000_000  # total energy at load; grows by power_mw while the poller reads it
    lost: bool = False
    errors: dict[str, int] = field(default_factory=dict)  # field name -> NVML return code
    delay_us: int = 0  # sleep in nvmlDeviceGetUtilizationRates
    # GPU Performance Monitoring: support, the rate of each metric (GPM_METRICS), faults.
    gpm_supported: bool = True
    gpm: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_GPM_RATES))
    gpm_errors: dict[str, int] = field(default_factory=dict)  # GPM metric -> per-metric NVML return code
    gpm_counter_bits: int = 64  # the counters wrap at 2**bits
    gpm_counter_start: int = 0
    gpm_reset: int = 0  # change it to put the counters back to their start (a GPU reset)
    # MIG: the mode, the slots (max MIG devices; None: 7 in MIG mode) and the MIG devices by slot.
    mig_mode: bool = False
    mig_max: int | None = None
    migs: dict[int, FakeMig] = field(default_factory=dict)

    def default_uuid(self, index: int) -> str:
        return self.uuid or f"GPU-00000000-0000-0000-0000-{index:012d}"


def hot_gpu(temperature: int = 90, **settings: object) -> FakeGpu:
    """A GPU running hot (90 C by default) and thermally throttled, fully busy."""
    values: dict[str, object] = {
        "temperature": temperature,
        "util_gpu": 100,
        "clocks_event_reasons": 0x40 | 0x20,
        "power_mw": 690_000,
    }
    values.update(settings)
    return FakeGpu(**values)  # type: ignore[arg-type]


@dataclass
class FakeNvml:
    """The whole fake driver state; `write()` it to the file $FAKE_NVML_CONFIG names."""

    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    init_error: int = 0
    wait_error: int = 0
    driver_version: str = "550.54.15"
    nvml_version: str = "12.550.54.15"
    cuda_driver_version: int = 12040
    xids: list[tuple[int, int]] = field(default_factory=list)  # (gpu index, XID code), delivered in order

    def render(self) -> str:
        lines = [
            f"device_count {len(self.gpus)}",
            f"init_error {self.init_error}",
            f"wait_error {self.wait_error}",
            f"driver_version {self.driver_version}",
            f"nvml_version {self.nvml_version}",
            f"cuda_driver_version {self.cuda_driver_version}",
        ]
        for index, gpu in enumerate(self.gpus):
            prefix = f"gpu.{index}."
            lines += [
                prefix + f"name {gpu.name}",
                prefix + f"uuid {gpu.default_uuid(index)}",
                prefix + f"util_gpu {gpu.util_gpu}",
                prefix + f"util_memory {gpu.util_memory}",
                prefix + f"memory_total {gpu.memory_total}",
                prefix + f"memory_used {gpu.memory_used}",
                prefix + f"temperature {gpu.temperature}",
                prefix + f"power_mw {gpu.power_mw}",
                prefix + f"power_limit_mw {gpu.power_limit_mw}",
                prefix + f"clock_sm_mhz {gpu.clock_sm_mhz}",
                prefix + f"clock_mem_mhz {gpu.clock_mem_mhz}",
                prefix + f"clocks_event_reasons {gpu.clocks_event_reasons:#x}",
                prefix + f"ecc_corrected {gpu.ecc_corrected}",
                prefix + f"ecc_uncorrected {gpu.ecc_uncorrected}",
                prefix + f"supported_events {gpu.supported_events:#x}",
                prefix + f"energy_mj {gpu.energy_mj}",
                prefix + f"lost {int(gpu.lost)}",
                prefix + f"delay_us {gpu.delay_us}",
            ]
            lines += [prefix + f"error.{name} {code}" for name, code in sorted(gpu.errors.items())]
            lines += [
                prefix + f"gpm_supported {int(gpu.gpm_supported)}",
                prefix + f"gpm_counter_bits {gpu.gpm_counter_bits}",
                prefix + f"gpm_counter_start {gpu.gpm_counter_start}",
                prefix + f"gpm_reset {gpu.gpm_reset}",
            ]
            lines += [prefix + f"gpm.{name} {rate!r}" for name, rate in sorted(gpu.gpm.items())]
            lines += [prefix + f"gpm_error.{name} {code}" for name, code in sorted(gpu.gpm_errors.items())]
            lines.append(prefix + f"mig_mode {int(gpu.mig_mode)}")
            if gpu.mig_max is not None:
                lines.append(prefix + f"mig_max {gpu.mig_max}")
            for slot, device in sorted(gpu.migs.items()):
                lines += device.render(prefix + f"mig.{slot}.")
        lines += [f"xid {seq} {gpu} {code}" for seq, (gpu, code) in enumerate(self.xids, start=1)]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        """Replace the file atomically (the fake notices the new inode and re-reads it)."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.render())
        os.replace(tmp, path)


def install_fake_nvidia_smi(directory: Path) -> Path:
    """Write an `nvidia-smi` into `directory` that answers from the fake's config; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_nvidia_smi.py"}" "$@"\n')
    tool.chmod(0o755)
    return tool


def http_get(host: str, port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes, str]:
    """(status, body, content type) of one GET."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type", "")
    finally:
        connection.close()


def poller_env(lib_dir: Path | None, config: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a poller process that loads the fake library from `lib_dir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_", "POLLER_"))}
    env["LD_LIBRARY_PATH"] = str(lib_dir) if lib_dir is not None else ""
    env["FAKE_NVML_CONFIG"] = str(config)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


class MetricsEndpoint:
    """Scrape and parse a `/metrics` page (with prometheus-client's parser)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"

    def scrape(self) -> str:
        status, body, _ = http_get(self.host, self.port, "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return body.decode()

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Every sample of one scrape, parsed by prometheus-client's parser."""
        return [
            (sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(self.scrape())
            for sample in family.samples
        ]

    def values(self, name: str, **labels: str) -> list[float]:
        """Values of the samples named `name` whose labels include `labels`."""
        return [
            value
            for sample_name, sample_labels, value in self.samples()
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float | None:
        """The one matching sample's value; None when there is none."""
        found = self.values(name, **labels)
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}")
        return found[0] if found else None

    def wait_for(self, name: str, expected: float | None, timeout: float = 10.0, **labels: str) -> None:
        """Scrape until `name{labels}` has `expected` (None: until the sample is absent)."""
        deadline = time.monotonic() + timeout
        last: float | None = None
        while time.monotonic() < deadline:
            last = self.value(name, **labels)
            if last == expected:
                return
            time.sleep(0.1)
        raise AssertionError(f"{name}{labels} is {last}, expected {expected} within {timeout}s\n{self.log()}")

    def log(self) -> str:
        """Context for assertion messages (a process's output, where there is one)."""
        return ""


class ServedProcess(MetricsEndpoint):
    """A server started as a subprocess on a free loopback port, its output in a log file: ready
    once `/healthz` answers 200, stopped with SIGTERM (killed by PID after a timeout)."""

    READY_TIMEOUT = 15.0
    STOP_TIMEOUT = 10.0

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        work_dir: Path,
        env: Mapping[str, str],
        port: int,
        cwd: Path = REPO_ROOT,
    ) -> None:
        super().__init__("127.0.0.1", port)
        self.name = name
        self.log_path = work_dir / f"{name}-{port}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            list(command), cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, env=dict(env)
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        timeout = self.READY_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            try:
                if http_get(self.host, self.port, "/healthz", timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready on {self.url} after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float | None = None) -> int:
        """SIGTERM, wait, return the exit code (kills by PID after `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.STOP_TIMEOUT if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


class PollerProcess(ServedProcess):
    """`python -m poller` as a subprocess on a free loopback port; stopped with SIGTERM."""

    def __init__(
        self,
        lib_dir: Path | None,
        config: Path,
        work_dir: Path,
        *,
        args: Sequence[str] = ("--min-interval", "0"),
        node: str = "test-node",
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        port = free_port()
        self.node = node
        command = [python, "-m", "poller", "--listen", f"127.0.0.1:{port}", *args]
        environment = poller_env(lib_dir, config, {"NODE_NAME": node, **(env or {})})
        super().__init__("poller", command, work_dir, environment, port)

    def __enter__(self) -> PollerProcess:
        self.wait_ready()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
