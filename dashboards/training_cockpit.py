"""Training cockpit: the per-fold view of training jobs.

For the ML engineer who runs the job: is my job progressing, are its GPUs busy, is the model
learning, are checkpoints good, where does its time go. Every panel comes from its topic module
(`dashboards/panels/<topic>.py`); this module composes them into rows.

Variables: `$model` (label `model_type`), `$fold`, `$job_id` (the job whose GPUs "This Job's
GPUs" shows), `$node` (GPUs) and `$interval`, the minimum query interval from which Grafana
derives `$__rate_interval` for every rate in the dashboard.
"""

from __future__ import annotations

from typing import Any

from dashboards import variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import (
    checkpoint,
    data,
    distributed,
    efficiency,
    errors,
    folds,
    gpm,
    gpu,
    hpo,
    job_gpus,
    learning,
    rl,
    steps,
    training,
)
from foxhunt_trainer.contract import catalog
from observability import alert_links, promql
from observability.config import ObservabilityConfig

UID = alert_links.TRAINING_COCKPIT_UID
TITLE = "Foxhunt Training Cockpit"

MODEL = promql.variable_matcher("model_type", "model")
FOLD = promql.variable_matcher("fold", "fold")
NODE = promql.variable_matcher("node", "node")
JOB_ID = promql.variable_matcher("job_id", "job_id")
# GPUs a per-GPU panel draws at most per target (topk / bottomk).
TOP = 5


def _active_jobs() -> Row:
    return Row(
        "Active Jobs",
        [
            training.active_workers(MODEL, w=4),
            folds.fold_progress(MODEL, w=8),
            folds.folds_completed_per_hour(MODEL, w=12),
            training.job_memory_used(MODEL, w=12),
            training.job_cpu_usage(MODEL, w=12),
        ],
    )


def _training_progress() -> Row:
    return Row(
        "Training Progress",
        [
            learning.epoch_loss(MODEL, w=12),
            folds.best_loss_per_fold(MODEL, FOLD, w=12),
            data.batches_per_second(MODEL, w=12),
            steps.iteration_seconds(MODEL, w=8),
            folds.fold_duration(MODEL, FOLD, w=8),
            folds.epochs_per_fold(MODEL, FOLD, w=8),
        ],
    )


def _gpu_resources(cfg: ObservabilityConfig) -> Row:
    # At most TOP GPUs per target, whatever `$node` selects (8 GPUs for one node, 8,000 for all nodes);
    # `$node` starts on one node, so a default load reads 8 GPUs. Fleet-wide views of the same
    # gauges are on the ML Training Comprehensive and Infra cockpit dashboards (recorded series).
    gpus = (NODE,)
    return Row(
        "GPU Resources",
        [
            gpu.utilization_busiest_and_idlest(gpus, TOP, w=12),
            gpu.memory_used_and_total(gpus, TOP, w=12),
            gpu.hottest_temperature(cfg.thresholds, gpus, TOP, w=8),
            gpu.power_draw_and_limit(gpus, TOP, w=8),
            gpu.memory_bandwidth_utilization(gpus, TOP, w=8),
            gpm.true_utilization_of_selected(gpus, job=(JOB_ID,)),  # the GPUs job $job_id holds
        ],
    )


def _this_jobs_gpus(cfg: ObservabilityConfig) -> Row:
    th, job = cfg.thresholds, (JOB_ID,)
    return Row(
        "This Job's GPUs",
        [
            job_gpus.utilization(th, job, w=6),
            job_gpus.memory_used(th, job, w=6),
            job_gpus.power(job, w=6),
            job_gpus.temperature(th, job, w=6),
            job_gpus.gpus_held(job, w=4),
            job_gpus.gpu_hours(job, w=4),
            job_gpus.energy(job, w=4),
            job_gpus.cost(cfg, job, w=4),
            job_gpus.badput_cost(cfg, job, w=4),
            job_gpus.checkpoint_storage_cost(cfg, job, w=4),
            job_gpus.own_memory(job, w=10),
            job_gpus.sm_share(job, w=10),
            job_gpus.shared_gpus(job, w=4),
        ],
    )


def _model_quality() -> Row:
    return Row(
        "Model Quality",
        [
            learning.accuracy(MODEL, w=6),
            learning.f1_score(MODEL, w=6),
            learning.precision(MODEL, w=6),
            learning.recall(MODEL, w=6),
            learning.regression_error(MODEL, w=12),
            learning.r2_score(MODEL, w=12),
        ],
    )


def _reinforcement_learning() -> Row:
    return Row(
        "Reinforcement Learning (DQN, PPO)",
        [
            rl.episode_reward(MODEL, w=8),
            rl.episode_length(MODEL, w=8),
            rl.episodes_per_minute(MODEL, w=8),
            rl.exploration_rate(MODEL, w=6),
            rl.q_value(MODEL, w=6),
            rl.policy_entropy(MODEL, w=6),
            rl.value_loss(MODEL, w=6),
            rl.approx_kl(MODEL, w=8),
            rl.clip_fraction(MODEL, w=8),
            rl.explained_variance(MODEL, w=8),
        ],
    )


def _hyperparameter_search() -> Row:
    return Row(
        "Hyperparameter Search",
        [
            hpo.trials_by_state(MODEL, w=8),
            hpo.best_and_latest_objective(MODEL, w=8),
            hpo.epochs_by_trial_end(MODEL, w=8),
            hpo.trial_in_progress(MODEL, w=6),
            hpo.trial_epoch(MODEL, w=6),
            hpo.trial_loss(MODEL, w=12),
        ],
    )


def _checkpoints() -> Row:
    return Row(
        "Checkpoints",
        [
            checkpoint.saves(MODEL, w=6),
            checkpoint.failures(MODEL, w=6),
            checkpoint.save_duration(MODEL, (0.5, 0.95), "Median and 95th percentile checkpoint save time.", w=6),
            checkpoint.size(MODEL, w=6),
            checkpoint.since_last_good(MODEL, w=12),
            checkpoint.last_good_step(MODEL, w=12),
            checkpoint.rollbacks(MODEL, w=8),
            checkpoint.job_recoveries((MODEL, JOB_ID), w=8),
            checkpoint.job_lost_work((MODEL, JOB_ID), w=8),
        ],
    )


def _data_pipeline() -> Row:
    return Row("Data Pipeline", [data.batches_processed(MODEL, w=12), data.data_load_seconds(MODEL, w=12)])


def _errors() -> Row:
    return Row(
        "Errors",
        [
            errors.nan_detected(MODEL, w=6),
            errors.gradient_explosions(MODEL, w=6),
            errors.feature_engineering_errors(MODEL, w=6),
            errors.training_failures(MODEL, w=6),
        ],
    )


def _timing() -> Row:
    return Row(
        "Timing",
        [
            steps.iteration_seconds_histogram(MODEL, w=12),
            data.data_load_seconds_histogram(MODEL, w=12),
            training.job_duration(MODEL, w=12),
            training.jobs_by_status_over_time(w=12),
        ],
    )


def _steps_and_time() -> Row:
    job = (MODEL, JOB_ID)
    return Row(
        "Steps and Time",
        [
            steps.steps_per_second_by_rank(job, w=8),
            steps.seconds_since_last_step_by_rank(job, w=8),
            steps.ranks_reporting(job, w=8),
            steps.throughput(job, w=24),
        ],
    )


def _verdict(cfg: ObservabilityConfig) -> Row:
    one = (JOB_ID,)
    return Row(
        "Is the GPU Maxed Out?",
        [
            efficiency.verdict(cfg.thresholds, one),
            efficiency.mfu(one),
            efficiency.goodput_now_and_so_far(one),
            efficiency.gpu_busy(one),
            efficiency.time_by_phase(one),
            efficiency.mfu_and_goodput(one),
        ],
    )


def _distributed_ranks(cfg: ObservabilityConfig) -> Row:
    """The ranks of $job_id side by side: who computes slowest, who waits, whether the job hangs,
    what the collectives move; then every straggling rank of the fleet."""
    job = (MODEL, JOB_ID)
    return Row(
        "Distributed Ranks",
        [
            distributed.compute_per_step(job, w=8),
            distributed.collective_wait(job, w=8),
            distributed.straggler_excess(cfg, job, w=8),
            distributed.hang_status(cfg, job, w=6),
            distributed.ranks_table(job, w=18),
            distributed.bandwidth(job, w=8),
            distributed.collectives_per_second(job, w=8),
            distributed.communication_share(cfg, job, w=8),
            distributed.fleet_stragglers(cfg, (MODEL,), w=24),
        ],
    )


def _optimization() -> Row:
    # One job ($job_id), as the PyTorch integration reports it (`integrations.torch.watch`).
    job = (MODEL, JOB_ID)
    return Row(
        "Optimization",
        [
            learning.loss_per_step(job, w=24),
            steps.time_per_step(job, w=8),
            learning.learning_rate(job, w=8),
            learning.gradient_norm(job, w=8),
            learning.hyperparameters(MODEL, w=24),
        ],
    )


def build(cfg: ObservabilityConfig) -> dict[str, Any]:
    return assemble(
        DashboardSpec(
            uid=UID,
            title=TITLE,
            description="Per-fold view of training jobs: progress, GPUs, model quality, checkpoints, data, errors.",
            tags=("training", "gpu"),
            variables=[
                variables.prometheus_datasource(cfg.datasource_uids.prometheus),
                variables.label_values("model", "Model", catalog.TRAINING_ACTIVE_WORKERS.name, "model_type"),
                variables.label_values(
                    "fold", "Fold", promql.selector(catalog.TRAINING_FOLD_LOSS.name, (MODEL,)), "fold"
                ),
                # One job: the per-job rows follow it (Grafana starts on the first job). Every process
                # of every job exports its rank info, CPU-only jobs included.
                variables.label_values(
                    "job_id",
                    "Job",
                    promql.selector(catalog.TRAINING_RANK_INFO.name, (MODEL,)),
                    "job_id",
                    multi=False,
                    include_all=False,
                ),
                # No "All" default: Grafana starts on the first node (pick several, or all, by hand).
                variables.label_values(
                    "node", "GPU node", catalog.GPU_UTILIZATION_PERCENT.name, "node", include_all=False
                ),
                variables.interval(
                    "interval",
                    "Rate interval",
                    variables.rate_intervals(cfg.scrape_interval_seconds),
                    "Minimum query interval; `$__rate_interval` (every rate window here) grows with it.",
                ),
            ],
            rows=[
                _verdict(cfg),
                _active_jobs(),
                _training_progress(),
                _steps_and_time(),
                _distributed_ranks(cfg),
                _optimization(),
                _this_jobs_gpus(cfg),
                _gpu_resources(cfg),
                _model_quality(),
                _reinforcement_learning(),
                _hyperparameter_search(),
                _checkpoints(),
                _data_pipeline(),
                _errors(),
                _timing(),
            ],
            min_interval="$interval",
            refresh="30s",
            time_from="now-6h",
        )
    )
