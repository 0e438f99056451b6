"""The NVML calls of a collection pass, bound once per GPU to their output buffers.

Calling the C functions of the library nvidia-ml-py loaded, with buffers made once, rather than
through nvidia-ml-py's wrappers (a lookup, fresh ctypes objects and a result object on every
call) halves the cost of a pass. Init, enumeration, strings and events still go through
nvidia-ml-py. A function the loaded library lacks (an older driver) raises FunctionMissingError
when binding, and its field is left out for that session.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from poller.model import GpuSample


class _Utilization(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


class _Memory(ctypes.Structure):  # nvmlMemory_t (v1)
    _fields_ = (("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong))


@dataclass(slots=True)
class FieldCall:
    """One NVML call of a pass, bound to its device handle and to an output buffer made once."""

    name: str
    function: Callable[..., int]
    arguments: tuple[Any, ...]
    store: Callable[[GpuSample], None]


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


def _utilization(lib: Any, handle: Any) -> FieldCall:
    rates = _Utilization()

    def store(sample: GpuSample) -> None:
        sample.utilization_percent = rates.gpu
        sample.memory_utilization_percent = rates.memory

    return FieldCall(
        "utilization", nvml_function(lib, "nvmlDeviceGetUtilizationRates"), (handle, ctypes.byref(rates)), store
    )


def _memory(lib: Any, handle: Any) -> FieldCall:
    memory = _Memory()

    def store(sample: GpuSample) -> None:
        sample.memory_used_bytes = memory.used
        sample.memory_total_bytes = memory.total

    return FieldCall("memory", nvml_function(lib, "nvmlDeviceGetMemoryInfo"), (handle, ctypes.byref(memory)), store)


def _temperature(lib: Any, handle: Any) -> FieldCall:
    celsius = ctypes.c_uint()

    def store(sample: GpuSample) -> None:
        sample.temperature_celsius = celsius.value

    return FieldCall(
        "temperature",
        nvml_function(lib, "nvmlDeviceGetTemperature"),
        (handle, pynvml.NVML_TEMPERATURE_GPU, ctypes.byref(celsius)),
        store,
    )


def _power(lib: Any, handle: Any) -> FieldCall:
    milliwatts = ctypes.c_uint()

    def store(sample: GpuSample) -> None:
        sample.power_watts = milliwatts.value / 1000.0

    return FieldCall("power", nvml_function(lib, "nvmlDeviceGetPowerUsage"), (handle, ctypes.byref(milliwatts)), store)


def _power_limit(lib: Any, handle: Any) -> FieldCall:
    milliwatts = ctypes.c_uint()

    def store(sample: GpuSample) -> None:
        sample.power_limit_watts = milliwatts.value / 1000.0

    return FieldCall(
        "power_limit", nvml_function(lib, "nvmlDeviceGetEnforcedPowerLimit"), (handle, ctypes.byref(milliwatts)), store
    )


def _sm_clock(lib: Any, handle: Any) -> FieldCall:
    megahertz = ctypes.c_uint()

    def store(sample: GpuSample) -> None:
        sample.sm_clock_hertz = megahertz.value * 1_000_000

    return FieldCall(
        "sm_clock",
        nvml_function(lib, "nvmlDeviceGetClockInfo"),
        (handle, pynvml.NVML_CLOCK_SM, ctypes.byref(megahertz)),
        store,
    )


def _memory_clock(lib: Any, handle: Any) -> FieldCall:
    megahertz = ctypes.c_uint()

    def store(sample: GpuSample) -> None:
        sample.memory_clock_hertz = megahertz.value * 1_000_000

    return FieldCall(
        "memory_clock",
        nvml_function(lib, "nvmlDeviceGetClockInfo"),
        (handle, pynvml.NVML_CLOCK_MEM, ctypes.byref(megahertz)),
        store,
    )


def _clock_event_reasons(lib: Any, handle: Any) -> FieldCall:
    reasons = ctypes.c_ulonglong()

    def store(sample: GpuSample) -> None:
        sample.clock_event_reasons = reasons.value

    # Drivers before 535 only have the older name of the same call.
    function = nvml_function(lib, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    return FieldCall("clock_event_reasons", function, (handle, ctypes.byref(reasons)), store)


def _ecc_corrected(lib: Any, handle: Any) -> FieldCall:
    count = ctypes.c_ulonglong()

    def store(sample: GpuSample) -> None:
        sample.ecc_corrected_total = count.value

    return FieldCall(
        "ecc_corrected",
        nvml_function(lib, "nvmlDeviceGetTotalEccErrors"),
        (handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC, ctypes.byref(count)),
        store,
    )


def _ecc_uncorrected(lib: Any, handle: Any) -> FieldCall:
    count = ctypes.c_ulonglong()

    def store(sample: GpuSample) -> None:
        sample.ecc_uncorrected_total = count.value

    return FieldCall(
        "ecc_uncorrected",
        nvml_function(lib, "nvmlDeviceGetTotalEccErrors"),
        (handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC, ctypes.byref(count)),
        store,
    )


def _energy(lib: Any, handle: Any) -> FieldCall:
    millijoules = ctypes.c_ulonglong()

    def store(sample: GpuSample) -> None:
        sample.energy_joules_total = millijoules.value / 1000.0

    # Volta and newer; NOT_SUPPORTED elsewhere, and drivers before it lack the function.
    return FieldCall(
        "energy",
        nvml_function(lib, "nvmlDeviceGetTotalEnergyConsumption"),
        (handle, ctypes.byref(millijoules)),
        store,
    )


# Every NVML field read per GPU per pass, in page order.
FIELD_CALLS: tuple[Callable[[Any, Any], FieldCall], ...] = (
    _utilization,
    _memory,
    _temperature,
    _power,
    _power_limit,
    _sm_clock,
    _memory_clock,
    _clock_event_reasons,
    _ecc_corrected,
    _ecc_uncorrected,
    _energy,
)
