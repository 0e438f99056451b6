"""The NVML calls of a collection pass, bound once per GPU to their output buffers.

Calling the C functions of the library nvidia-ml-py loaded, with buffers made once, rather than
through nvidia-ml-py's wrappers (a lookup, fresh ctypes objects and a result object on every
call) halves the cost of a pass. Every call of a GPU writes into one `Readings` structure, so
that after the calls one `struct` unpack reads them all and `sample_from` turns them into the
GPU's sample in one step. Init, enumeration, strings and events still go through nvidia-ml-py.
A function the loaded library lacks (an older driver) raises FunctionMissingError when binding,
and its field is left out for that session.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from poller.model import GPM_FIELDS, GpuIdentity, GpuSample


class _Utilization(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


class _Memory(ctypes.Structure):  # nvmlMemory_t (v1)
    _fields_ = (("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong))


class Readings(ctypes.Structure):
    """One GPU's output buffers of every call of a pass, side by side."""

    _fields_ = (
        ("utilization", _Utilization),
        ("memory", _Memory),
        ("temperature", ctypes.c_uint),
        ("power", ctypes.c_uint),
        ("power_limit", ctypes.c_uint),
        ("sm_clock", ctypes.c_uint),
        ("memory_clock", ctypes.c_uint),
        ("clock_event_reasons", ctypes.c_ulonglong),
        ("ecc_corrected", ctypes.c_ulonglong),
        ("ecc_uncorrected", ctypes.c_ulonglong),
        ("energy", ctypes.c_ulonglong),
    )


# Readings as one tuple of numbers (native alignment, as the C compiler lays the structure out):
# utilization gpu, memory; memory total, free, used; temperature; power; power limit; SM clock;
# memory clock; clock event reasons; ECC corrected, uncorrected; energy.
READINGS_LAYOUT = struct.Struct("@IIQQQIIIIIQQQQ")
if READINGS_LAYOUT.size != ctypes.sizeof(Readings):
    raise ImportError("Readings and READINGS_LAYOUT disagree")
READING_COUNT = len(READINGS_LAYOUT.unpack_from(bytes(READINGS_LAYOUT.size)))


def sample_from(gpu: GpuIdentity, readings: Sequence[int | None], gpm: Sequence[Any]) -> GpuSample:
    """The GPU's sample from its readings in READINGS_LAYOUT order (None where its call did not
    answer), in the catalog's units, and its GPM figures (GPM_FIELDS order)."""
    (
        utilization,
        memory_utilization,
        memory_total,
        _,
        memory_used,
        temperature,
        power_mw,
        power_limit_mw,
        sm_mhz,
        memory_mhz,
        clock_event_reasons,
        ecc_corrected,
        ecc_uncorrected,
        energy_mj,
    ) = readings
    return GpuSample(  # by position, in _SAMPLE_FIELDS order (checked below)
        gpu,
        utilization,
        memory_utilization,
        memory_used,
        memory_total,
        temperature,
        None if power_mw is None else power_mw / 1000.0,
        None if power_limit_mw is None else power_limit_mw / 1000.0,
        None if sm_mhz is None else sm_mhz * 1_000_000,
        None if memory_mhz is None else memory_mhz * 1_000_000,
        clock_event_reasons,
        ecc_corrected,
        ecc_uncorrected,
        None if energy_mj is None else energy_mj / 1000.0,
        *gpm,
    )


_SAMPLE_FIELDS = (
    "gpu",
    "utilization_percent",
    "memory_utilization_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "sm_clock_hertz",
    "memory_clock_hertz",
    "clock_event_reasons",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "energy_joules_total",
    *GPM_FIELDS,
)
if tuple(field.name for field in dataclasses.fields(GpuSample)) != _SAMPLE_FIELDS:
    raise ImportError("GpuSample's fields are not in the order sample_from passes them")


@dataclasses.dataclass(slots=True)
class FieldCall:
    """One NVML call of a pass, bound to its device handle and to its part of the GPU's Readings."""

    name: str
    function: Callable[..., int]
    arguments: tuple[Any, ...]
    positions: tuple[int, ...]  # the readings (READINGS_LAYOUT positions) it fills


class FunctionMissingError(Exception):
    """The loaded libnvidia-ml has none of the names tried (an older driver)."""


def nvml_function(lib: Any, *names: str) -> Callable[..., int]:
    """A fresh ctypes function object for the first of `names` the library exports.

    Fresh (CDLL item access, not attribute access) so that setting its restype leaves the
    function objects nvidia-ml-py caches untouched.
    """
    for name in names:
        try:
            function = lib[name]
        except AttributeError:
            continue
        function.restype = ctypes.c_int  # nvmlReturn_t
        return function  # type: ignore[no-any-return]
    raise FunctionMissingError(" / ".join(names))


@dataclasses.dataclass(frozen=True)
class _Field:
    """How to bind one field's call: function name(s), the arguments between the device handle and
    the output buffer, the Readings member it writes and the readings that member holds."""

    name: str
    functions: tuple[str, ...]
    options: tuple[int, ...]
    member: str
    positions: tuple[int, ...]

    def bind(self, lib: Any, handle: Any, readings: Readings) -> FieldCall:
        function = nvml_function(lib, *self.functions)
        buffer = ctypes.byref(readings, getattr(Readings, self.member).offset)
        return FieldCall(self.name, function, (handle, *self.options, buffer), self.positions)


# Every NVML field read per GPU per pass.
FIELDS: tuple[_Field, ...] = (
    _Field("utilization", ("nvmlDeviceGetUtilizationRates",), (), "utilization", (0, 1)),
    _Field("memory", ("nvmlDeviceGetMemoryInfo",), (), "memory", (2, 3, 4)),
    _Field("temperature", ("nvmlDeviceGetTemperature",), (pynvml.NVML_TEMPERATURE_GPU,), "temperature", (5,)),
    _Field("power", ("nvmlDeviceGetPowerUsage",), (), "power", (6,)),
    _Field("power_limit", ("nvmlDeviceGetEnforcedPowerLimit",), (), "power_limit", (7,)),
    _Field("sm_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_SM,), "sm_clock", (8,)),
    _Field("memory_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_MEM,), "memory_clock", (9,)),
    # Drivers before 535 only have the older name of the same call.
    _Field(
        "clock_event_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        (),
        "clock_event_reasons",
        (10,),
    ),
    _Field(
        "ecc_corrected",
        ("nvmlDeviceGetTotalEccErrors",),
        (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
        "ecc_corrected",
        (11,),
    ),
    _Field(
        "ecc_uncorrected",
        ("nvmlDeviceGetTotalEccErrors",),
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "ecc_uncorrected",
        (12,),
    ),
    # Volta and newer; NOT_SUPPORTED elsewhere, and drivers before it lack the function.
    _Field("energy", ("nvmlDeviceGetTotalEnergyConsumption",), (), "energy", (13,)),
)
if sorted(p for field in FIELDS for p in field.positions) != list(range(READING_COUNT)):
    raise ImportError("FIELDS must fill every reading exactly once")
