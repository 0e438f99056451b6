"""Instrumentation for Python trainers: catalog metrics over prometheus-client, tracing over OpenTelemetry.

from observability.instrument import TrainingMetrics, init_observability

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

from observability.exposition import OPENMETRICS, TEXT, render_openmetrics, render_text
from observability.instrument.checkpoints import CheckpointSave, GoodCheckpoint
from observability.instrument.errors import CHECKPOINT_ERROR_TYPES, FAILURE_ERROR_TYPES
from observability.instrument.logs import LOG_FORMATS, configure_logging, log_context
from observability.instrument.phases import PHASES, PhaseClock
from observability.instrument.ranks import RankInfo
from observability.instrument.server import METRICS_PORT, MetricsServer, start_metrics_server
from observability.instrument.tracing import build_tracer_provider, init_observability
from observability.instrument.training import (
    JOB_STATUSES,
    NAN_TENSOR_TYPES,
    JobMetrics,
    TrainingMetrics,
)

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
