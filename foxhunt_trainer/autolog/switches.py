"""The auto-instrumentation's switches, read from the environment (standard library only).

- `FOXHUNT_AUTOLOG`: "on" (the default, also when empty) or "off" for the whole program;
- `FOXHUNT_AUTOLOG_DISABLE`: integrations turned off one by one, comma-separated (`INTEGRATIONS`).

A value that is neither is reported on stderr, naming the variable, the value and the accepted
ones, and the program then runs uninstrumented: a typo must not stop a training job, and the
instrumentation cannot guess which integration was meant to be off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from foxhunt_trainer.trainer_env import AUTOLOG_DISABLE_ENV, AUTOLOG_ENV, AUTOLOG_OFF, AUTOLOG_ON

TORCH = "torch"  # plain PyTorch: optimizer steps, DataLoader timing, backward() losses, torch.save
DISTRIBUTED = "distributed"  # torch.distributed: DistributedDataParallel and direct collectives
LIGHTNING = "lightning"
SB3 = "sb3"
OPTUNA = "optuna"
TRACING = "tracing"  # OpenTelemetry from the OTEL_* environment, trace IDs on log records
INTEGRATIONS: tuple[str, ...] = (TORCH, DISTRIBUTED, LIGHTNING, SB3, OPTUNA, TRACING)
CHOICES: tuple[str, ...] = (AUTOLOG_ON, AUTOLOG_OFF)

PREFIX = "foxhunt-autolog"


@dataclass(frozen=True)
class Switches:
    """What the environment asks for. `error`: why nothing is instrumented (a bad value)."""

    enabled: bool
    disabled: frozenset[str] = frozenset()
    error: str | None = None

    def on(self, integration: str) -> bool:
        return self.enabled and integration not in self.disabled


def read(environ: Mapping[str, str] | None = None) -> Switches:
    env = os.environ if environ is None else environ
    switch = env.get(AUTOLOG_ENV, "").strip().lower()
    if switch not in ("", *CHOICES):
        return Switches(
            False,
            error=(
                f"{AUTOLOG_ENV}={env.get(AUTOLOG_ENV, '')!r} is not one of {', '.join(CHOICES)}: "
                "the program runs uninstrumented"
            ),
        )
    if switch == AUTOLOG_OFF:
        return Switches(False)
    names = [name.strip().lower() for name in env.get(AUTOLOG_DISABLE_ENV, "").split(",")]
    names = [name for name in names if name]
    unknown = [name for name in names if name not in INTEGRATIONS]
    if unknown:
        return Switches(
            False,
            error=(
                f"{AUTOLOG_DISABLE_ENV}={env.get(AUTOLOG_DISABLE_ENV, '')!r}: unknown integration "
                f"{', '.join(repr(n) for n in unknown)}; accepted: {', '.join(INTEGRATIONS)} "
                "(comma-separated): the program runs uninstrumented"
            ),
        )
    return Switches(True, frozenset(names))
