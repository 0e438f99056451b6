"""Group `ml_storage`: S3 errors, checkpoint save failures, model storage usage."""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import counter_increased, counter_rate, duration
from observability.rules import recording
from observability.rules.detection import event_window_seconds
from observability.rules.rule_types import AlertRule, RunbookQuery, Severity

GROUP = "ml_storage"
S3_ERRORS_WINDOW_SECONDS = 300


def storage_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    window = event_window_seconds(cfg)
    checkpoint_labels = ("namespace", "model_type", "job_id", "error_type")
    used = recording.MODEL_STORAGE_USED_RATIO.record
    s3_errors, storage_used = cfg.thresholds.s3_errors_per_second, cfg.thresholds.model_storage_used_ratio
    return (
        AlertRule(
            name="S3ConnectionErrors",
            group=GROUP,
            severity=Severity.WARNING,
            expr=(
                f"{counter_rate(catalog.S3_ERRORS_TOTAL, S3_ERRORS_WINDOW_SECONDS, ('namespace', 'service'))}"
                f" > {s3_errors.promql}"
            ),
            for_seconds=300,
            summary=f"S3 requests have failed more than {s3_errors.text} for 5 minutes.",
            description=(
                "{{ $labels.service }} (namespace {{ $labels.namespace }}) gets "
                f'{{{{ printf "%.2f" $value }}}} S3 errors per second, above {s3_errors.short} for 5m.'
            ),
            impact="Checkpoints, models and data sets cannot be read or written reliably",
            action=(
                "Read the errors by operation and error type",
                "Check the object store's status and the credentials' expiry",
                "Check network policies and DNS from the service's namespace",
            ),
            locating_labels=("namespace", "service"),
            queries=(
                RunbookQuery(
                    "Errors per second by operation and type",
                    f'sum by (operation, error_type) (rate({catalog.S3_ERRORS_TOTAL.name}{{service="<service>"}}[5m]))',
                ),
                RunbookQuery(
                    "Checkpoint save failures at the same time",
                    f"sum by (model_type, error_type) (increase({catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name}[30m]))",
                ),
            ),
            rationale="Counts every S3 error type: the threshold is on all S3 errors of a service.",
        ),
        AlertRule(
            name="CheckpointSaveFailures",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=counter_increased(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL, window, checkpoint_labels),
            for_seconds=0,
            summary="A training job failed to save a checkpoint.",
            description=(
                "{{ $labels.model_type }} training job {{ $labels.job_id }} (namespace {{ $labels.namespace }}) "
                f"failed to save a checkpoint ({{{{ $labels.error_type }}}}) within the last {duration(window)}."
            ),
            impact="A crash now loses all training since the last good checkpoint",
            action=(
                "Read the error type and the job's logs",
                "Check storage usage and S3 errors",
                "Free space or fix credentials, then confirm the next save succeeds",
            ),
            locating_labels=checkpoint_labels,
            queries=(
                RunbookQuery(
                    "Failures by error type in the last hour",
                    f'increase({catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name}{{job_id="<job_id>"}}[1h])',
                ),
                RunbookQuery(
                    "Last successful saves",
                    f'increase({catalog.CHECKPOINT_SAVES_TOTAL.name}{{job_id="<job_id>"}}[1h])',
                ),
                RunbookQuery("Storage usage", used),
            ),
            rationale=(
                "Any failure fires at the first evaluation that sees it, including the first failure of a "
                f"job (a new series); it resolves {duration(window)} after the last failure."
            ),
        ),
        AlertRule(
            name="ModelStorageUsageHigh",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{used} > {storage_used.promql}",
            for_seconds=600,
            summary=f"A model storage volume has been more than {storage_used.text} full for 10 minutes.",
            description=(
                "Volume {{ $labels.volume }} of {{ $labels.service }} (namespace {{ $labels.namespace }}) is "
                f"{{{{ $value | humanizePercentage }}}} full, above {storage_used.short} for 10m."
            ),
            impact="When it fills, checkpoint saves and model uploads fail",
            action=(
                "Find the largest and oldest checkpoints on the volume",
                "Apply the retention policy or delete superseded checkpoints",
                "Grow the volume if the usage is legitimate",
            ),
            locating_labels=("namespace", "service", "volume"),
            queries=(
                RunbookQuery("Usage of every volume", used),
                RunbookQuery(
                    "Growth over the last day (bytes)",
                    f'delta({catalog.MODEL_STORAGE_USED_BYTES.name}{{volume="<volume>"}}[1d])',
                ),
                RunbookQuery("Size of the latest checkpoints", f"topk(10, {catalog.CHECKPOINT_SIZE_BYTES.name})"),
            ),
        ),
    )
