"""Instrumentation for Python trainers: catalog metrics over prometheus-client, tracing over OpenTelemetry.

from foxhunt_trainer import TrainingMetrics, init_observability

init_observability("train_baseline_rl")          # OTLP if $OTEL_EXPORTER_OTLP_ENDPOINT, else console;
                                                 # logs to stdout (LOG_FORMAT), trace IDs inside spans
metrics = TrainingMetrics()                      # a dedicated registry
server = metrics.serve(9094)                     # /metrics and /healthz
with metrics.job("dqn", job_id, folds_planned=5) as job:   # an exception: failure by type, job failed
    with job.phase("data_wait"): batch = next(batches)   # every second of the job in one phase (PHASES)
    with job.phase("compute"): loss = step(batch)
    job.record_step(samples=len(batch))                  # per-rank steps; rank from torchrun's env (RankInfo)
    job.record_training_iteration(epoch, train_loss, val_loss, seconds)  # a NaN loss counts by itself
    with job.checkpoint(path, step=step, state=model.state_dict()):    # timed, errors classified,
        torch.save(model.state_dict(), path)                          # NaN weights never a good save
server.close()                                   # waits, bounded, for one more scrape of what changed
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from foxhunt_trainer.checkpoints import CheckpointSave, GoodCheckpoint
    from foxhunt_trainer.contract.exposition import OPENMETRICS, TEXT, render_openmetrics, render_text
    from foxhunt_trainer.errors import CHECKPOINT_ERROR_TYPES, FAILURE_ERROR_TYPES
    from foxhunt_trainer.logs import LOG_FORMATS, configure_logging, log_context
    from foxhunt_trainer.phases import PHASES, PhaseClock
    from foxhunt_trainer.ranks import RankInfo
    from foxhunt_trainer.server import METRICS_PORT, MetricsServer, start_metrics_server
    from foxhunt_trainer.tracing import build_tracer_provider, init_observability
    from foxhunt_trainer.training import JOB_STATUSES, NAN_TENSOR_TYPES, JobMetrics, TrainingMetrics

# Importing the package loads nothing: `foxhunt_trainer.contract` (the poller image ships it alone),
# `foxhunt_trainer.trainer_env` (the Pulumi program reads it) and `foxhunt-run` (standard library
# only at start) stay light. A name below is imported from its module on first use.
_EXPORTS: dict[str, str] = {
    "CHECKPOINT_ERROR_TYPES": "foxhunt_trainer.errors",
    "CheckpointSave": "foxhunt_trainer.checkpoints",
    "FAILURE_ERROR_TYPES": "foxhunt_trainer.errors",
    "GoodCheckpoint": "foxhunt_trainer.checkpoints",
    "JOB_STATUSES": "foxhunt_trainer.training",
    "JobMetrics": "foxhunt_trainer.training",
    "LOG_FORMATS": "foxhunt_trainer.logs",
    "METRICS_PORT": "foxhunt_trainer.server",
    "MetricsServer": "foxhunt_trainer.server",
    "NAN_TENSOR_TYPES": "foxhunt_trainer.training",
    "OPENMETRICS": "foxhunt_trainer.contract.exposition",
    "PHASES": "foxhunt_trainer.phases",
    "PhaseClock": "foxhunt_trainer.phases",
    "RankInfo": "foxhunt_trainer.ranks",
    "TEXT": "foxhunt_trainer.contract.exposition",
    "TrainingMetrics": "foxhunt_trainer.training",
    "build_tracer_provider": "foxhunt_trainer.tracing",
    "configure_logging": "foxhunt_trainer.logs",
    "init_observability": "foxhunt_trainer.tracing",
    "log_context": "foxhunt_trainer.logs",
    "render_openmetrics": "foxhunt_trainer.contract.exposition",
    "render_text": "foxhunt_trainer.contract.exposition",
    "start_metrics_server": "foxhunt_trainer.server",
}

__all__ = [
    "CHECKPOINT_ERROR_TYPES",
    "FAILURE_ERROR_TYPES",
    "JOB_STATUSES",
    "LOG_FORMATS",
    "METRICS_PORT",
    "NAN_TENSOR_TYPES",
    "OPENMETRICS",
    "PHASES",
    "TEXT",
    "CheckpointSave",
    "GoodCheckpoint",
    "JobMetrics",
    "MetricsServer",
    "PhaseClock",
    "RankInfo",
    "TrainingMetrics",
    "build_tracer_provider",
    "configure_logging",
    "init_observability",
    "log_context",
    "render_openmetrics",
    "render_text",
    "start_metrics_server",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
