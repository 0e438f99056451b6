"""Instrumentation for Python trainers: catalog metrics over prometheus-client, tracing over OpenTelemetry.

from observability.instrument import TrainingMetrics, init_observability

init_observability("train_baseline_rl")          # OTLP if $OTEL_EXPORTER_OTLP_ENDPOINT, else console;
                                                 # logs to stdout (LOG_FORMAT), trace IDs inside spans
metrics = TrainingMetrics()                      # a dedicated registry
server = metrics.serve(9094)                     # /metrics and /healthz
job = metrics.start_job("dqn", job_id, folds_planned=5)
job.record_training_iteration(epoch, train_loss, val_loss, seconds)
with job.phase("data_wait"): batch = next(batches)   # every second of the job in one phase (PHASES)
with job.phase("compute"): step(batch)
job.record_step(samples=len(batch))              # per-rank steps; rank from torchrun's env (RankInfo)
job.record_nan_detection("loss")
job.record_checkpoint_save(True, seconds, size_bytes)
job.finish("completed")
server.close()                                   # first waits for one more scrape when the job
                                                 # template sets FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS
"""

from observability.exposition import OPENMETRICS, TEXT, render_openmetrics, render_text
from observability.instrument.logs import LOG_FORMATS, configure_logging, log_context
from observability.instrument.phases import PHASES, PhaseClock
from observability.instrument.ranks import RankInfo
from observability.instrument.server import METRICS_PORT, MetricsServer, start_metrics_server
from observability.instrument.tracing import build_tracer_provider, init_observability
from observability.instrument.training import (
    CHECKPOINT_ERROR_TYPES,
    FAILURE_ERROR_TYPES,
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
