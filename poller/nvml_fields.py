"""Every NVML reading a pass takes from each GPU, one row each (as dcgm-exporter keeps one line
per field in its counters CSV): the call and its options, the C type NVML writes, the scale to the
catalog's unit, the `GpuSample` attribute and the catalog metric it is exported as.

Everything else follows from this table: the ctypes structure the calls write into, the struct
layout one unpack reads it with, each call's positions in it, the function that turns the readings
into a `GpuSample` (`poller.nvml_calls`) and the exported series (`poller.exported_metrics`).
Rows of one call sit together, in the order NVML's C structure lays them out (`nvmlMemory_t`:
total, free, used). A new field is one row here, its `GpuSample` attribute (checked at import)
and its value in the fake NVML of the tests.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import pynvml

from observability import catalog


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


_U32, _U64 = ctypes.c_uint, ctypes.c_ulonglong
_UTILIZATION = ("nvmlDeviceGetUtilizationRates",)
_MEMORY = ("nvmlDeviceGetMemoryInfo",)
_ECC = ("nvmlDeviceGetTotalEccErrors",)
# Drivers before 535 only have the older name of the same call.
_CLOCK_EVENTS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_CORRECTED = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
_UNCORRECTED = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)

# fmt: off
NVML_FIELDS: tuple[NvmlField, ...] = (
    # call, NVML function(s), options, C type, GpuSample attribute, catalog metric[, scale][, label]
    NvmlField("utilization", _UTILIZATION, (), _U32, "utilization_percent", catalog.GPU_UTILIZATION_PERCENT),
    NvmlField("utilization", _UTILIZATION, (), _U32, "memory_utilization_percent",
              catalog.GPU_MEMORY_UTILIZATION_PERCENT),
    NvmlField("memory", _MEMORY, (), _U64, "memory_total_bytes", catalog.GPU_MEMORY_TOTAL_BYTES),
    NvmlField("memory", _MEMORY, (), _U64, None, None),  # free: total - used
    NvmlField("memory", _MEMORY, (), _U64, "memory_used_bytes", catalog.GPU_MEMORY_USED_BYTES),
    NvmlField("temperature", ("nvmlDeviceGetTemperature",), (pynvml.NVML_TEMPERATURE_GPU,), _U32,
              "temperature_celsius", catalog.GPU_TEMPERATURE_CELSIUS),
    NvmlField("power", ("nvmlDeviceGetPowerUsage",), (), _U32, "power_watts", catalog.GPU_POWER_WATTS, MILLI),
    NvmlField("power_limit", ("nvmlDeviceGetEnforcedPowerLimit",), (), _U32, "power_limit_watts",
              catalog.GPU_POWER_LIMIT_WATTS, MILLI),
    NvmlField("sm_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_SM,), _U32, "sm_clock_hertz",
              catalog.GPU_SM_CLOCK_HERTZ, MEGA),
    NvmlField("memory_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_MEM,), _U32, "memory_clock_hertz",
              catalog.GPU_MEMORY_CLOCK_HERTZ, MEGA),
    # a bit mask: one ml_gpu_clock_throttle_active series per reason (exported_metrics.THROTTLE_REASONS)
    NvmlField("clock_event_reasons", _CLOCK_EVENTS, (), _U64, "clock_event_reasons",
              catalog.GPU_CLOCK_THROTTLE_ACTIVE),
    NvmlField("ecc_corrected", _ECC, _CORRECTED, _U64, "ecc_corrected_total", catalog.GPU_ECC_ERRORS_TOTAL,
              label=("ecc_type", "corrected")),
    NvmlField("ecc_uncorrected", _ECC, _UNCORRECTED, _U64, "ecc_uncorrected_total", catalog.GPU_ECC_ERRORS_TOTAL,
              label=("ecc_type", "uncorrected")),
    # Volta and newer; NOT_SUPPORTED elsewhere, and drivers before it lack the function.
    NvmlField("energy", ("nvmlDeviceGetTotalEnergyConsumption",), (), _U64, "energy_joules_total",
              catalog.GPU_ENERGY_JOULES_TOTAL, MILLI),
)
# fmt: on


def check_fields(fields: tuple[NvmlField, ...]) -> None:
    problems: list[str] = []
    seen_calls: list[str] = []
    for i, field in enumerate(fields):
        if field.ctype not in (_U32, _U64):
            problems.append(f"row {i} ({field.call}): C type must be ctypes.c_uint or ctypes.c_ulonglong")
        if (field.attribute is None) != (field.metric is None):
            problems.append(f"row {i} ({field.call}): an attribute needs its catalog metric and a metric its attribute")
        if field.call in seen_calls and seen_calls[-1] != field.call:
            problems.append(f"row {i}: the rows of call {field.call} must sit together (one output buffer)")
        if seen_calls and seen_calls[-1] == field.call:
            first = next(f for f in fields if f.call == field.call)
            if (first.functions, first.options) != (field.functions, field.options):
                problems.append(f"row {i}: call {field.call} has other functions or options than its first row")
        seen_calls.append(field.call)
        if field.metric is not None and field.metric.producer is not catalog.Producer.GPU_POLLER:
            problems.append(f"row {i} ({field.call}): {field.metric.name} is not a gpu-poller metric of the catalog")
    attributes = [f.attribute for f in fields if f.attribute is not None]
    if len(attributes) != len(set(attributes)):
        problems.append("a GpuSample attribute is filled by two rows")
    if problems:
        raise ImportError("NVML_FIELDS: " + "; ".join(problems))


check_fields(NVML_FIELDS)
