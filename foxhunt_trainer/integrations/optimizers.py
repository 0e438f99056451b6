"""What the integrations read from PyTorch optimizers: learning rates per parameter group, the
global gradient norm (one small tensor on the device: reading it is the one synchronisation), and
names a hyperparameter series can carry."""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from foxhunt_trainer.hyperparameters import UNKNOWN

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.+-]")


def learning_rates(optimizers: Sequence[torch.optim.Optimizer]) -> dict[str, float]:
    """Learning rate per parameter group, by the group's name (its "name" key) else its index;
    with several optimizers, each group's label is prefixed by its optimizer's index (`1.0`)."""
    rates: dict[str, float] = {}
    for number, optimizer in enumerate(optimizers):
        for index, group in enumerate(optimizer.param_groups):
            if "lr" in group:
                name = str(group.get("name", index))
                rates[name if len(optimizers) == 1 else f"{number}.{name}"] = float(group["lr"])
    return rates


def gradient_norm(optimizers: Sequence[torch.optim.Optimizer]) -> torch.Tensor | None:
    """The global L2 norm of the gradients the optimizers hold now, in float32 on their device
    (None without gradients): each gradient's norm in one fused call, then the norm of those, what
    `torch.nn.utils.get_total_norm` computes at a third of its cost (it groups the gradients by
    device and dtype first, which it is left to for gradients on several devices)."""
    grads = [p.grad for o in optimizers for group in o.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return None
    with torch.no_grad():
        try:
            norm: torch.Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            return norm.to(torch.float32)
        except RuntimeError:  # gradients on several devices
            return torch.nn.utils.get_total_norm(grads).to(torch.float32)


def short_name(name: str) -> str:
    """`name` as a hyperparameter label value (letters, digits, `_.+-`, at most 64), else "unknown"."""
    cleaned = _NOT_IN_A_NAME.sub("_", name)[:64]
    return cleaned or UNKNOWN
