"""Group `ml_model_quality`: drift, feature distribution shift, confidence and accuracy."""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, duration, gauge_by
from observability.rules import recording
from observability.rules.rule_types import AlertRule, RunbookQuery, Severity

GROUP = "ml_model_quality"
SERVICE_MODEL_LABELS = recording.SERVICE_MODEL_LABELS
JOB_LABELS: tuple[str, ...] = ("namespace", "model_type", "job_id")
_MODEL_ON_SERVICE = "{{ $labels.model_type }} on {{ $labels.service }} (namespace {{ $labels.namespace }})"
_ONE_MODEL = '{service="<service>", model_type="<model_type>"}'

# Accuracy scales differ by model (MAMBA-2, DQN, PPO, TFT), so MLModelAccuracyDegraded has no
# absolute threshold: "degraded" is below a factor (thresholds.yaml) of the job's own best of the
# last 6 hours.
ACCURACY_BASELINE_SECONDS = 6 * 3600
QUALITY_FOR_SECONDS = 600


def quality_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    accuracy = catalog.MODEL_ACCURACY.name
    th = cfg.thresholds
    drift, distance = th.model_drift_score, th.feature_distribution_distance
    confidence, drop = th.prediction_confidence_median, th.model_accuracy_drop_factor
    drop_text = f"{round((1 - drop.value) * 100, 6):g}%"
    baseline = duration(ACCURACY_BASELINE_SECONDS)
    baseline_hours = f"{ACCURACY_BASELINE_SECONDS / 3600:g} hours"
    return (
        AlertRule(
            name="ModelDriftDetected",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{gauge_by(catalog.MODEL_DRIFT_SCORE, SERVICE_MODEL_LABELS)} > {drift.promql}",
            for_seconds=QUALITY_FOR_SECONDS,
            summary=f"A served model's drift score has been above {drift.text} for 10 minutes.",
            description=(
                f'{_MODEL_ON_SERVICE} has drift score {{{{ printf "%.3f" $value }}}}, above {drift.short} for 10m.'
            ),
            impact="The live data no longer looks like the training data: predictions get less reliable",
            action=(
                "Find the features that shifted most",
                "Compare with recent upstream data or schema changes",
                "Schedule retraining on recent data",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery("Drift score over the last day", f"{catalog.MODEL_DRIFT_SCORE.name}{_ONE_MODEL}[1d]"),
                RunbookQuery(
                    "The ten most shifted features",
                    f"topk(10, {catalog.FEATURE_DISTRIBUTION_DISTANCE.name}{_ONE_MODEL})",
                ),
            ),
        ),
        AlertRule(
            name="FeatureDistributionShift",
            group=GROUP,
            severity=Severity.WARNING,
            expr=(
                f"{gauge_by(catalog.FEATURE_DISTRIBUTION_DISTANCE, (*SERVICE_MODEL_LABELS, 'feature'))}"
                f" > {distance.promql}"
            ),
            for_seconds=QUALITY_FOR_SECONDS,
            summary="A feature's live distribution has been far from its training distribution for 10 minutes.",
            description=(
                f"Feature {{{{ $labels.feature }}}} of {_MODEL_ON_SERVICE} is at distance "
                f'{{{{ printf "%.3f" $value }}}} from its training distribution, above {distance.short} for 10m.'
            ),
            impact="Predictions that depend on the feature are made on data the model never saw",
            action=(
                "Check the feature's upstream source for outages or schema changes",
                "Compare the live and training histograms of the feature",
                "Retrain or drop the feature if the shift is real and lasting",
            ),
            locating_labels=(*SERVICE_MODEL_LABELS, "feature"),
            queries=(
                RunbookQuery(
                    "Distance of the feature over the last day",
                    f'{catalog.FEATURE_DISTRIBUTION_DISTANCE.name}{{feature="<feature>"}}[1d]',
                ),
                RunbookQuery("Drift score of the model", f"{catalog.MODEL_DRIFT_SCORE.name}{_ONE_MODEL}"),
            ),
        ),
        AlertRule(
            name="PredictionConfidenceLow",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{recording.PREDICTION_CONFIDENCE_P50.record} < {confidence.promql}",
            for_seconds=QUALITY_FOR_SECONDS,
            summary=f"The median prediction confidence has been below {confidence.promql} for 10 minutes.",
            description=(
                f'Median prediction confidence of {_MODEL_ON_SERVICE} is {{{{ printf "%.2f" $value }}}}, '
                f"below {confidence.promql} for 10m."
            ),
            impact="Most predictions are uncertain: decisions based on them are close to guesses",
            action=(
                "Check drift and feature distribution alerts for the same model",
                "Check whether a new model version was rolled out",
                "Roll back the model or retrain it",
            ),
            locating_labels=SERVICE_MODEL_LABELS,
            queries=(
                RunbookQuery("Median confidence per model", recording.PREDICTION_CONFIDENCE_P50.record),
                RunbookQuery(
                    "Share of predictions below 0.5 confidence",
                    f'sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.PREDICTION_CONFIDENCE.bucket}{{le="0.5"}}[5m])) / '
                    f"sum {by(SERVICE_MODEL_LABELS)} (rate({catalog.PREDICTION_CONFIDENCE.count}[5m]))",
                ),
            ),
            rationale="A service with no predictions has no median and stays silent.",
        ),
        AlertRule(
            name="MLModelAccuracyDegraded",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=(
                f"{gauge_by(catalog.MODEL_ACCURACY, JOB_LABELS)}\n"
                f"< {drop.promql} * max {by(JOB_LABELS)} (max_over_time({accuracy}[{baseline}]))"
            ),
            for_seconds=60,
            summary=(
                f"A model's validation accuracy dropped more than {drop_text} below its best of the last "
                f"{baseline_hours}."
            ),
            description=(
                "Validation accuracy of {{ $labels.model_type }} job {{ $labels.job_id }} (namespace "
                f"{{{{ $labels.namespace }}}}) is {{{{ $value | humanizePercentage }}}}, more than {drop_text} "
                f"below its best of the last {baseline}."
            ),
            impact="The model got worse: promoting or serving it would degrade every decision it drives",
            action=(
                "Stop promotion of the job's checkpoints",
                "Compare training and validation loss (overfitting or divergence)",
                "Check the validation data set for changes",
                "Restore the best checkpoint",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                RunbookQuery(
                    f"Accuracy of the job over {baseline_hours}", f'{accuracy}{{job_id="<job_id>"}}[{baseline}]'
                ),
                RunbookQuery(
                    "Training against validation loss",
                    f'{catalog.TRAINING_LOSS.name}{{job_id="<job_id>"}} or '
                    f'{catalog.TRAINING_VALIDATION_LOSS.name}{{job_id="<job_id>"}}',
                ),
            ),
            rationale=(
                "Accuracy scales differ by model (MAMBA-2, DQN, PPO, TFT), so there is no absolute threshold: "
                f"it is relative to the job's own best of the last {baseline}; `for: 1m` keeps the 30s-1m "
                "response time of critical alerts."
            ),
        ),
    )
