"""Model FLOPs per training step: counted once per job with PyTorch's own FLOP counter, or declared.

`measure_step_flops(step)` runs one real training step (forward, loss, backward, optimizer step:
whatever `step` does) under `torch.utils.flop_counter.FlopCounterMode` and returns the step's
result with the FLOPs it counted. The counter counts the matrix multiplies and convolutions (and
attention) of the forward and the backward pass, 2 FLOPs per multiply-add, as the MFU definition of
PaLM does; elementwise work and the optimizer are not model FLOPs. The step is not wasted: its
result is the caller's, as if it had run without the counter.

`precision_of(dtype)` names the precision a floating-point dtype multiplies in, as the peak table
(`foxhunt_trainer/contract/peak_flops.json`) spells it. PyTorch is imported only when these are called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from foxhunt_trainer.contract import catalog

PRECISIONS = catalog.MODEL_FLOPS_PRECISIONS

T = TypeVar("T")


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one training step and what was counted (forward and backward together)."""

    flops: int
    by_operator: tuple[tuple[str, int], ...]


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision


def check_flops(flops: float) -> int:
    if isinstance(flops, bool) or not isinstance(flops, int | float) or not flops > 0 or flops != flops:
        raise ValueError(f"model FLOPs per step must be a positive number, got {flops!r}")
    return int(flops)


class FlopCount:
    """PyTorch's FlopCounterMode entered now and left by `stop()`: a step measured from hooks
    that start and end it in different calls (the autolog torch hooks, the Lightning callback)."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()  # type: ignore[no-untyped-call]

    def stop(self) -> int:
        """Leave the counter: the FLOPs it counted."""
        self._mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        return int(self._mode.get_total_flops())


def measure_step_flops(step: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, StepFlops]:
    """Run `step(*args, **kwargs)` once under FlopCounterMode: (its result, the FLOPs it counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        result = step(*args, **kwargs)
    totals = counter.get_flop_counts().get("Global", {})
    by_operator = tuple(sorted((str(op), int(n)) for op, n in totals.items()))
    return result, StepFlops(int(counter.get_total_flops()), by_operator)


def precision_of(dtype: Any, *, tf32: bool | None = None) -> str:
    """The precision a model whose parameters (or autocast) are `dtype` multiplies in.

    float32 is "tf32" where PyTorch lets CUDA matrix multiplies use TF32
    (`torch.backends.cuda.matmul.allow_tf32`, or `tf32` given), else "fp32"."""
    import torch

    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        return "fp8"
    if dtype == torch.float32:
        allowed = torch.backends.cuda.matmul.allow_tf32 if tf32 is None else tf32
        return "tf32" if allowed else "fp32"
    raise ValueError(f"no model-FLOPs precision for dtype {dtype}: expected float32, bfloat16, float16 or float8")


def model_precision(model: Any) -> str:
    """The precision of a module's floating-point parameters, with CUDA autocast's dtype where it is on."""
    import torch

    if torch.is_autocast_enabled("cuda"):
        return precision_of(torch.get_autocast_dtype("cuda"))
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return precision_of(parameter.dtype)
    raise ValueError("the model has no floating-point parameters: declare its precision")
