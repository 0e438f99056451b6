"""Group `ml_data_pipeline`: stale training data, feature engineering errors and latency."""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import counter_rate
from observability.rules import recording
from observability.rules.rule_types import AlertRule, RunbookQuery, Severity

GROUP = "ml_data_pipeline"
SERVICE_MODEL_LABELS = recording.SERVICE_MODEL_LABELS
FEATURE_ERRORS_WINDOW_SECONDS = 300


def pipeline_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    age = recording.TRAINING_DATA_AGE_SECONDS.record
    errors_labels = ("namespace", "model_type")
    th = cfg.thresholds
    stale, errors, extraction = (
        th.training_data_stale_seconds,
        th.feature_engineering_errors_per_second,
        th.feature_extraction_p95_seconds,
    )
    return (
        AlertRule(
            name="TrainingDataStale",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{age} > {stale.promql}",
            for_seconds=0,
            summary=f"A training data set has not been updated in {stale.text}.",
            description=(
                "Training data set {{ $labels.dataset }} was last updated {{ $value | humanizeDuration }} ago, "
                f"more than {stale.short}."
            ),
            impact="Models retrain on old data and miss recent behaviour",
            action=(
                "Check the ingestion job that writes the data set",
                "Check its upstream source for an outage",
                "Pause scheduled retraining on the data set until it is fresh",
            ),
            locating_labels=("dataset",),
            queries=(
                RunbookQuery("Age of every data set", age),
                RunbookQuery(
                    "Last update time of the data set",
                    f'{catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS.name}{{dataset="<dataset>"}}',
                ),
            ),
            rationale="The age only grows until the next update, so it cannot flap and needs no `for`.",
        ),
        AlertRule(
            name="FeatureEngineeringErrors",
            group=GROUP,
            severity=Severity.WARNING,
            expr=(
                counter_rate(catalog.FEATURE_ENGINEERING_ERRORS_TOTAL, FEATURE_ERRORS_WINDOW_SECONDS, errors_labels)
                + f" > {errors.promql}"
            ),
            for_seconds=300,
            summary=f"Feature engineering has failed more than {errors.text} for 5 minutes.",
            description=(
                "Feature engineering for {{ $labels.model_type }} (namespace {{ $labels.namespace }}) fails "
                f'{{{{ printf "%.2f" $value }}}} times per second, above {errors.short} for 5m.'
            ),
            impact="Training batches lose features or are dropped: the model learns from incomplete data",
            action=(
                "Read the errors by error type",
                "Check the logs of the training job for the failing transformation",
                "Check the raw input data for new values or a schema change",
            ),
            locating_labels=errors_labels,
            queries=(
                RunbookQuery(
                    "Errors per second by type",
                    f"sum by (model_type, error_type) (rate({catalog.FEATURE_ENGINEERING_ERRORS_TOTAL.name}[5m]))",
                ),
                RunbookQuery(
                    "Batches processed per second",
                    f"sum by (model_type) (rate({catalog.TRAINING_DATA_BATCHES_TOTAL.name}[5m]))",
                ),
            ),
        ),
        AlertRule(
            name="FeatureExtractionLatencyHigh",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{recording.FEATURE_EXTRACTION_P95.record} > {extraction.promql}",
            for_seconds=300,
            summary=f"Feature extraction p95 latency has been above {extraction.text} for 5 minutes.",
            description=(
                "p95 feature extraction latency of {{ $labels.model_type }} on {{ $labels.service }} (namespace "
                f"{{{{ $labels.namespace }}}}) is {{{{ $value | humanizeDuration }}}}, above {extraction.short} for 5m."
            ),
            impact="Training and inference wait on features: throughput drops and requests time out",
            action=(
                "Check the feature store's latency and error rate",
                "Check the request rate against capacity",
                "Look for a slow new feature in the latest deployment",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery("p95 per service and model", recording.FEATURE_EXTRACTION_P95.record),
                RunbookQuery(
                    "Extractions per second",
                    f"sum by (service, model_type) (rate({catalog.FEATURE_EXTRACTION_DURATION_SECONDS.count}[5m]))",
                ),
            ),
        ),
    )
