"""Recording rules (`level:metric:operations`) for what alerts and dashboards compute repeatedly.

Levels name the labels a series keeps: `namespace_service_model_type` = namespace, service,
model_type. Nothing is recorded per GPU (see below). Import the constants and use `.record`;
never spell a recorded name again.

Alerts bound by the 30-second promise do not read these: a rule in another group may see a
recorded value one evaluation old (see detection.py).
"""

from __future__ import annotations

from typing import Any

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, duration, gauge_by, histogram_quantile_rate
from observability.rules.rule_types import RecordingRule

GPU_LABELS: tuple[str, ...] = catalog.GPU  # node, gpu_id, uuid, gpu_name
SERVICE_MODEL_LABELS: tuple[str, ...] = ("namespace", "service", "model_type")
RATE_WINDOW_SECONDS = 300
_RATE_WINDOW = duration(RATE_WINDOW_SECONDS)

# No per-GPU recording rule here: recording one series per GPU (8,000 at 1,000 nodes x 8 GPUs) every
# evaluation, in another group, cost more than it saved. The GPU alert group records its own inputs
# at its head (gpu.py: each poller input read once, only the GPUs an alert could look at written).

# The metric part of every recorded name of a GPU's memory used over its total (a fraction, 0-1).
MEMORY_USED_OVER_TOTAL = f"{catalog.GPU_MEMORY_USED_BYTES.name.removesuffix('_bytes')}_over_total"
INFERENCE_LATENCY_P99 = RecordingRule(
    record="namespace_service_model_type:ml_inference_latency_seconds:p99_rate5m",
    expr=histogram_quantile_rate(0.99, catalog.INFERENCE_LATENCY_SECONDS, RATE_WINDOW_SECONDS, SERVICE_MODEL_LABELS),
    help="99th percentile of online inference latency over 5m, in seconds.",
)
MODEL_CACHE_MISS_RATIO = RecordingRule(
    record="namespace_service_model_type:ml_model_cache_misses:ratio_rate5m",
    expr=(
        f"sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.MODEL_CACHE_MISSES_TOTAL.name}[{_RATE_WINDOW}]))\n"
        f"/\n"
        f"(\n"
        f"  sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.MODEL_CACHE_MISSES_TOTAL.name}[{_RATE_WINDOW}]))\n"
        f"  +\n"
        f"  sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.MODEL_CACHE_HITS_TOTAL.name}[{_RATE_WINDOW}]))\n"
        f")"
    ),
    help="Fraction (0-1) of model cache lookups that missed over 5m.",
)
PREDICTION_CONFIDENCE_P50 = RecordingRule(
    record="namespace_service_model_type:ml_prediction_confidence:p50_rate5m",
    expr=histogram_quantile_rate(0.5, catalog.PREDICTION_CONFIDENCE, RATE_WINDOW_SECONDS, SERVICE_MODEL_LABELS),
    help="Median confidence (0-1) of served predictions over 5m.",
)
FEATURE_EXTRACTION_P95 = RecordingRule(
    record="namespace_service_model_type:ml_feature_extraction_duration_seconds:p95_rate5m",
    expr=histogram_quantile_rate(
        0.95, catalog.FEATURE_EXTRACTION_DURATION_SECONDS, RATE_WINDOW_SECONDS, SERVICE_MODEL_LABELS
    ),
    help="95th percentile of feature extraction latency over 5m, in seconds.",
)
MODEL_STORAGE_USED_RATIO = RecordingRule(
    record="namespace_service_volume:ml_model_storage_used_over_capacity:ratio",
    expr=(
        f"{gauge_by(catalog.MODEL_STORAGE_USED_BYTES, ('namespace', 'service', 'volume'))}\n"
        f"/\n"
        f"{gauge_by(catalog.MODEL_STORAGE_CAPACITY_BYTES, ('namespace', 'service', 'volume'))}"
    ),
    help="Fraction (0-1) of each model storage volume in use.",
)
TRAINING_DATA_AGE_SECONDS = RecordingRule(
    record="dataset:ml_training_data_age_seconds:min",
    expr=f"time() - {gauge_by(catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS, ('dataset',))}",
    help="Seconds since the newest update of each training data set.",
)

SERVICE_RECORDING_RULES: tuple[RecordingRule, ...] = (
    INFERENCE_LATENCY_P99,
    MODEL_CACHE_MISS_RATIO,
    PREDICTION_CONFIDENCE_P50,
    FEATURE_EXTRACTION_P95,
    MODEL_STORAGE_USED_RATIO,
    TRAINING_DATA_AGE_SECONDS,
)
RECORDING_RULES: tuple[RecordingRule, ...] = SERVICE_RECORDING_RULES


def recording_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """The recording groups the alerts rely on, evaluated at the stack's evaluation interval."""
    interval = duration(cfg.evaluation_interval_seconds)
    return [
        {
            "name": "ml_service.recording",
            "interval": interval,
            "rules": [r.to_rule() for r in SERVICE_RECORDING_RULES],
        },
    ]
