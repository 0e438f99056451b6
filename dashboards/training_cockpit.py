"""Training cockpit: the per-fold view of training jobs.

For the ML engineer who runs the job: is my job progressing, are its GPUs busy, is the model
learning, are checkpoints good, where does its time go. Panels shared with other dashboards come
from the topic modules (`dashboards/panels/<topic>.py`).

Variables: `$model` (label `model_type`), `$fold`, `$job_id` (the job whose GPUs "This Job's
GPUs" shows), `$node` (GPUs) and `$interval`, the minimum query interval from which Grafana
derives `$__rate_interval` for every rate in the dashboard.
"""

from __future__ import annotations

from typing import Any

from dashboards import panels, training_workloads, variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import (
    BLUE,
    GREEN,
    RED,
    YELLOW,
    Common,
    Query,
    Thresholds,
    checkpoint,
    distributed,
    efficiency,
    gpm,
    gpu,
    training,
)
from dashboards.threshold_steps import gpu_memory_ratio_steps, gpu_utilization_steps, temperature_steps
from observability import alert_links, catalog, promql
from observability.config import ObservabilityConfig
from observability.rules import dashboard_recording as rec
from observability.rules import goodput, jobs
from observability.rules.model import RecordingRule
from observability.thresholds import Thresholds as AlertThresholds

UID = alert_links.TRAINING_COCKPIT_UID
TITLE = "Foxhunt Training Cockpit"

MODEL = promql.variable_matcher("model_type", "model")
FOLD = promql.variable_matcher("fold", "fold")
NODE = promql.variable_matcher("node", "node")
JOB_ID = promql.variable_matcher("job_id", "job_id")
JOB_LEGEND = "{{model_type}} {{job_id}}"
FOLD_LEGEND = "{{model_type}} {{job_id}} fold {{fold}}"
GPU_LEGEND = "{{node}} GPU {{gpu_id}}"
ERRORS = Thresholds(GREEN, ((1e-3, RED),))
# GPUs a per-GPU panel draws at most per target (topk / bottomk).
TOP = 5
# GPUs of one job "This Job's GPUs" draws at most (a job of up to two 8-GPU nodes is drawn whole).
JOB_GPUS = 16


def _sum_rate(metric: catalog.Metric, labels: tuple[str, ...], matchers: tuple[str, ...] = (MODEL,)) -> str:
    return promql.aggregate("sum", labels, promql.rate(metric, matchers))


def _quantiles(rule: RecordingRule, labels: tuple[str, ...]) -> list[Query]:
    legend = " ".join(f"{{{{{label}}}}}" for label in labels)
    return [
        Query(promql.recorded_quantile(q, rule.record, (MODEL,), labels), f"p{round(q * 100)} {legend}")
        for q in (0.5, 0.95)
    ]


def _active_jobs() -> Row:
    per_job = ("model_type", "job_id")
    folds_done = promql.aggregate("count", per_job, promql.gauge(catalog.TRAINING_FOLD_LOSS, (MODEL,)))
    folds_planned = promql.aggregate("max", per_job, promql.gauge(catalog.TRAINING_FOLDS_PLANNED, (MODEL,)))
    fold_progress = f"100 * {folds_done} / {folds_planned}"
    return Row(
        "Active Jobs",
        [
            panels.stat(
                Common("Active Workers", "Training workers running now, per model type.", "short", w=4),
                [
                    Query(
                        promql.aggregate(
                            "sum", ("model_type",), promql.gauge(catalog.TRAINING_ACTIVE_WORKERS, (MODEL,))
                        ),
                        "{{model_type}}",
                    )
                ],
            ),
            panels.bar_gauge(
                Common(
                    "Fold Progress",
                    "Folds that reported results, as a share of the folds the job plans.",
                    "percent",
                    w=8,
                    min=0,
                    max=100,
                    thresholds=Thresholds(BLUE, ((50, YELLOW), (100, GREEN))),
                ),
                [Query(fold_progress, JOB_LEGEND)],
            ),
            panels.timeseries(
                Common("Folds Completed per Hour", "Pace of fold completion per model type.", "short", w=12),
                [
                    Query(
                        f"3600 * {_sum_rate(catalog.TRAINING_FOLDS_COMPLETED_TOTAL, ('model_type',))}", "{{model_type}}"
                    )
                ],
            ),
            panels.timeseries(
                Common("Job Memory Used", "System memory used by each training job.", "bytes", w=12),
                [Query(promql.gauge(catalog.TRAINING_MEMORY_USED_BYTES, (MODEL,)), JOB_LEGEND)],
            ),
            panels.timeseries(
                Common("Job CPU Usage", "CPU used by each training job (100% is one core).", "percent", w=12, min=0),
                [Query(promql.gauge(catalog.TRAINING_CPU_USAGE_PERCENT, (MODEL,)), JOB_LEGEND)],
            ),
        ],
    )


def _training_progress() -> Row:
    return Row(
        "Training Progress",
        [
            panels.timeseries(
                Common(
                    "Epoch Loss and Validation Loss",
                    "Training loss (solid) and validation loss (dashed) of each job's latest epoch: there from the "
                    "first epoch, also for a job that dies in its first fold.",
                    "none",
                    w=12,
                ),
                [
                    Query(promql.gauge(catalog.TRAINING_LOSS, (MODEL,)), f"{JOB_LEGEND} loss"),
                    Query(promql.gauge(catalog.TRAINING_VALIDATION_LOSS, (MODEL,)), f"{JOB_LEGEND} validation"),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common(
                    "Best Loss per Fold",
                    "Best training loss (solid) and validation loss (dashed) of each finished fold.",
                    "none",
                    w=12,
                ),
                [
                    Query(promql.gauge(catalog.TRAINING_FOLD_LOSS, (MODEL, FOLD)), f"{FOLD_LEGEND} loss"),
                    Query(
                        promql.gauge(catalog.TRAINING_FOLD_VALIDATION_LOSS, (MODEL, FOLD)), f"{FOLD_LEGEND} validation"
                    ),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common("Batches per Second", "Data batches the training jobs consume per second.", "cps", w=12, min=0),
                [Query(_sum_rate(catalog.TRAINING_DATA_BATCHES_TOTAL, ("model_type",)), "{{model_type}}")],
            ),
            panels.timeseries(
                Common("Iteration Seconds", "Median and 95th percentile duration of one training iteration.", "s", w=8),
                [
                    Query(promql.selector(rule.record, (MODEL,)), f"p{q} {JOB_LEGEND}")
                    for q, rule in ((50, rec.ITERATION_SECONDS_P50), (95, rec.ITERATION_SECONDS_P95))
                ],
            ),
            panels.timeseries(
                Common("Fold Duration", "Wall time each fold took.", "s", w=8),
                [Query(promql.gauge(catalog.TRAINING_FOLD_DURATION_SECONDS, (MODEL, FOLD)), FOLD_LEGEND)],
            ),
            panels.timeseries(
                Common("Epochs per Fold", "Epochs completed within each fold.", "short", w=8),
                [Query(promql.gauge(catalog.TRAINING_FOLD_EPOCH, (MODEL, FOLD)), FOLD_LEGEND)],
            ),
        ],
    )


def _gpus(metric: catalog.Metric) -> str:
    return promql.gauge(metric, (NODE,))


def _busiest(metric: catalog.Metric, suffix: str = "") -> Query:
    return Query(f"topk({TOP}, {_gpus(metric)})", f"{GPU_LEGEND}{suffix}")


def _gpu_resources(th: AlertThresholds) -> Row:
    # At most TOP GPUs per target, whatever `$node` selects (8 GPUs for one node, 8,000 for all nodes);
    # `$node` starts on one node, so a default load reads 8 GPUs. Fleet-wide views of the same
    # gauges are on the ML Training Comprehensive and Infra cockpit dashboards (recorded series).
    return Row(
        "GPU Resources",
        [
            panels.timeseries(
                Common(
                    "GPU Utilization",
                    f"Share of time a kernel ran: the {TOP} busiest (solid) and {TOP} idlest (dashed) of the "
                    "selected GPUs.",
                    "percent",
                    w=12,
                    min=0,
                    max=100,
                ),
                [
                    _busiest(catalog.GPU_UTILIZATION_PERCENT),
                    Query(f"bottomk({TOP}, {_gpus(catalog.GPU_UTILIZATION_PERCENT)})", f"{GPU_LEGEND} idle"),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common(
                    "GPU Memory Used and Total",
                    f"Device memory used by the {TOP} fullest selected GPUs (solid) against the largest GPU's "
                    "total (dashed).",
                    "bytes",
                    w=12,
                    min=0,
                ),
                [
                    _busiest(catalog.GPU_MEMORY_USED_BYTES, " used"),
                    Query(promql.aggregate("max", (), _gpus(catalog.GPU_MEMORY_TOTAL_BYTES)), "total"),
                ],
                dashed_refs=("B",),
            ),
            gpu.temperature(
                th,
                f"Core temperature of the {TOP} hottest selected GPUs; throttling risk above "
                f"{th.gpu_temperature_high_celsius.short}.",
                [_busiest(catalog.GPU_TEMPERATURE_CELSIUS)],
                w=8,
            ),
            panels.timeseries(
                Common(
                    "GPU Power Draw",
                    f"Power drawn by the {TOP} hungriest selected GPUs (solid) against the highest enforced limit "
                    "(dashed).",
                    "watt",
                    w=8,
                    min=0,
                ),
                [
                    _busiest(catalog.GPU_POWER_WATTS, " draw"),
                    Query(promql.aggregate("max", (), _gpus(catalog.GPU_POWER_LIMIT_WATTS)), "limit"),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common(
                    "GPU Memory Bandwidth Utilization",
                    f"Share of time device memory was read or written, on the {TOP} busiest selected GPUs.",
                    "percent",
                    w=8,
                    min=0,
                    max=100,
                ),
                [_busiest(catalog.GPU_MEMORY_UTILIZATION_PERCENT)],
            ),
            _true_utilization(),
        ],
    )


def _true_utilization() -> panels.PanelBuilder:
    # Means over the selected GPUs that report GPM (Hopper and newer), NVML's figure over the same
    # GPUs: one series per target whatever `$node` selects.
    def mean(metric: catalog.Metric) -> str:
        return promql.aggregate("avg", (), _gpus(metric))

    nvml_where_gpm = promql.aggregate(
        "avg", (), f"{_gpus(catalog.GPU_UTILIZATION_PERCENT)} and {_gpus(catalog.GPU_SM_ACTIVE_PERCENT)}"
    )
    return gpm.true_utilization(
        "NVML utilization (a kernel was running, dashed) against what the selected GPUs really did: SM "
        "activity, tensor-core activity and DRAM bandwidth (GPM, Hopper and newer; GPUs without GPM are "
        "left out). A GPU at 100% utilization with low SM activity runs small kernels or waits.",
        fleet=(
            nvml_where_gpm,
            mean(catalog.GPU_SM_ACTIVE_PERCENT),
            mean(catalog.GPU_TENSOR_ACTIVE_PERCENT),
            mean(catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT),
        ),
        job=(JOB_ID,),  # the GPUs job $job_id holds
        job_legend="{{job_id}}",
    )


def currency_unit(cfg: ObservabilityConfig) -> str:
    """Grafana unit of the cost estimates: the stack's currency code after the number."""
    return f"suffix: {cfg.currency}"


def _this_jobs_gpus(cfg: ObservabilityConfig) -> Row:
    # The job's GPUs only, from the recorded held-GPU series (`jobs.py`): a job's GPUs, not a node's,
    # so two 1-GPU jobs on one node are two different views.
    th = cfg.thresholds
    low, high = th.gpu_utilization_low_percent.short, th.gpu_utilization_high_percent.short

    def held(title: str, description: str, unit: str, rule: RecordingRule, **extra: Any) -> panels.PanelBuilder:
        return panels.timeseries(
            Common(title, f"{description} Each GPU job $job_id holds (up to {JOB_GPUS}).", unit, w=6, **extra),
            [Query(f"topk({JOB_GPUS}, {promql.selector(rule.record, (JOB_ID,))})", GPU_LEGEND)],
        )

    def so_far(title: str, description: str, unit: str, record: str) -> panels.PanelBuilder:
        return panels.stat(
            Common(title, description, unit, w=4, min=0),
            [
                Query(
                    promql.aggregate("sum", ("job_id",), promql.selector(record, (JOB_ID,))), "{{job_id}}", instant=True
                )
            ],
        )

    estimate = (
        "An estimate, counted from when Prometheus first recorded the job: the stack's prices "
        "(gpuHourlyCost by GPU model, energyPricePerKWh), not an invoice."
    )
    return Row(
        "This Job's GPUs",
        [
            held(
                "Job GPU Utilization",
                f"Share of time a kernel ran, per GPU; red below {low} or above {high}, the thresholds the job's "
                "mean is alerted at (GPUUtilizationLow, GPUUtilizationCritical).",
                "percent",
                jobs.HELD_UTILIZATION,
                min=0,
                max=100,
                thresholds=gpu_utilization_steps(th),
            ),
            held(
                "Job GPU Memory Used",
                f"Share of device memory in use, per GPU; yellow from {th.gpu_memory_high_ratio.short} "
                f"(GPUMemoryUsageHigh), red from {th.gpu_memory_exhausted_ratio.short} (GPUMemoryExhausted).",
                "percentunit",
                jobs.HELD_MEMORY_RATIO,
                min=0,
                max=1,
                thresholds=gpu_memory_ratio_steps(th),
            ),
            held("Job GPU Power", "Power draw.", "watt", jobs.HELD_POWER, min=0),
            held(
                "Job GPU Temperature",
                f"Core temperature; throttling risk above {th.gpu_temperature_high_celsius.short}.",
                "celsius",
                jobs.HELD_TEMPERATURE,
                thresholds=temperature_steps(th),
            ),
            so_far("GPUs Held", "GPUs the job holds now.", "short", jobs.JOB_GPUS.record),
            so_far(
                "GPU-Hours So Far",
                "GPUs held times the time held, since the job was first recorded.",
                "h",
                jobs.JOB_GPU_HOURS.record,
            ),
            so_far(
                "Energy So Far",
                "Energy the job's GPUs consumed (NVML energy counters) since the job was first recorded.",
                "kwatth",
                jobs.JOB_KWH.record,
            ),
            so_far(
                f"Estimated Cost So Far ({cfg.currency})",
                f"GPU-hours at their price plus energy. {estimate}",
                currency_unit(cfg),
                jobs.JOB_COST,
            ),
            so_far(
                f"Badput Cost So Far ({cfg.currency})",
                "The share of the estimated cost spent outside productive training steps (waiting for data, "
                f"checkpoints, collectives, evaluation, start-up, redone work, idle). {estimate}",
                currency_unit(cfg),
                goodput.BADPUT_COST,
            ),
            so_far(
                f"Checkpoint Storage Cost ({cfg.currency})",
                f"Checkpoint bytes the job has saved, each kept {cfg.checkpoint_retention_days:g} days at "
                f"{cfg.checkpoint_storage_price_per_gb_month:g} {cfg.currency} per GB-month (stack settings "
                "checkpointStoragePricePerGBMonth, checkpointRetentionDays): an estimate, not an invoice.",
                currency_unit(cfg),
                goodput.CHECKPOINT_STORAGE_COST,
            ),
        ],
    )


def _model_quality() -> Row:
    def quality(title: str, metric: catalog.Metric) -> panels.PanelBuilder:
        return panels.timeseries(
            Common(title, f"{metric.help} Per job.", "percentunit", w=6, min=0, max=1),
            [Query(promql.gauge(metric, (MODEL,)), JOB_LEGEND)],
        )

    return Row(
        "Model Quality",
        [
            quality("Accuracy", catalog.MODEL_ACCURACY),
            quality("F1 Score", catalog.MODEL_F1_SCORE),
            quality("Precision", catalog.MODEL_PRECISION),
            quality("Recall", catalog.MODEL_RECALL),
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
            checkpoint.rollbacks(MODEL, w=24),
        ],
    )


def _data_pipeline() -> Row:
    return Row(
        "Data Pipeline",
        [
            panels.timeseries(
                Common("Batches Processed", "Data batches processed in each rate interval.", "short", w=12, min=0),
                [
                    Query(
                        promql.aggregate(
                            "sum", ("model_type",), promql.increase(catalog.TRAINING_DATA_BATCHES_TOTAL, (MODEL,))
                        ),
                        "{{model_type}}",
                    )
                ],
                bars=True,
                stacked=True,
                fill_opacity=60,
            ),
            panels.timeseries(
                Common("Data Load Seconds", "Median and 95th percentile time to load a batch.", "s", w=12),
                _quantiles(rec.TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M, ("model_type",)),
            ),
        ],
    )


def _errors() -> Row:
    def errors(title: str, description: str, metric: catalog.Metric, labels: tuple[str, ...]) -> panels.PanelBuilder:
        legend = " ".join(f"{{{{{label}}}}}" for label in labels)
        return panels.timeseries(
            Common(title, description, "cps", w=6, min=0, thresholds=ERRORS),
            [Query(_sum_rate(metric, labels), legend)],
            threshold_style=panels.ThresholdStyle.AREA,
        )

    return Row(
        "Errors",
        [
            errors(
                "NaN Detected",
                "Non-finite values (NaN, infinity) detected per second, by tensor type.",
                catalog.TRAINING_NAN_COUNT,
                ("model_type", "tensor_type"),
            ),
            errors(
                "Gradient Explosions",
                "Gradient explosion events per second.",
                catalog.TRAINING_GRADIENT_EXPLOSION_TOTAL,
                ("model_type",),
            ),
            errors(
                "Feature Engineering Errors",
                "Feature engineering errors per second, by error type.",
                catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
                ("model_type", "error_type"),
            ),
            errors(
                "Training Failures",
                "Training jobs that ended with an error, per second, by error type.",
                catalog.TRAINING_FAILURES_TOTAL,
                ("model_type", "error_type"),
            ),
        ],
    )


def _timing() -> Row:
    def histogram(title: str, description: str, metric: catalog.Metric, exemplar: bool = False) -> panels.PanelBuilder:
        return panels.heatmap(
            Common(title, description, "s", w=12),
            [Query(promql.bucket_increase(metric, (MODEL,)), "{{le}}", format="heatmap", exemplar=exemplar)],
        )

    job_duration = rec.TRAINING_JOB_DURATION_SECONDS_BUCKET_RATE1H
    # Finished jobs: end - start; running ones: now - start.
    per_job = ("model_type", "job_id")
    started = promql.aggregate("max", per_job, promql.gauge(catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS, (MODEL,)))
    ended = promql.aggregate("max", per_job, promql.gauge(catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS, (MODEL,)))
    job_elapsed = f"({ended} - {started})\nor\n(time() - {started})"
    return Row(
        "Timing",
        [
            histogram(
                "Iteration Seconds Histogram",
                "Distribution of training iteration durations over time; an exemplar opens the trace of "
                "the iteration it was recorded in.",
                catalog.TRAINING_ITERATION_SECONDS,
                exemplar=True,
            ),
            histogram(
                "Data Load Seconds Histogram",
                "Distribution of batch loading durations over time.",
                catalog.TRAINING_DATA_LOADING_SECONDS,
            ),
            panels.timeseries(
                Common(
                    "Training Job Duration",
                    "How long each job has run (solid; a finished job's line holds its duration until its pod "
                    "is gone) and the median and 95th percentile duration of the jobs that ended in the last "
                    "hour, per model type (dashed).",
                    "s",
                    w=12,
                    min=0,
                ),
                [
                    Query(job_elapsed, JOB_LEGEND),
                    *(
                        Query(
                            promql.recorded_quantile(q, job_duration.record, (MODEL,), ("model_type",)),
                            f"p{round(q * 100)} {{{{model_type}}}} ended",
                        )
                        for q in (0.5, 0.95)
                    ),
                ],
                dashed_refs=("B", "C"),
            ),
            training.jobs_by_status_over_time(w=12),
        ],
    )


def _steps_and_time() -> Row:
    per_rank = ("model_type", "job_id", "rank")
    job = (MODEL, JOB_ID)
    rank_legend = "{{job_id}} rank {{rank}}"
    return Row(
        "Steps and Time",
        [
            panels.timeseries(
                Common(
                    "Steps per Second by Rank",
                    "Optimizer steps each rank of $job_id completes per second.",
                    "short",
                    w=8,
                    min=0,
                ),
                [Query(promql.aggregate("sum", per_rank, promql.rate(catalog.TRAINING_STEPS_TOTAL, job)), rank_legend)],
            ),
            panels.timeseries(
                Common(
                    "Seconds Since Last Step by Rank",
                    "How long ago each rank of $job_id completed its latest step: a rank that stops advancing climbs.",
                    "s",
                    w=8,
                    min=0,
                ),
                [Query(f"time() - {promql.gauge(catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS, job)}", rank_legend)],
            ),
            panels.stat(
                Common(
                    "Ranks Reporting", "Processes of $job_id that report, out of the job's world size.", "short", w=8
                ),
                [
                    Query(
                        promql.aggregate(
                            "count", ("job_id", "world_size"), promql.gauge(catalog.TRAINING_RANK_INFO, job)
                        ),
                        "{{job_id}} of {{world_size}}",
                    )
                ],
            ),
            panels.timeseries(
                Common(
                    "Throughput",
                    "Samples and tokens per second of $job_id, all ranks together.",
                    "short",
                    w=24,
                    min=0,
                ),
                [
                    Query(
                        promql.aggregate("sum", ("job_id",), promql.rate(catalog.TRAINING_SAMPLES_TOTAL, job)),
                        "{{job_id}} samples/s",
                    ),
                    Query(
                        promql.aggregate("sum", ("job_id",), promql.rate(catalog.TRAINING_TOKENS_TOTAL, job)),
                        "{{job_id}} tokens/s",
                    ),
                ],
            ),
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
    per_job = ("model_type", "job_id")
    step_phases = (*job, 'phase=~"data_wait|compute"')
    phase_seconds = promql.rate(catalog.TRAINING_PHASE_SECONDS_TOTAL, step_phases)
    per_step = (
        f"{promql.aggregate('sum', (*per_job, 'phase'), phase_seconds)}\n/ ignoring(phase) group_left\n"
        f"{promql.aggregate('sum', per_job, promql.rate(catalog.TRAINING_STEPS_TOTAL, job))}"
    )
    return Row(
        "Optimization",
        [
            panels.timeseries(
                Common(
                    "Loss per Step",
                    "Mean training loss of $job_id over the steps between two checks of the PyTorch integration "
                    "(per epoch: Epoch Loss and Validation Loss).",
                    "none",
                    w=24,
                ),
                [Query(promql.gauge(catalog.TRAINING_STEP_LOSS, job), "{{job_id}} step loss")],
            ),
            panels.timeseries(
                Common(
                    "Time per Step: Data Wait and Compute",
                    "Seconds each optimizer step of $job_id waited for data (the loader's next()) and computed, "
                    "per rank on average: a data wait near the compute time means the input pipeline is the "
                    "bottleneck.",
                    "s",
                    w=8,
                    min=0,
                ),
                [Query(per_step, "{{job_id}} {{phase}}")],
                stacked=True,
            ),
            panels.timeseries(
                Common(
                    "Learning Rate",
                    "Learning rate of each optimizer parameter group of $job_id.",
                    "none",
                    w=8,
                    min=0,
                ),
                [Query(promql.gauge(catalog.TRAINING_LEARNING_RATE, job), "{{job_id}} {{param_group}}")],
            ),
            panels.timeseries(
                Common(
                    "Gradient Norm",
                    "Global L2 norm of $job_id's gradients at each check: spikes precede divergence, a collapse "
                    "to zero means vanishing gradients.",
                    "none",
                    w=8,
                    min=0,
                ),
                [Query(promql.gauge(catalog.TRAINING_GRADIENT_NORM, job), "{{job_id}}")],
            ),
            panels.prometheus_table(
                Common(
                    "Hyperparameters",
                    "Batch size, optimizer, precision and learning-rate schedule of the jobs: compare throughput "
                    "and loss across them.",
                    "none",
                    w=24,
                ),
                [Query(promql.gauge(catalog.TRAINING_HYPERPARAMETERS_INFO, (MODEL,)), instant=True, format="table")],
                hidden_columns=("Value", "__name__", "instance", "job", "pod", "service"),
            ),
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
                _gpu_resources(cfg.thresholds),
                _model_quality(),
                training_workloads.reinforcement_learning(),
                training_workloads.hyperparameter_search(),
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
