"""The NVML calls of a collection pass, bound once per GPU to their output buffers, all derived
from the table of fields (`poller.samples.NVML_FIELDS`, the rows GpuSample's attributes declare).

Calling the C functions of the library nvidia-ml-py loaded, with buffers made once, rather than
through nvidia-ml-py's wrappers (a lookup, fresh ctypes objects and a result object on every
call) halves the cost of a pass. Every call of a GPU writes into one `Readings` structure, so
that after the calls one `struct` unpack reads them all and `sample_from` turns them into the
GPU's sample in one step (a function generated from the table, so the fast
path has no loop). Init, enumeration, strings and events still go through nvidia-ml-py.
A function the loaded library lacks (an older driver) raises FunctionMissingError when binding,
and its field is left out for that session.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

from poller.nvml_fields import NvmlField
from poller.samples import GPM_FIELDS, NVML_FIELDS, GpuIdentity, GpuSample


def _members(fields: Sequence[NvmlField]) -> tuple[str, ...]:
    """The member of Readings each row writes: its call's name and its place within the call."""
    return tuple(
        f"{field.call}_{sum(1 for other in fields[:i] if other.call == field.call)}" for i, field in enumerate(fields)
    )


_MEMBERS = _members(NVML_FIELDS)


class Readings(ctypes.Structure):
    """One GPU's output buffers of every call of a pass, side by side (one member per row of
    NVML_FIELDS; a call's rows are adjacent, laid out as NVML's C structure of that call)."""

    _fields_ = tuple((member, field.ctype) for member, field in zip(_MEMBERS, NVML_FIELDS, strict=True))


# Readings as one tuple of numbers (native alignment, as the C compiler lays the structure out),
# one per row of NVML_FIELDS.
READINGS_LAYOUT = struct.Struct("@" + "".join("I" if field.ctype is ctypes.c_uint else "Q" for field in NVML_FIELDS))
if READINGS_LAYOUT.size != ctypes.sizeof(Readings):
    raise ImportError("Readings and READINGS_LAYOUT disagree")
READING_COUNT = len(NVML_FIELDS)


def _sample_from_source() -> str:
    """`sample_from` as Python source: one unpack of the readings, each scaled to the catalog's
    unit, passed by position in GpuSample's field order (the fast path: no loop, no lookups)."""
    position = {field.attribute: i for i, field in enumerate(NVML_FIELDS) if field.attribute is not None}
    names = [f.name for f in dataclasses.fields(GpuSample)]
    nvml_attributes = names[1 : names.index(GPM_FIELDS[0])] if GPM_FIELDS else names[1:]
    if names[0] != "gpu" or set(nvml_attributes) != set(position):
        missing = sorted(set(position) - set(nvml_attributes))
        unread = sorted(set(nvml_attributes) - set(position))
        raise ImportError(
            "GpuSample and NVML_FIELDS disagree: "
            + (f"{', '.join(missing)} must sit before GpuSample's GPM fields; " if missing else "")
            + (f"no NVML row declared for {', '.join(unread)} (a GpuSample attribute before the GPM fields is "
               "`name: int | None = nvml(...)`, see poller.nvml_fields)" if unread else "")
        )  # fmt: skip
    readings = ", ".join(f"r{i}" for i in range(READING_COUNT))
    arguments = ", ".join(NVML_FIELDS[position[a]].scale.expression(f"r{position[a]}") for a in nvml_attributes)
    return (
        "def sample_from(gpu, readings, gpm):\n"
        f"    ({readings},) = readings\n"
        f"    return GpuSample(gpu, {arguments}, *gpm)\n"
    )


_namespace: dict[str, Any] = {"GpuSample": GpuSample}
exec(compile(_sample_from_source(), f"<{__name__}.sample_from>", "exec"), _namespace)
# The GPU's sample from its readings in READINGS_LAYOUT order (None where its call did not answer),
# in the catalog's units, and its GPM figures (GPM_FIELDS order).
sample_from: Callable[[GpuIdentity, Sequence[int | None], Sequence[Any]], GpuSample] = _namespace["sample_from"]
sample_from.__doc__ = "The GPU's sample from its readings (READINGS_LAYOUT order) and its GPM figures."


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
class _Call:
    """How to bind one NVML call: its function name(s), the arguments between the device handle and
    the output buffer, the Readings member its buffer starts at and the readings it fills."""

    name: str
    functions: tuple[str, ...]
    options: tuple[int, ...]
    member: str
    positions: tuple[int, ...]

    def bind(self, lib: Any, handle: Any, readings: Readings) -> FieldCall:
        function = nvml_function(lib, *self.functions)
        buffer = ctypes.byref(readings, getattr(Readings, self.member).offset)
        return FieldCall(self.name, function, (handle, *self.options, buffer), self.positions)


def calls_of(fields: Sequence[NvmlField]) -> tuple[_Call, ...]:
    members = _members(fields)
    calls: list[_Call] = []
    for i, field in enumerate(fields):
        if calls and calls[-1].name == field.call:
            last = calls[-1]
            calls[-1] = dataclasses.replace(last, positions=(*last.positions, i))
        else:
            calls.append(_Call(field.call, field.functions, field.options, members[i], (i,)))
    return tuple(calls)


# Every NVML call made per GPU per pass, from the rows of NVML_FIELDS.
FIELDS: tuple[_Call, ...] = calls_of(NVML_FIELDS)
