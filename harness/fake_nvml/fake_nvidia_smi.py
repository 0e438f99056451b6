"""A fake `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` over the fake NVML's config.

It reads the same file the fake libnvidia-ml.so.1 reads ($FAKE_NVML_CONFIG), so the device check
can compare the poller with "nvidia-smi" without a GPU. Only the query mode the device check uses
(and `-L`, the device list with MIG devices) is implemented; an unknown field fails like the real tool.
$FAKE_NVIDIA_SMI_OVERRIDES (`GPU:field=value;...`) makes it disagree with the library on purpose.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

MIB = 1024 * 1024
DEFAULTS = {
    "name": "NVIDIA H100 80GB HBM3",
    "util_gpu": "50",
    "util_memory": "20",
    "memory_total": "85899345920",
    "memory_used": "1073741824",
    "temperature": "40",
    "power_mw": "100000",
    "power_limit_mw": "700000",
    "clock_sm_mhz": "1980",
    "clock_mem_mhz": "2619",
    "ecc_corrected": "0",
    "ecc_uncorrected": "0",
}
# The fake library's per-field error names, for the fields nvidia-smi then shows as [N/A].
ERROR_FIELDS = {
    "utilization.gpu": "utilization",
    "utilization.memory": "utilization",
    "memory.total": "memory",
    "memory.used": "memory",
    "memory.free": "memory",
    "temperature.gpu": "temperature",
    "power.draw": "power",
    "enforced.power.limit": "power_limit",
    "clocks.sm": "clock_sm",
    "clocks.mem": "clock_mem",
    "ecc.errors.corrected.volatile.total": "ecc_corrected",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
}


def read_config(path: str) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    top: dict[str, str] = {"device_count": "1", "driver_version": "550.54.15"}
    gpus: dict[int, dict[str, str]] = {}
    with open(path) as config:
        for raw in config:
            line = raw.split("#", 1)[0].strip()
            key, _, value = line.partition(" ")
            if not key:
                continue
            if key.startswith("gpu."):
                index, _, name = key[4:].partition(".")
                gpus.setdefault(int(index), {})[name] = value.strip()
            else:
                top[key] = value.strip()
    return top, gpus


def compute_capability(name: str) -> str:
    if any(tag in name for tag in ("H100", "H200", "H20", "GH200")):
        return "9.0"
    if any(tag in name for tag in ("B100", "B200", "GB200")):
        return "10.0"
    return "8.0" if "A100" in name or "A30" in name else "8.6"


def field_values(index: int, gpu: dict[str, str], driver: str) -> dict[str, Callable[[], str]]:
    def get(key: str) -> str:
        return gpu.get(key, DEFAULTS.get(key, "0"))

    def number(key: str, scale: float = 1.0) -> str:
        value = float(int(get(key), 0)) / scale
        return f"{value:.2f}" if scale != 1.0 and value != int(value) else str(int(value))

    def free() -> str:
        return str((int(get("memory_total")) - int(get("memory_used"))) // MIB)

    name = get("name")
    return {
        "index": lambda: str(index),
        "uuid": lambda: gpu.get("uuid", f"GPU-00000000-0000-0000-0000-{index:012d}"),
        "name": lambda: name,
        "driver_version": lambda: driver,
        "compute_cap": lambda: compute_capability(name),
        "utilization.gpu": lambda: number("util_gpu"),
        "utilization.memory": lambda: number("util_memory"),
        "memory.total": lambda: str(int(get("memory_total")) // MIB),
        "memory.used": lambda: str(int(get("memory_used")) // MIB),
        "memory.free": free,
        "temperature.gpu": lambda: number("temperature"),
        "power.draw": lambda: f"{int(get('power_mw')) / 1000:.2f}",
        "enforced.power.limit": lambda: f"{int(get('power_limit_mw')) / 1000:.2f}",
        "clocks.sm": lambda: number("clock_sm_mhz"),
        "clocks.mem": lambda: number("clock_mem_mhz"),
        "ecc.errors.corrected.volatile.total": lambda: number("ecc_corrected"),
        "ecc.errors.uncorrected.volatile.total": lambda: number("ecc_uncorrected"),
        "mig.mode.current": lambda: "Enabled" if get("mig_mode") == "1" else "Disabled",
    }


def list_devices(top: dict[str, str], gpus: dict[int, dict[str, str]]) -> str:
    """`nvidia-smi -L`: each GPU, and under a GPU in MIG mode each of its MIG devices."""
    lines = []
    for index in range(int(top["device_count"])):
        gpu = gpus.get(index, {})
        uuid = gpu.get("uuid", f"GPU-00000000-0000-0000-0000-{index:012d}")
        lines.append(f"GPU {index}: {gpu.get('name', DEFAULTS['name'])} (UUID: {uuid})")
        if gpu.get("mig_mode") != "1":
            continue
        slots = sorted({int(k.split(".")[1]) for k in gpu if k.startswith("mig.") and k.endswith(".uuid")})
        for device, slot in enumerate(slots):
            profile = gpu.get(f"mig.{slot}.profile", "1g.10gb")
            lines.append(f"  MIG {profile:<12} Device {device:>2}: (UUID: {gpu[f'mig.{slot}.uuid']})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["-L"]:
        print(list_devices(*read_config(os.environ["FAKE_NVML_CONFIG"])))
        return 0
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None or "--format=csv,noheader,nounits" not in argv:
        print("fake nvidia-smi: only --query-gpu=... --format=csv,noheader,nounits is implemented", file=sys.stderr)
        return 2
    top, gpus = read_config(os.environ["FAKE_NVML_CONFIG"])
    if int(top.get("init_error", "0")) != 0:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    overrides: dict[tuple[int, str], str] = {}
    for item in filter(None, os.environ.get("FAKE_NVIDIA_SMI_OVERRIDES", "").split(";")):
        where, _, value = item.partition("=")
        gpu_index, _, name = where.partition(":")
        overrides[(int(gpu_index), name)] = value
    fields = query.split(",")
    rows = []
    for index in range(int(top["device_count"])):
        gpu = gpus.get(index, {})
        values = field_values(index, gpu, top["driver_version"])
        row = []
        for name in fields:
            if name not in values:
                print(f'Field "{name}" is not a valid field to query.')
                return 2
            error = ERROR_FIELDS.get(name)
            if error is not None and int(gpu.get(f"error.{error}", "0")) == 3:
                row.append("[N/A]")
            else:
                row.append(overrides.get((index, name), values[name]()))
        rows.append(", ".join(row))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
