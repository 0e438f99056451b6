"""The rows of the NVML readings a pass takes from each GPU (as dcgm-exporter keeps one line per
field in its counters CSV): the call and its options, the C type NVML writes, the scale to the
catalog's unit, the `GpuSample` attribute and the catalog metric it is exported as.

A reading is declared once, as its attribute of `GpuSample` (`poller.samples`) with its row:
`temperature_celsius: int | None = nvml("temperature", ...)`; so the attribute is typed for mypy and
the row is beside it, with nothing to keep in step. `table_of(GpuSample)` reads the rows back, one
per member of each call's output buffer in the order NVML's C structure lays it out (`nvmlMemory_t`:
total, free, used; a member nobody reads is a row without attribute), the calls in the order of
their first attribute. Everything else follows from that table (`poller.samples.NVML_FIELDS`): the
ctypes structure the calls write into, the struct layout one unpack reads it with, each call's
positions, the function that turns the readings into a `GpuSample` (`poller.nvml_calls`) and the
exported series (`poller.exported_metrics`). A new field is its attribute line and its value in
the fake NVML of the tests.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Any

import pynvml

from foxhunt_trainer.contract import catalog


@dataclass(frozen=True)
class Scale:
    """From NVML's unit to the catalog's: `reading * multiply / divide` (one of the two, spelled
    as Python spells it, so a figure is exactly what dividing by 1000 gives)."""

    multiply: int = 1
    divide: float = 1.0

    def expression(self, name: str) -> str:
        """Python source of the scaled value of reading `name` (None stays None)."""
        if self.multiply != 1:
            return f"(None if {name} is None else {name} * {self.multiply!r})"
        if self.divide != 1.0:
            return f"(None if {name} is None else {name} / {self.divide!r})"
        return name


AS_IS = Scale()
MILLI = Scale(divide=1000.0)  # mW -> W, mJ -> J
MEGA = Scale(multiply=1_000_000)  # MHz -> Hz


@dataclass(frozen=True)
class NvmlField:
    """One reading: `call` names the NVML call (logs and errors say it), `functions` the C function
    (older names after it), `options` the arguments between the device handle and the output
    buffer; `attribute` is None for a reading the call writes but nobody exports."""

    call: str
    functions: tuple[str, ...]
    options: tuple[int, ...]
    ctype: Any  # ctypes.c_uint or ctypes.c_ulonglong
    attribute: str | None
    metric: catalog.Metric | None
    scale: Scale = AS_IS
    label: tuple[str, str] | None = None  # the metric's label beyond the GPU's, and its value


U32, U64 = ctypes.c_uint, ctypes.c_ulonglong
UTILIZATION = ("nvmlDeviceGetUtilizationRates",)
MEMORY = ("nvmlDeviceGetMemoryInfo",)
ECC = ("nvmlDeviceGetTotalEccErrors",)
# Drivers before 535 only have the older name of the same call.
CLOCK_EVENTS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
CORRECTED = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
UNCORRECTED = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)

_ROW = "nvml row"


@dataclass(frozen=True)
class _Declared:
    """A row as `nvml()` declares it on a GpuSample attribute: everything but the attribute, and the
    reading's place in its call's output buffer."""

    field: NvmlField
    member: int
    members: int


def nvml(
    call: str,
    functions: tuple[str, ...],
    options: tuple[int, ...],
    ctype: Any,
    metric: catalog.Metric,
    scale: Scale = AS_IS,
    label: tuple[str, str] | None = None,
    *,
    member: tuple[int, int] = (0, 1),
) -> Any:
    """The row of the GpuSample attribute it is assigned to (whose default it also gives: None, the
    reading NVML could not give). `member` is (index, count) of the reading in the call's output
    buffer when the call writes several (`nvmlMemory_t`: total 0, free 1, used 2 of 3)."""
    index, count = member
    row = NvmlField(call, functions, options, ctype, None, metric, scale, label)
    return dataclasses.field(default=None, metadata={_ROW: _Declared(row, index, count)})


def table_of(sample_class: type) -> tuple[NvmlField, ...]:
    """The rows the attributes of `sample_class` declare (`nvml()`), one per member of each call's
    output buffer, the calls in the order of their first attribute; checked (`check_fields`)."""
    by_call: dict[str, dict[int, NvmlField]] = {}
    counts: dict[str, int] = {}
    problems: list[str] = []
    for attribute in dataclasses.fields(sample_class):
        declared = attribute.metadata.get(_ROW)
        if not isinstance(declared, _Declared):
            continue
        row = dataclasses.replace(declared.field, attribute=attribute.name)
        members = by_call.setdefault(row.call, {})
        count = counts.setdefault(row.call, declared.members)
        if declared.members != count or not 0 <= declared.member < count:
            problems.append(f"{attribute.name}: member {declared.member} of {declared.members} does not fit call "
                            f"{row.call} of {count} members")  # fmt: skip
        elif declared.member in members:
            problems.append(f"{attribute.name}: member {declared.member} of call {row.call} is read twice")
        members[declared.member] = row
    if problems:
        raise ImportError(f"{sample_class.__name__}: " + "; ".join(problems))
    rows: list[NvmlField] = []
    for call, members in by_call.items():
        first = next(iter(members.values()))
        unread = dataclasses.replace(first, attribute=None, metric=None, scale=AS_IS, label=None)
        rows += [members.get(i, unread) for i in range(counts[call])]
    table = tuple(rows)
    check_fields(table)
    return table


def check_fields(fields: tuple[NvmlField, ...]) -> None:
    problems: list[str] = []
    seen_calls: list[str] = []
    for i, field in enumerate(fields):
        if field.ctype not in (U32, U64):
            problems.append(f"row {i} ({field.call}): C type must be ctypes.c_uint or ctypes.c_ulonglong")
        if (field.attribute is None) != (field.metric is None):
            problems.append(f"row {i} ({field.call}): an attribute needs its catalog metric and a metric its attribute")
        if field.call in seen_calls and seen_calls[-1] != field.call:
            problems.append(f"row {i}: the rows of call {field.call} must sit together (one output buffer)")
        if seen_calls and seen_calls[-1] == field.call:
            first = next(f for f in fields if f.call == field.call)
            if (first.functions, first.options, first.ctype) != (field.functions, field.options, field.ctype):
                problems.append(f"row {i}: call {field.call} has other functions, options or C type than its first row")
        seen_calls.append(field.call)
        if field.metric is not None and field.metric.producer is not catalog.Producer.GPU_POLLER:
            problems.append(f"row {i} ({field.call}): {field.metric.name} is not a gpu-poller metric of the catalog")
    attributes = [f.attribute for f in fields if f.attribute is not None]
    if len(attributes) != len(set(attributes)):
        problems.append("a GpuSample attribute is filled by two rows")
    if problems:
        raise ImportError("NVML_FIELDS: " + "; ".join(problems))
