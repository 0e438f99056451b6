"""Device check: the GPU poller against a real NVIDIA driver, in under five minutes.

`make device-check` (or `python3 scripts/device_check.py`) on a machine with an NVIDIA GPU:
1. starts the poller (`python -m poller`, nothing built) on a free loopback port;
2. scrapes it and reads `nvidia-smi --query-gpu=...` in the same second, and compares every field
   both give within the tolerances of FIELDS (utilization, memory, temperature, power, clocks,
   ECC, identity, driver; energy where the poller exports it);
3. checks the GPM profiling gauges: present and within 0-100 % on Hopper and newer (compute
   capability 9.0 or more), absent elsewhere;
4. runs a short CUDA load if one is available without downloads (PyTorch, else a PTX kernel
   through the driver's own libcuda; otherwise it says so) and shows the GPM figures rising;
5. MIG: where a GPU is already in MIG mode (`nvidia-smi --query-gpu=mig.mode.current`; the check
   never changes a mode or an instance), compares the poller's MIG devices (UUID, parent, profile,
   memory) with `nvidia-smi -L`; elsewhere it says no GPU is in MIG mode;
6. two processes on one GPU: where PyTorch with CUDA is available, two processes each allocate a
   different amount on GPU 0 and report it through the trainer library's default source
   (`torch.cuda.memory_reserved`, with the device's UUID); each must report its own figure under
   the UUID the poller labels that GPU with, and the GPU's memory in use must hold both;
7. measures collection passes (the poller's own `ml_gpu_poller_collection_duration_seconds`) and
   the poller's resident memory;
8. prints a short report and writes the figures to BENCHMARKS.md ("On a real GPU"); with $OUT
   set, copies the report and BENCHMARKS.md there.
Exit status: 0 when every check passed, 1 when one failed, 2 when there is no GPU to check.

The poller needs nvidia-ml-py and prometheus-client: the interpreter running this script has
them, or `make device-check-deps` (on a machine with registry access) puts the pinned versions of
poller/requirements.txt into build/device-check/site, which this script adds to the poller's path.
Tested against the fake libnvidia-ml.so.1 and a fake nvidia-smi (tests/poller/test_device_check.py).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import http.client
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from foxhunt_trainer.contract import catalog  # noqa: E402  (the repository root is on the path from here)

DEPS_SITE = REPO_ROOT / "build" / "device-check" / "site"
BENCHMARKS = REPO_ROOT / "BENCHMARKS.md"
SECTION_START = "<!-- real-gpu:start -->"
SECTION_END = "<!-- real-gpu:end -->"
MIB = 1024 * 1024
LOAD_SECONDS = 20.0
PASSES = 100
DEADLINE_SECONDS = 280.0  # the whole check stays under five minutes
GPM_GAUGES = (
    catalog.GPU_SM_ACTIVE_PERCENT,
    catalog.GPU_SM_OCCUPANCY_PERCENT,
    catalog.GPU_TENSOR_ACTIVE_PERCENT,
    catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT,
)
NOT_AVAILABLE = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]")


@dataclass(frozen=True)
class Field:
    """One nvidia-smi field, the poller series it is compared with, and the tolerance."""

    smi: str  # --query-gpu name (values read with nounits)
    metric: str  # catalog metric name
    to_smi_unit: Callable[[float], float]  # poller value -> nvidia-smi's unit
    absolute: float  # tolerance in nvidia-smi's unit ...
    relative: float = 0.0  # ... or this share of nvidia-smi's value, whichever is larger
    labels: tuple[tuple[str, str], ...] = ()
    why: str = ""

    def tolerance(self, reference: float) -> float:
        return max(self.absolute, self.relative * abs(reference))


def _same(value: float) -> float:
    return value


# Tolerances: a value that moves within a second (utilization, power, clocks, temperature) gets
# room for that; a value that does not (totals, limits, ECC counts) must match to the unit.
FIELDS: tuple[Field, ...] = (
    Field("utilization.gpu", catalog.GPU_UTILIZATION_PERCENT.name, _same, 15.0, why="sampled over different windows"),
    Field("utilization.memory", catalog.GPU_MEMORY_UTILIZATION_PERCENT.name, _same, 15.0, why="idem"),
    Field("memory.total", catalog.GPU_MEMORY_TOTAL_BYTES.name, lambda b: b / MIB, 1.0, why="MiB rounding"),
    Field(
        "memory.free",
        "free",  # total - used of the poller (NVML v1 "used" includes the driver's reserved memory)
        lambda b: b / MIB,
        64.0,
        0.01,
        why="allocations move within a second",
    ),
    Field("temperature.gpu", catalog.GPU_TEMPERATURE_CELSIUS.name, _same, 3.0, why="moves within a second"),
    Field("power.draw", catalog.GPU_POWER_WATTS.name, _same, 20.0, 0.15, why="averaging windows differ"),
    Field("enforced.power.limit", catalog.GPU_POWER_LIMIT_WATTS.name, _same, 1.0, why="rounding"),
    Field("clocks.sm", catalog.GPU_SM_CLOCK_HERTZ.name, lambda h: h / 1e6, 100.0, 0.15, why="clocks boost and idle"),
    Field("clocks.mem", catalog.GPU_MEMORY_CLOCK_HERTZ.name, lambda h: h / 1e6, 50.0, 0.05, why="idem"),
    Field(
        "ecc.errors.corrected.volatile.total",
        catalog.GPU_ECC_ERRORS_TOTAL.name,
        _same,
        0.0,
        labels=(("ecc_type", "corrected"),),
    ),
    Field(
        "ecc.errors.uncorrected.volatile.total",
        catalog.GPU_ECC_ERRORS_TOTAL.name,
        _same,
        0.0,
        labels=(("ecc_type", "uncorrected"),),
    ),
)
IDENTITY_FIELDS = ("index", "uuid", "name", "driver_version")
OPTIONAL_FIELDS = ("compute_cap", "memory.used")


class Report:
    """Check results and figures; `failed` when any check failed."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failures: list[str] = []
        self.figures: dict[str, str] = {}

    def check(self, ok: bool, what: str) -> bool:
        self.lines.append(f"[{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failures.append(what)
        return ok

    def note(self, what: str) -> None:
        self.lines.append(f"[--] {what}")

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def text(self) -> str:
        summary = f"{len(self.failures)} check(s) failed" if self.failed else "every check passed"
        return "\n".join(["Device check of the GPU poller", *self.lines, f"Result: {summary}"]) + "\n"


# --- nvidia-smi -------------------------------------------------------------------------------
def query_smi(smi: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """One `nvidia-smi --query-gpu` call: a dict per GPU (raw text, units stripped)."""
    result = subprocess.run(
        [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi --query-gpu={','.join(fields)} failed: {result.stdout}{result.stderr}")
    rows = list(csv.reader(io.StringIO(result.stdout), skipinitialspace=True))
    return [dict(zip(fields, (value.strip() for value in row), strict=True)) for row in rows if row]


def smi_number(text: str) -> float | None:
    if text in NOT_AVAILABLE or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


# --- the poller -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_page(text: str) -> Samples:
    """`{(name, sorted labels): value}` of a text-format page (the format the poller writes)."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, label_text = head.partition("{")
        labels: list[tuple[str, str]] = []
        rest = label_text.rstrip("}")
        while rest:
            key, _, rest = rest.partition('="')
            raw, end = [], 0
            while end < len(rest) and rest[end] != '"':
                if rest[end] == "\\":
                    raw.append({"n": "\n", "\\": "\\", '"': '"'}.get(rest[end + 1], rest[end + 1]))
                    end += 2
                else:
                    raw.append(rest[end])
                    end += 1
            labels.append((key, "".join(raw)))
            rest = rest[end + 1 :].lstrip(",")
        samples[(name, tuple(sorted(labels)))] = float(value)
    return samples


def gpu_value(samples: Samples, name: str, uuid: str, extra: tuple[tuple[str, str], ...] = ()) -> float | None:
    for (sample_name, labels), value in samples.items():
        if sample_name == name and ("uuid", uuid) in labels and all(pair in labels for pair in extra):
            return value
    return None


def node_value(samples: Samples, name: str) -> float | None:
    for (sample_name, _), value in samples.items():
        if sample_name == name:
            return value
    return None


class Poller:
    """`python -m poller` on a free loopback port, stopped with SIGTERM."""

    def __init__(self, python: str, work: Path) -> None:
        self.port = free_port()
        env = dict(os.environ)
        if DEPS_SITE.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DEPS_SITE), env.get("PYTHONPATH", "")]))
        self.log_path = work / "poller.log"
        self._log = self.log_path.open("wb")
        command = [python, "-m", "poller", "--listen", f"127.0.0.1:{self.port}", "--min-interval", "0"]
        self.process = subprocess.Popen(
            [*command, "--node-name", "device-check"],
            cwd=REPO_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the poller exited with {self.process.returncode}:\n{self.log()}")
            try:
                if get(self.port, "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the poller did not answer /healthz within {timeout:g} s:\n{self.log()}")

    def scrape(self) -> Samples:
        status, body = get(self.port, "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return parse_page(body)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def poller_python(requested: str | None) -> str | None:
    """An interpreter that can run the poller: the one asked for, this one, or the repo's .venv."""
    candidates = [requested] if requested else [sys.executable, str(REPO_ROOT / ".venv" / "bin" / "python")]
    env = dict(os.environ)
    if DEPS_SITE.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DEPS_SITE), env.get("PYTHONPATH", "")]))
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run(
                [python, "-c", "import pynvml, prometheus_client, sys; assert sys.version_info >= (3, 11)"],
                env=env,
                capture_output=True,
            )
            if probe.returncode == 0:
                return python
    return None


# --- CUDA load ----------------------------------------------------------------------------------
TORCH_LOAD = """
import sys, time, torch
end = time.monotonic() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""

# An FMA chain per thread, JIT-compiled by the driver from PTX: SM activity without any toolkit.
PTX_KERNEL = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 iterations)
{
    .reg .pred p;
    .reg .f32 a, b;
    .reg .u32 i, n;
    .reg .u64 o;
    ld.param.u64 o, [out];
    ld.param.u32 n, [iterations];
    mov.f32 a, 0f3F800000;
    mov.f32 b, 0f3F7FFFFE;
    mov.u32 i, 0;
LOOP:
    fma.rn.f32 a, a, b, b;
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP;
    cvta.to.global.u64 o, o;
    st.global.f32 [o], a;
    ret;
}
"""

PTX_LOAD = """
import ctypes, sys, time
ptx = sys.stdin.buffer.read() + b"\\0"
cuda = ctypes.CDLL("libcuda.so.1")
def check(code, what):
    if code != 0:
        raise SystemExit(f"{what} failed: CUresult {code}")
check(cuda.cuInit(0), "cuInit")
device, context, module, function = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
check(cuda.cuModuleLoadData(ctypes.byref(module), ptx), "cuModuleLoadData")
check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
out = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(out), 4), "cuMemAlloc")
iterations = ctypes.c_uint32(1 << 18)
params = (ctypes.c_void_p * 2)(ctypes.addressof(out), ctypes.addressof(iterations))
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    check(cuda.cuLaunchKernel(function, 1024, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
"""


@dataclass
class Load:
    name: str
    command: list[str]
    stdin: bytes = b""


def find_load(python: str, requested: str, seconds: float) -> tuple[Load | None, str]:
    """The CUDA load to run, and why (or why none)."""
    if requested == "none":
        return None, "no CUDA load: --load none"
    if requested not in ("auto", "torch", "ptx"):
        return Load("command", [*shlex.split(requested), str(seconds)]), f"the given command {requested!r}"
    tried: list[str] = []
    if requested in ("auto", "torch"):
        probe = subprocess.run(
            [python, "-c", "import torch; assert torch.cuda.is_available()"], capture_output=True, timeout=120
        )
        if probe.returncode == 0:
            return Load("torch", [python, "-c", TORCH_LOAD, str(seconds)]), "PyTorch bf16 matmuls (tensor cores)"
        tried.append("PyTorch with CUDA: not importable")
    if requested in ("auto", "ptx"):
        probe = subprocess.run(
            [python, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True, timeout=60
        )
        if probe.returncode == 0:
            return (
                Load("ptx", [python, "-c", PTX_LOAD, str(seconds)], PTX_KERNEL.encode()),
                "an FMA kernel JIT-compiled from PTX by the driver's libcuda (SM activity, no tensor cores)",
            )
        tried.append("libcuda.so.1: not loadable")
    return None, "no CUDA load available without downloads (" + "; ".join(tried) + ")"


# --- the check ----------------------------------------------------------------------------------
@dataclass
class GpuFigures:
    uuid: str
    name: str
    compute_capability: float | None
    idle: dict[str, float | None] = field(default_factory=dict)
    loaded: dict[str, float] = field(default_factory=dict)


def compare_fields(report: Report, samples: Samples, rows: list[dict[str, str]], driver: str | None) -> None:
    for row in rows:
        uuid = row["uuid"]
        where = f"GPU {row['index']} ({row['name']})"
        if not report.check(
            gpu_value(samples, catalog.GPU_TEMPERATURE_CELSIUS.name, uuid) is not None,
            f"{where}: the poller reports {uuid}",
        ):
            continue
        names = {labels for (name, labels) in samples if name == catalog.GPU_TEMPERATURE_CELSIUS.name}
        labelled = [dict(labels) for labels in names if ("uuid", uuid) in labels]
        report.check(
            labelled[0].get("gpu_name") == row["name"] and labelled[0].get("gpu_id") == row["index"],
            f"{where}: index and name match ({labelled[0].get('gpu_id')}, {labelled[0].get('gpu_name')})",
        )
        for spec in FIELDS:
            reference = smi_number(row.get(spec.smi, ""))
            if spec.metric == "free":
                total = gpu_value(samples, catalog.GPU_MEMORY_TOTAL_BYTES.name, uuid)
                used = gpu_value(samples, catalog.GPU_MEMORY_USED_BYTES.name, uuid)
                ours = None if total is None or used is None else total - used
            else:
                ours = gpu_value(samples, spec.metric, uuid, spec.labels)
            if reference is None and ours is None:
                report.note(f"{where}: {spec.smi}: neither nvidia-smi nor the poller has it")
                continue
            if reference is None or ours is None:
                report.check(
                    False,
                    f"{where}: {spec.smi}: nvidia-smi {row.get(spec.smi)!r}, poller "
                    f"{'absent' if ours is None else spec.to_smi_unit(ours)}",
                )
                continue
            converted = spec.to_smi_unit(ours)
            allowed = spec.tolerance(reference)
            report.check(
                abs(converted - reference) <= allowed,
                f"{where}: {spec.smi}: poller {converted:.6g}, nvidia-smi {reference:.6g} (tolerance {allowed:.3g}"
                + (f": {spec.why})" if spec.why else ")"),
            )
        used_smi = smi_number(row.get("memory.used", ""))
        used = gpu_value(samples, catalog.GPU_MEMORY_USED_BYTES.name, uuid)
        if used_smi is not None and used is not None:
            report.note(
                f"{where}: memory.used: poller {used / MIB:.0f} MiB, nvidia-smi {used_smi:.0f} MiB (newer drivers "
                "leave the driver's reserved memory out of nvidia-smi's figure; free memory is compared instead)"
            )
    if driver is not None and rows:
        info = [dict(labels) for (name, labels) in samples if name == catalog.GPU_DRIVER_INFO.name]
        version = info[0].get("driver_version") if info else None
        report.check(version == driver, f"driver version: poller {version}, nvidia-smi {driver}")


def compare_energy(report: Report, poller: Poller, smi: str, seconds: float = 5.0) -> None:
    """The poller's energy counter over `seconds` against nvidia-smi's power read at both ends."""
    energy = getattr(catalog, "GPU_ENERGY_JOULES_TOTAL", None)
    if energy is None:
        report.note("energy: the catalog has no GPU energy counter; not compared")
        return
    fields = ["uuid", "name", "power.draw"]
    before, power_before, started = poller.scrape(), query_smi(smi, fields), time.monotonic()
    time.sleep(seconds)
    after, power_after, elapsed = poller.scrape(), query_smi(smi, fields), time.monotonic() - started
    for row, row_after in zip(power_before, power_after, strict=True):
        uuid, where = row["uuid"], f"GPU {row['name']} ({row['uuid']})"
        first, last = gpu_value(before, energy.name, uuid), gpu_value(after, energy.name, uuid)
        watts = [smi_number(row["power.draw"]), smi_number(row_after["power.draw"])]
        if first is None or last is None or None in watts:
            report.note(f"{where}: energy: poller {first} -> {last} J, nvidia-smi power {watts}: not compared")
            continue
        rate = (last - first) / elapsed
        reference = sum(w for w in watts if w is not None) / 2
        allowed = max(25.0, 0.2 * reference)
        report.check(
            abs(rate - reference) <= allowed,
            f"{where}: energy counter rose {rate:.1f} J/s over {elapsed:.1f} s, nvidia-smi power.draw "
            f"{reference:.1f} W (tolerance {allowed:.0f} W: power between the two reads is not sampled)",
        )


def check_gpm(report: Report, samples: Samples, gpus: list[GpuFigures]) -> None:
    for gpu in gpus:
        where = f"GPU {gpu.name} ({gpu.uuid})"
        values = {metric.name: gpu_value(samples, metric.name, gpu.uuid) for metric in GPM_GAUGES}
        utilization = catalog.GPU_UTILIZATION_PERCENT.name
        gpu.idle = {**values, utilization: gpu_value(samples, utilization, gpu.uuid)}
        hopper = gpu.compute_capability is not None and gpu.compute_capability >= 9.0
        present = [name for name, value in values.items() if value is not None]
        if hopper:
            report.check(
                len(present) == len(GPM_GAUGES),
                f"{where}: compute capability {gpu.compute_capability}: GPM gauges present "
                f"({len(present)}/{len(GPM_GAUGES)})",
            )
            in_range = all(value is not None and 0.0 <= value <= 100.0 for value in values.values())
            report.check(
                in_range,
                f"{where}: GPM gauges within 0-100 %: "
                + ", ".join(f"{name.removeprefix('ml_gpu_')}={value}" for name, value in values.items()),
            )
            pcie = gpu_value(samples, catalog.GPU_PCIE_BYTES_TOTAL.name, gpu.uuid, (("direction", "rx"),))
            report.check(pcie is not None and pcie >= 0, f"{where}: PCIe byte counter present ({pcie})")
            nvlink = gpu_value(samples, catalog.GPU_NVLINK_BYTES_TOTAL.name, gpu.uuid, (("direction", "rx"),))
            report.note(f"{where}: NVLink rx byte counter: {nvlink if nvlink is not None else 'absent (no NVLink)'}")
        elif gpu.compute_capability is None:
            report.note(f"{where}: compute capability unknown; GPM gauges present: {len(present)}")
        else:
            report.check(
                not present, f"{where}: compute capability {gpu.compute_capability} (before Hopper): no GPM gauges"
            )


def sample_under_load(poller: Poller, process: subprocess.Popen[bytes], gpus: list[GpuFigures], seconds: float) -> None:
    """Scrape once a second while the load runs; keep each GPU's peaks in `gpu.loaded`."""
    peaks: dict[str, dict[str, float]] = {gpu.uuid: {} for gpu in gpus}
    end = time.monotonic() + seconds + 2.0
    while time.monotonic() < end and process.poll() is None:
        time.sleep(1.0)
        samples = poller.scrape()
        for gpu in gpus:
            for metric in (*GPM_GAUGES, catalog.GPU_UTILIZATION_PERCENT):
                value = gpu_value(samples, metric.name, gpu.uuid)
                if value is not None:
                    peak = peaks[gpu.uuid]
                    peak[metric.name] = max(peak.get(metric.name, 0.0), value)
    for gpu in gpus:
        gpu.loaded = peaks[gpu.uuid]


def run_load(
    report: Report, poller: Poller, load: Load | None, why: str, gpus: list[GpuFigures], seconds: float
) -> str:
    if load is None:
        report.note(why)
        return why
    report.note(f"CUDA load for {seconds:g} s: {why}")
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(load.command, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT)
        assert process.stdin is not None
        process.stdin.write(load.stdin)
        process.stdin.close()
        sample_under_load(poller, process, gpus, seconds)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.seek(0)
        text = output.read().decode(errors="replace")
    if process.returncode != 0:
        report.note(f"the CUDA load exited with {process.returncode}: {text[-400:]}")
    busy = [gpu for gpu in gpus if gpu.idle.get(catalog.GPU_SM_ACTIVE_PERCENT.name) is not None]
    if not busy:
        report.note("no GPU reports GPM: nothing to see rising")
        return why
    rising = []
    for gpu in busy:
        idle = gpu.idle.get(catalog.GPU_SM_ACTIVE_PERCENT.name) or 0.0
        peak = gpu.loaded.get(catalog.GPU_SM_ACTIVE_PERCENT.name, 0.0)
        rising.append(peak >= idle + 10.0)
        report.note(
            f"GPU {gpu.name} ({gpu.uuid}) idle -> peak under load: "
            + ", ".join(
                f"{metric.name.removeprefix('ml_gpu_')} {gpu.idle.get(metric.name)} -> {gpu.loaded.get(metric.name)}"
                for metric in (catalog.GPU_UTILIZATION_PERCENT, *GPM_GAUGES)
            )
        )
    report.check(any(rising), "GPM SM activity rose by 10 points or more under the load on a loaded GPU")
    return why


# --- MIG and two processes on one GPU -----------------------------------------------------------
MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:\s+\(UUID:\s+(MIG-[^)\s]+)\)")
GPU_LINE = re.compile(r"^GPU\s+\d+:.*\(UUID:\s+(GPU-[^)\s]+)\)")


def smi_mig_devices(smi: str) -> dict[str, tuple[str, str]]:
    """`nvidia-smi -L`'s MIG devices: UUID -> (parent GPU's UUID, profile)."""
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    found: dict[str, tuple[str, str]] = {}
    parent = ""
    for line in result.stdout.splitlines():
        gpu = GPU_LINE.match(line)
        if gpu:
            parent = gpu.group(1)
            continue
        mig = MIG_LINE.match(line)
        if mig:
            found[mig.group(2)] = (parent, mig.group(1))
    return found


def check_mig(report: Report, smi: str, samples: Samples) -> int:
    """The poller's MIG devices against nvidia-smi's, where a GPU is already in MIG mode; how many."""
    try:
        modes = query_smi(smi, ["uuid", "mig.mode.current"])
    except RuntimeError as err:
        report.note(f"nvidia-smi does not report MIG modes ({str(err)[:120]}): MIG not checked")
        return 0
    in_mig = [row["uuid"] for row in modes if row["mig.mode.current"].strip().lower() == "enabled"]
    if not in_mig:
        report.note("no GPU is in MIG mode (the check never changes a GPU's mode): MIG devices not checked")
        return 0
    listed = smi_mig_devices(smi)
    info = catalog.GPU_MIG_DEVICE_INFO.name
    poller = {dict(labels)["uuid"]: dict(labels) for (name, labels), _ in samples.items() if name == info}
    report.check(
        set(poller) == set(listed),
        f"MIG devices: poller {len(poller)}, nvidia-smi -L {len(listed)} on {len(in_mig)} GPU(s) in MIG mode"
        + ("" if set(poller) == set(listed) else f" (differ: {sorted(set(poller) ^ set(listed))})"),
    )
    for uuid, (parent, profile) in sorted(listed.items()):
        labels = poller.get(uuid)
        if labels is None:
            continue
        report.check(
            labels["parent_uuid"] == parent and labels["profile"] == profile,
            f"MIG device {uuid}: parent {labels['parent_uuid']} / {parent}, profile {labels['profile']} / {profile}",
        )
        total = gpu_value(samples, catalog.GPU_MEMORY_TOTAL_BYTES.name, uuid)
        share = gpu_value(samples, catalog.GPU_MIG_SM_SHARE_RATIO.name, uuid)
        report.check(
            total is not None and total > 0 and share is not None and 0 < share <= 1,
            f"MIG device {uuid} ({profile}): memory total {total}, SM share {share}",
        )
    return len(listed)


TWO_PROCESSES = """
import sys, time
sys.path.insert(0, {root!r})
import torch
from foxhunt_trainer import TrainingMetrics, render_text
megabytes, uuid = int(sys.argv[1]), sys.argv[2]
block = torch.empty(megabytes * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
metrics = TrainingMetrics()
metrics.start_job("device-check", "proc-" + sys.argv[1], gpu_uuids=[uuid])
for line in render_text(metrics.registry).decode().splitlines():
    if line.startswith("ml_training_gpu_memory_reserved_bytes{{"):
        print(line, flush=True)
print("ready", flush=True)
sys.stdin.read()
"""
TORCH_CUDA = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"


def check_two_processes(report: Report, poller: Poller, python: str, uuid: str) -> None:
    """Two PyTorch processes on GPU 0, each reporting its own memory under the poller's UUID for it."""
    candidates = [python, sys.executable]
    torch_python = next(
        (c for c in candidates if subprocess.run([c, "-c", TORCH_CUDA], capture_output=True).returncode == 0), None
    )
    if torch_python is None:
        report.note("no PyTorch with CUDA: two processes on one GPU not checked")
        return
    before = gpu_value(poller.scrape(), catalog.GPU_MEMORY_USED_BYTES.name, uuid) or 0.0
    sizes = (256, 768)  # MiB each process allocates
    processes = [
        subprocess.Popen(
            [torch_python, "-c", TWO_PROCESSES.format(root=str(REPO_ROOT)), str(size), uuid],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for size in sizes
    ]
    reported: list[float | None] = []
    try:
        for process in processes:
            assert process.stdout is not None
            figure: float | None = None
            for line in process.stdout:
                if line.startswith("ml_training_gpu_memory_reserved_bytes{"):
                    labels, _, value = line.rpartition(" ")
                    figure = float(value) if f'uuid="{uuid}"' in labels else None
                if line.strip() == "ready" or not line:
                    break
            reported.append(figure)
        time.sleep(1.0)
        during = gpu_value(poller.scrape(), catalog.GPU_MEMORY_USED_BYTES.name, uuid) or 0.0
    finally:
        for process in processes:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for size, figure in zip(sizes, reported, strict=True):
        report.check(
            figure is not None and figure >= size * MIB,
            f"a process holding {size} MiB on GPU 0 reports {0 if figure is None else figure / MIB:.0f} MiB under "
            f"the poller's UUID {uuid}",
        )
    known = [f for f in reported if f is not None]
    report.check(
        len(known) == 2 and known[0] != known[1] and during - before >= sum(sizes) * MIB * 0.9,
        f"two processes on one GPU attributed apart: {', '.join(f'{f / MIB:.0f}' for f in known)} MiB, the GPU's "
        f"memory in use rose {(during - before) / MIB:.0f} MiB",
    )


def measure_passes(poller: Poller, passes: int) -> tuple[list[float], int]:
    durations: list[float] = []
    for _ in range(passes):
        value = node_value(poller.scrape(), catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name)
        if value is not None:
            durations.append(value)
    return durations, poller.rss_kib()


def render_section(report: Report, figures: dict[str, str]) -> str:
    lines = [
        SECTION_START,
        "## On a real GPU",
        "",
        "Command: `make device-check` (scripts/device_check.py) on a machine with an NVIDIA GPU: the poller "
        "against the real driver, every field compared with `nvidia-smi --query-gpu` read in the same second.",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in figures.items()),
        "",
        f"Checks: {len(report.failures)} failed"
        + ("" if not report.failed else " (" + "; ".join(report.failures)[:500] + ")")
        + ".",
        "",
        SECTION_END,
    ]
    return "\n".join(lines) + "\n"


def write_section(section: str, path: Path) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if SECTION_START in text and SECTION_END in text:
        before, rest = text.split(SECTION_START, 1)
        _, after = rest.split(SECTION_END, 1)
        text = before + section.rstrip("\n") + after
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to compare with (default: PATH)")
    parser.add_argument("--python", help="interpreter for the poller (default: this one, else .venv/bin/python)")
    parser.add_argument(
        "--load",
        default="auto",
        help="auto (PyTorch, else PTX through libcuda), torch, ptx, none, or a command run with the seconds appended",
    )
    parser.add_argument("--load-seconds", type=float, default=LOAD_SECONDS)
    parser.add_argument("--passes", type=int, default=PASSES)
    parser.add_argument(
        "--benchmarks", type=Path, default=BENCHMARKS, help="file that gets the 'On a real GPU' section"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = Report()

    smi = shutil.which(args.nvidia_smi) or (args.nvidia_smi if Path(args.nvidia_smi).exists() else None)
    if smi is None:
        print(f"device check: no {args.nvidia_smi} on PATH: this machine has no NVIDIA driver to check against")
        return 2
    python = poller_python(args.python)
    if python is None:
        print(
            "device check: no Python 3.11+ with nvidia-ml-py and prometheus-client for the poller; run "
            "`make device-check-deps` where a package registry is reachable and bring build/device-check along"
        )
        return 2
    try:
        identity = query_smi(smi, [*IDENTITY_FIELDS, *OPTIONAL_FIELDS])
    except RuntimeError:
        identity = query_smi(smi, list(IDENTITY_FIELDS))
    if not identity:
        print("device check: nvidia-smi lists no GPU")
        return 2
    driver = identity[0].get("driver_version")
    gpus = [GpuFigures(row["uuid"], row["name"], smi_number(row.get("compute_cap", ""))) for row in identity]
    report.note(
        f"{len(gpus)} GPU(s): "
        + ", ".join(f"{g.name} (compute capability {g.compute_capability})" for g in gpus)
        + f"; driver {driver}; poller Python {python}"
    )

    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        poller = Poller(python, Path(tmp))
        try:
            started_poller = time.monotonic()
            poller.wait_ready()
            report.note(f"poller ready in {time.monotonic() - started_poller:.1f} s on 127.0.0.1:{poller.port}")
            poller.scrape()  # the start-up pass was the GPM baseline; this one covers an interval

            # The same second: nvidia-smi runs while the poller is scraped.
            smi_fields = [*IDENTITY_FIELDS, *(f.smi for f in FIELDS), "memory.used"]
            with_smi_started = time.time()
            smi_process = subprocess.Popen(
                [smi, f"--query-gpu={','.join(smi_fields)}", "--format=csv,noheader,nounits"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            scraped_at = time.time()
            samples = poller.scrape()
            smi_output, _ = smi_process.communicate(timeout=60)
            smi_done = time.time()
            rows = [
                dict(zip(smi_fields, (v.strip() for v in row), strict=True))
                for row in csv.reader(io.StringIO(smi_output), skipinitialspace=True)
                if row and smi_process.returncode == 0
            ]
            report.check(smi_process.returncode == 0, f"nvidia-smi answered the field query ({smi_output[:200]!r})")
            spread = max(smi_done, scraped_at) - min(with_smi_started, scraped_at)
            report.check(spread < 1.0, f"scrape and nvidia-smi read within {spread:.2f} s of each other")
            report.check(
                node_value(samples, catalog.GPU_POLLER_NVML_UP.name) == 1.0, "the poller reaches NVML (nvml_up 1)"
            )
            report.check(
                node_value(samples, catalog.GPU_POLLER_DEVICES.name) == float(len(identity)),
                f"the poller sees {node_value(samples, catalog.GPU_POLLER_DEVICES.name) or 0:.0f} GPU(s), nvidia-smi "
                f"{len(identity)}",
            )
            compare_fields(report, samples, rows, driver)
            compare_energy(report, poller, smi)
            check_gpm(report, samples, gpus)
            mig_devices = check_mig(report, smi, samples)
            check_two_processes(report, poller, python, gpus[0].uuid)

            load, why = find_load(python, args.load, args.load_seconds)
            remaining = DEADLINE_SECONDS - (time.monotonic() - started)
            load_seconds = max(0.0, min(args.load_seconds, remaining - 60.0))
            load_text = run_load(report, poller, load, why, gpus, load_seconds)

            durations, rss = measure_passes(poller, args.passes)
        finally:
            poller.stop()
        if durations:
            durations.sort()
            median = statistics.median(durations)
            p95 = durations[min(len(durations) - 1, int(0.95 * len(durations)))]
            report.note(
                f"collection pass ({len(durations)} passes, {len(gpus)} GPUs): median {median * 1e3:.2f} ms, "
                f"p95 {p95 * 1e3:.2f} ms; poller RSS {rss / 1024:.1f} MiB"
            )
        else:
            median = p95 = float("nan")
        log = poller.log_path.read_text(errors="replace") if poller.log_path.exists() else ""

    elapsed = time.monotonic() - started
    report.check(elapsed < 300.0, f"the device check took {elapsed:.0f} s (limit 300 s)")
    gpm_gpus = [g for g in gpus if g.idle.get(catalog.GPU_SM_ACTIVE_PERCENT.name) is not None]
    figures = {
        "date (UTC)": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "GPUs": ", ".join(sorted({g.name for g in gpus})) + f" x {len(gpus)}",
        "driver / host": f"{driver} / {platform.machine()}, {os.cpu_count()} CPU cores",
        "fields compared": f"{len(FIELDS)} per GPU (+ identity, driver version)",
        "one collection pass (median / p95)": (
            f"{median * 1e3:.2f} ms / {p95 * 1e3:.2f} ms over {len(durations)} passes"
        ),
        "poller RSS": f"{rss / 1024:.1f} MiB",
        "GPUs reporting GPM": f"{len(gpm_gpus)} of {len(gpus)}",
        "MIG devices (GPUs already in MIG mode)": str(mig_devices),
        "CUDA load": load_text,
    }
    for gpu in gpm_gpus:
        sm, tensor = catalog.GPU_SM_ACTIVE_PERCENT.name, catalog.GPU_TENSOR_ACTIVE_PERCENT.name
        idle, loaded = (
            f"{gpu.idle.get(sm)} / {gpu.idle.get(tensor)}",
            f"{gpu.loaded.get(sm)} / {gpu.loaded.get(tensor)}",
        )
        figures[f"SM / tensor active, idle -> under load ({gpu.name})"] = f"{idle} -> {loaded} %"
        break
    report.figures = figures
    text = report.text()
    print(text, end="")
    write_section(render_section(report, figures), args.benchmarks)
    out = os.environ.get("OUT")
    if out and Path(out).is_dir():
        Path(out, "device-check-report.txt").write_text(text + "\n--- poller log ---\n" + log)
        Path(out, "device-check-figures.json").write_text(json.dumps(figures, indent=2))
        shutil.copy(args.benchmarks, Path(out, "BENCHMARKS.md"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
