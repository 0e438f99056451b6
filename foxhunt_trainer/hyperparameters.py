"""A job's hyperparameters as the labels of its one `ml_training_hyperparameters_info` series.

Only what throughput and loss are compared across: batch size, optimizer, precision and the
learning-rate schedule. One series per job (the labels are the job's, not the step's or the
trial's), so cardinality stays that of the jobs. Values are short names (`AdamW`, `bf16`,
`CosineAnnealingLR`); an unknown one is "unknown".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from foxhunt_trainer.contract.catalog import HYPERPARAMETER_LABELS

UNKNOWN = "unknown"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp64", "mixed-fp16", "mixed-bf16", UNKNOWN)
_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


@dataclass(frozen=True)
class Hyperparameters:
    batch_size: int | None = None
    optimizer: str = UNKNOWN
    precision: str = UNKNOWN
    lr_schedule: str = UNKNOWN

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size is a count of at least 1, got {self.batch_size}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: expected one of {PRECISIONS}")
        for field in ("optimizer", "lr_schedule"):
            value = getattr(self, field)
            if not _NAME.match(value):
                raise ValueError(
                    f"{field} {value!r}: expected a short name (letters, digits, _.+-, at most 64 characters)"
                )

    def labels(self) -> dict[str, str]:
        values = {
            "batch_size": UNKNOWN if self.batch_size is None else str(self.batch_size),
            "optimizer": self.optimizer,
            "precision": self.precision,
            "lr_schedule": self.lr_schedule,
        }
        assert tuple(values) == HYPERPARAMETER_LABELS
        return values
