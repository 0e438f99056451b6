"""Recording rules the dashboards read instead of heavy raw expressions.

Histogram quantiles over every training job's buckets and the fleet-wide span-metrics rates are
the expensive panels at fleet scale; these rules pre-aggregate them once per evaluation so a
dashboard refresh only reads a handful of series. Names follow `level:metric:operations`
(Prometheus' recording-rule convention); every input is a catalog metric, and the dashboards refer
to the constants' `.record`, never to a spelled-out name.

Windows are fixed (`5m`, at least four scrape intervals for every stack) because a recording rule
cannot follow a dashboard's `$__rate_interval`; job durations use `1h` since jobs end rarely.
"""

from __future__ import annotations

from typing import Any

from observability import catalog
from observability.config import ObservabilityConfig
from observability.rules.model import RecordingRule

SPAN_STATUS_ERROR = "STATUS_CODE_ERROR"


def _sum_rate(series: str, labels: tuple[str, ...], window: str, matchers: str = "") -> str:
    return f"sum by ({', '.join(labels)}) (rate({series}{matchers}[{window}]))"


# --- Training jobs ---------------------------------------------------------------------------
TRAINING_ITERATION_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type_job_id:{catalog.TRAINING_ITERATION_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.TRAINING_ITERATION_SECONDS.bucket, ("model_type", "job_id", "le"), "5m"),
    "Per-second rate of training iteration histogram buckets over 5m, per job and le.",
)
TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type:{catalog.TRAINING_DATA_LOADING_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.TRAINING_DATA_LOADING_SECONDS.bucket, ("model_type", "le"), "5m"),
    "Per-second rate of data loading histogram buckets over 5m, per model type and le.",
)
CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"model_type:{catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket, ("model_type", "le"), "5m"),
    "Per-second rate of checkpoint save duration buckets over 5m, per model type and le.",
)
TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H = RecordingRule(
    f"model_type:{catalog.TRAINING_JOB_DURATION_SECONDS.bucket}:rate1h",
    _sum_rate(catalog.TRAINING_JOB_DURATION_SECONDS.bucket, ("model_type", "le"), "1h"),
    "Per-second rate of training job duration buckets over 1h, per model type and le.",
)

# --- Tempo metrics generator: span metrics and service graph -----------------------------------
_CALLS = catalog.SPANMETRICS_CALLS_TOTAL.name
_CALLS_BASE = _CALLS.removesuffix("_total")
SPAN_CALLS_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}:rate5m",
    _sum_rate(_CALLS, ("service",), "5m"),
    "Spans per second over 5m, per service (Tempo span metrics).",
)
SPAN_ERRORS_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}_errors:rate5m",
    _sum_rate(_CALLS, ("service",), "5m", f'{{status_code="{SPAN_STATUS_ERROR}"}}'),
    "Spans with error status per second over 5m, per service.",
)
SPAN_ERROR_RATIO_RATE5M = RecordingRule(
    f"service:{_CALLS_BASE}_errors:ratio_rate5m",
    f"{SPAN_ERRORS_RATE5M.record} / {SPAN_CALLS_RATE5M.record}",
    "Fraction (0-1) of spans with error status over 5m, per service.",
)
SPAN_LATENCY_BUCKET_RATE5M = RecordingRule(
    f"service:{catalog.SPANMETRICS_LATENCY.bucket}:rate5m",
    _sum_rate(catalog.SPANMETRICS_LATENCY.bucket, ("service", "le"), "5m"),
    "Per-second rate of span duration buckets over 5m, per service and le.",
)
SERVICE_GRAPH_REQUEST_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_TOTAL.name.removesuffix('_total')}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_TOTAL.name, ("client", "server"), "5m"),
    "Requests per second over 5m on each client -> server edge of the service graph.",
)
SERVICE_GRAPH_REQUEST_FAILED_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_FAILED_TOTAL.name.removesuffix('_total')}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_FAILED_TOTAL.name, ("client", "server"), "5m"),
    "Failed requests per second over 5m on each client -> server edge.",
)
SERVICE_GRAPH_REQUEST_SERVER_SECONDS_BUCKET_RATE5M = RecordingRule(
    f"client_server:{catalog.SERVICE_GRAPH_REQUEST_SERVER_SECONDS.bucket}:rate5m",
    _sum_rate(catalog.SERVICE_GRAPH_REQUEST_SERVER_SECONDS.bucket, ("client", "server", "le"), "5m"),
    "Per-second rate of server-side duration buckets over 5m on each client -> server edge.",
)

TRAINING_RULES: tuple[RecordingRule, ...] = (
    TRAINING_ITERATION_SECONDS_BUCKET_RATE5M,
    TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M,
    CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M,
    TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H,
)
# Order matters: a rule may read a record defined earlier in its group (same evaluation).
TRACE_RULES: tuple[RecordingRule, ...] = (
    SPAN_CALLS_RATE5M,
    SPAN_ERRORS_RATE5M,
    SPAN_ERROR_RATIO_RATE5M,
    SPAN_LATENCY_BUCKET_RATE5M,
    SERVICE_GRAPH_REQUEST_RATE5M,
    SERVICE_GRAPH_REQUEST_FAILED_RATE5M,
    SERVICE_GRAPH_REQUEST_SERVER_SECONDS_BUCKET_RATE5M,
)
ALL_RULES: tuple[RecordingRule, ...] = TRAINING_RULES + TRACE_RULES

TRAINING_GROUP = "foxhunt-dashboards-training.rules"
TRACES_GROUP = "foxhunt-dashboards-traces.rules"


def dashboard_recording_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """The rule groups (Prometheus rule-file format) the dashboards depend on."""
    interval = f"{cfg.evaluation_interval_seconds}s"
    return [
        {"name": TRAINING_GROUP, "interval": interval, "rules": [r.to_rule() for r in TRAINING_RULES]},
        {"name": TRACES_GROUP, "interval": interval, "rules": [r.to_rule() for r in TRACE_RULES]},
    ]
