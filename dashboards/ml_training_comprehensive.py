"""ML Training Comprehensive: the platform's main training dashboard, with its thresholds and colours.

For the ML platform team and whoever watches the whole training fleet: every job's status, speed
and quality, fleet GPU figures (recorded medians and extremes), checkpoints and the data pipeline,
with the colours the monitoring report specifies. Every panel comes from its topic module
(`dashboards/panels/<topic>.py`); this module composes them into rows.

`$model_type` (multi-select, include all) and `$job_id` (single select), refresh 10 s, last
hour by default, table legends with the last non-null and the minimum value.
"""

from __future__ import annotations

from typing import Any

from dashboards import variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import (
    checkpoint,
    data,
    efficiency,
    errors,
    gpm,
    gpu,
    gpu_errors,
    learning,
    steps,
    training,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig

UID = "ml-training-comprehensive"
TITLE = "ML Training Comprehensive"

MODEL = promql.variable_matcher("model_type", "model_type")
JOB = promql.variable_matcher("job_id", "job_id")
# The jobs the per-job panels show: the selected model types' `$job_id`.
JOBS = (MODEL, JOB)


def _high_level_status(cfg: ObservabilityConfig) -> Row:
    return Row(
        "High-Level Status",
        [
            training.jobs_by_status_now(w=6),
            training.speed_gauge(cfg.thresholds, JOBS, w=6),
            errors.nan_count(JOBS, w=6),
            learning.mean_loss_by_model_type(MODEL, w=6),
        ],
    )


def _loss_monitoring() -> Row:
    return Row(
        "Loss Monitoring",
        [
            learning.loss_curves(MODEL, w=12, h=9),
            learning.validation_against_training_loss(JOBS, w=12, h=9),
        ],
    )


def _gpu_monitoring(cfg: ObservabilityConfig) -> Row:
    # Fleet figures from the recorded medians and extremes; True Utilization adds the selected job's GPUs.
    return Row(
        "GPU Monitoring",
        [
            gpu.fleet_utilization(cfg.thresholds, w=12),
            gpu.fullest_memory_now(cfg.thresholds, w=12),
            gpm.true_utilization_of_fleet(job=JOBS),
        ],
    )


def _training_progress() -> Row:
    return Row(
        "Training Progress",
        [
            training.progress_gauge(JOBS, w=8),
            training.current_epoch(JOBS, w=8),
            learning.accuracy_gauge(JOBS, w=8),
        ],
    )


def _performance(cfg: ObservabilityConfig) -> Row:
    return Row(
        "Performance Metrics",
        [
            gpu.fleet_temperature(cfg.thresholds, w=12),
            steps.iteration_duration_p95(JOBS, w=12),
        ],
    )


def _checkpoints() -> Row:
    return Row(
        "Checkpoint Management",
        [
            checkpoint.saves_and_failures(JOBS, w=12),
            checkpoint.save_duration(MODEL, (0.95,), "95th percentile checkpoint save time.", w=12),
        ],
    )


def _advanced() -> Row:
    return Row(
        "Advanced Metrics",
        [
            learning.convergence_rate(JOBS, w=12),
            data.data_loading_p95(MODEL, w=12),
        ],
    )


def _error_tracking() -> Row:
    return Row(
        "Error Tracking",
        [
            errors.failures_by_type_count(MODEL, w=12),
            gpu_errors.errors_now(w=12),
        ],
    )


def _cost_and_energy(cfg: ObservabilityConfig) -> Row:
    return Row(
        "GPU Cost and Energy",
        [
            efficiency.model_cost_24h(cfg, MODEL),
            efficiency.energy_per_job(MODEL),
            efficiency.badput_cost_per_job(cfg, MODEL),
            efficiency.checkpoint_storage_cost_24h(cfg, MODEL),
        ],
    )


def build(cfg: ObservabilityConfig) -> dict[str, Any]:
    return assemble(
        DashboardSpec(
            uid=UID,
            title=TITLE,
            description="Training status, losses, GPUs, progress, checkpoints and errors of ML training jobs.",
            tags=("training", "gpu", "ml"),
            variables=[
                variables.prometheus_datasource(cfg.datasource_uids.prometheus),
                variables.label_values(
                    "model_type", "Model type", catalog.TRAINING_LOSS.name, "model_type", multi=True, include_all=True
                ),
                variables.label_values(
                    "job_id",
                    "Job",
                    promql.selector(catalog.TRAINING_LOSS.name, (MODEL,)),
                    "job_id",
                    multi=False,
                    include_all=False,
                ),
            ],
            rows=[
                _high_level_status(cfg),
                _loss_monitoring(),
                _gpu_monitoring(cfg),
                _training_progress(),
                _performance(cfg),
                _checkpoints(),
                _advanced(),
                _error_tracking(),
                _cost_and_energy(cfg),
            ],
            min_interval=f"{cfg.scrape_interval_seconds}s",
            refresh="10s",
            time_from="now-1h",
        )
    )
