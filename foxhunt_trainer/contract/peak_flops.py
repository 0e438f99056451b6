"""Peak FLOP/s by GPU model and precision, as data: `foxhunt_trainer/contract/peak_flops.json`.

Peak dense throughput of one GPU, in TFLOP/s, by GPU model (exactly as NVML names it: the poller's
`gpu_name` label) and by the precision the model's matrix multiplies run in. Model FLOPs
utilization (MFU) divides a job's achieved model FLOP/s by the sum of these over the GPUs it holds:
the recording rules (`observability.rules.goodput`, through `ObservabilityConfig.peak_flops`) and
the trainer's end-of-run summary (`foxhunt_trainer.summary`) read this one table, so the wheel ships
it. A GPU model or a precision missing here leaves the job's MFU absent: it is never computed
against a guessed peak. Add a model only with its source (every entry's `source`).

Precisions: fp32 (CUDA cores, no tensor cores), tf32, bf16, fp16, fp8 (tensor cores, dense).
Datasheets quote tensor-core figures "with sparsity" (2:4 structured sparsity doubles them);
training runs dense, so the values here are the dense ones: where a source quotes only the sparse
figure, the value is half of it, and the source says so.

Standard library only (JSON): the trainer wheel reads it without PyYAML.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt_trainer.contract import catalog

PEAK_FLOPS_FILE = Path(__file__).with_name("peak_flops.json")

PRECISIONS = catalog.MODEL_FLOPS_PRECISIONS
TERA = 1e12
# No GPU of this table comes within an order of magnitude of this (a typo guard: PFLOP/s given as TFLOP/s).
_MAX_TFLOPS = 100_000.0


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model's dense peak per precision (FLOP/s) and where the figures come from."""

    name: str
    flops: tuple[tuple[str, float], ...]
    source: str

    def peak(self, precision: str) -> float | None:
        return dict(self.flops).get(precision)


@dataclass(frozen=True)
class PeakFlopsTable:
    gpus: tuple[GpuPeak, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(gpu.name for gpu in self.gpus)

    def peak(self, gpu_name: str, precision: str) -> float | None:
        """Peak FLOP/s of one GPU of model `gpu_name` at `precision`; None where the table has none.
        A MIG device (NVML names it `<GPU> MIG <profile>`) has its GPU's peak scaled by its share of
        the GPU's SMs (its profile's compute slices over the whole GPU's)."""
        parent, share = mig_share(gpu_name)
        for gpu in self.gpus:
            if gpu.name == parent:
                value = gpu.peak(precision)
                return None if value is None or share is None else value * share
        return None

    def by_precision(self, precision: str) -> tuple[tuple[str, float], ...]:
        """(GPU model, peak FLOP/s) of every model with a figure for `precision`, in table order."""
        return tuple((gpu.name, value) for gpu in self.gpus if (value := gpu.peak(precision)) is not None)


def mig_share(gpu_name: str) -> tuple[str, float | None]:
    """(the GPU model, the share of its SMs) a device named `gpu_name` has: a whole GPU's name and 1, or
    for a MIG device (`<GPU> MIG <profile>`) its parent's name and its compute slices over the whole
    GPU's (None where the profile does not say)."""
    parent, found, profile = gpu_name.rpartition(" MIG ")
    if not found:
        return gpu_name, 1.0
    slices = catalog.mig_profile_compute_slices(profile)
    return parent, None if slices is None else slices / catalog.MIG_COMPUTE_SLICES


class PeakFlopsError(ValueError):
    """The peak-FLOPs table is malformed: every problem, one per line, naming the entry and the value."""


def parse_peak_flops(document: Any, source: str = PEAK_FLOPS_FILE.name) -> PeakFlopsTable:
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        raise PeakFlopsError(f"{source}: expected a mapping with a list `gpus` of {{name, tflops, source}} entries")
    problems: list[str] = []
    gpus: list[GpuPeak] = []
    seen: set[str] = set()
    for index, entry in enumerate(document["gpus"]):
        where = f"{source}: gpus[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected a mapping with name, tflops and source, got {entry!r}")
            continue
        extra = sorted(set(map(str, entry)) - {"name", "tflops", "source"})
        if extra:
            problems.append(f"{where}: unknown keys {extra}: expected name, tflops and source")
        name, tflops, cited = entry.get("name"), entry.get("tflops"), entry.get("source")
        if not isinstance(name, str) or not name.strip() or any(c in name for c in '"\\$'):
            problems.append(f"{where}: name = {name!r}: expected the GPU model as NVML names it (no quotes or $)")
            continue
        where = f"{source}: {name}"
        if name in seen:
            problems.append(f"{where}: listed twice")
        seen.add(name)
        if not isinstance(cited, str) or not cited.strip():
            problems.append(f"{where}: source = {cited!r}: every figure needs the document it comes from")
        if not isinstance(tflops, dict) or not tflops:
            problems.append(f"{where}: tflops = {tflops!r}: expected a mapping of precision to TFLOP/s")
            continue
        flops: list[tuple[str, float]] = []
        for precision, value in tflops.items():
            if precision not in PRECISIONS:
                problems.append(
                    f"{where}: precision {precision!r} is not known: expected one of {', '.join(PRECISIONS)}"
                )
                continue
            number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
            if not 0 < number <= _MAX_TFLOPS:
                problems.append(
                    f"{where}: tflops.{precision} = {value!r}: expected TFLOP/s above 0 and at most {_MAX_TFLOPS:g}"
                )
                continue
            flops.append((precision, round(number * TERA)))
        gpus.append(GpuPeak(name, tuple(sorted(flops, key=lambda p: PRECISIONS.index(p[0]))), str(cited)))
    if problems:
        raise PeakFlopsError("\n".join(problems))
    return PeakFlopsTable(tuple(gpus))


def load_peak_flops(path: Path = PEAK_FLOPS_FILE) -> PeakFlopsTable:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PeakFlopsError(f"{path.name} is not valid JSON: {exc}") from exc
    return parse_peak_flops(document, path.name)


DEFAULT_PEAK_FLOPS = load_peak_flops()
