"""Training-job metrics: `TrainingMetrics`, the registry that owns the catalog's training families and
starts jobs (foxhunt_trainer.registry), and `JobMetrics`, one job's helpers (foxhunt_trainer.job_metrics).
This module keeps the names they were imported by."""

from __future__ import annotations

from foxhunt_trainer.job_metrics import (
    ACTIVATION,
    FINAL_STATUSES,
    GRADIENT,
    JOB_STATUSES,
    LOSS,
    NAN_TENSOR_TYPES,
    VALIDATION_LOSS,
    JobMetrics,
)
from foxhunt_trainer.registry import PhaseCollector, TrainingMetrics

__all__ = [
    "ACTIVATION",
    "FINAL_STATUSES",
    "GRADIENT",
    "JOB_STATUSES",
    "LOSS",
    "NAN_TENSOR_TYPES",
    "VALIDATION_LOSS",
    "JobMetrics",
    "PhaseCollector",
    "TrainingMetrics",
]
