"""Is a value, or a whole training state, finite? Without importing a framework.

A training state is what a checkpoint writes: a `state_dict()` (PyTorch module or optimizer),
nested dicts, lists and tuples of tensors, NumPy arrays and Python numbers. PyTorch and NumPy are
recognised by their types' modules and used only when the state holds their objects (they are then
imported already). PyTorch tensors are checked with one device synchronisation per device, not one
per tensor: a large model on a GPU costs one `isfinite` kernel per tensor and one copy back.
"""

from __future__ import annotations

import cmath
import math
import sys
from collections.abc import Iterator, Mapping
from typing import Any

# How many non-finite entries a report names (a NaN model has them everywhere).
REPORTED = 5


def is_finite_number(value: float) -> bool:
    return math.isfinite(value)


def _module_of(value: object) -> str:
    return type(value).__module__.split(".", 1)[0]


def _leaves(state: object, path: str) -> Iterator[tuple[str, object]]:
    if isinstance(state, Mapping):
        for key, item in state.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(state, list | tuple):
        for index, item in enumerate(state):
            yield from _leaves(item, f"{path}[{index}]")
    elif not hasattr(state, "is_floating_point") and callable(state_dict := getattr(state, "state_dict", None)):
        # torch.nn.Module, torch.optim.Optimizer, a Lightning module: their state_dict holds the tensors.
        yield from _leaves(state_dict(), path)
    else:
        yield path or "value", state


def _torch_nonfinite(tensors: list[tuple[str, Any]]) -> list[str]:
    torch: Any = sys.modules["torch"]
    by_device: dict[object, list[tuple[str, Any]]] = {}
    for path, tensor in tensors:
        by_device.setdefault(tensor.device, []).append((path, tensor))
    bad: list[str] = []
    for group in by_device.values():
        flags = torch.stack([torch.isfinite(t.detach()).all() for _, t in group])
        if bool(flags.all().item()):
            continue
        bad += [path for (path, _), ok in zip(group, flags.tolist(), strict=True) if not ok]
    return bad


def _numpy_finite(array: Any) -> bool:
    numpy: Any = sys.modules["numpy"]
    return array.dtype.kind not in "fc" or bool(numpy.isfinite(array).all())


def nonfinite_entries(state: object) -> list[str]:
    """The paths (`layer.weight`, `state.0.exp_avg`) of the entries of `state` holding NaN or
    infinity (NumPy arrays and Python numbers first, then tensors); empty when everything is
    finite. Integers, booleans, strings and other non-numeric leaves are finite by definition."""
    tensors: list[tuple[str, Any]] = []
    bad: list[str] = []
    leaf: Any
    for path, leaf in _leaves(state, ""):
        module = _module_of(leaf)
        if module == "torch" and hasattr(leaf, "is_floating_point"):
            if leaf.is_floating_point() or leaf.is_complex():
                tensors.append((path, leaf))
        elif module == "numpy" and hasattr(leaf, "dtype"):
            if not _numpy_finite(leaf):
                bad.append(path)
        elif isinstance(leaf, float | complex) and not cmath.isfinite(leaf):
            bad.append(path)
    if tensors:
        bad += _torch_nonfinite(tensors)
    return bad


def describe(entries: list[str]) -> str:
    """`a.weight, b.bias and 3 more`: a short list for log lines."""
    shown = ", ".join(entries[:REPORTED])
    return shown if len(entries) <= REPORTED else f"{shown} and {len(entries) - REPORTED} more"
