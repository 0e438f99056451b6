"""ML Training Comprehensive: the platform's main training dashboard, with its thresholds and colours.

For the ML platform team and whoever watches the whole training fleet: every job's status, speed
and quality, fleet GPU figures (recorded medians and extremes), checkpoints and the data pipeline,
with the colours the monitoring report specifies. Panels shared with other dashboards come from
the topic modules (`dashboards/panels/<topic>.py`).

`$model_type` (multi-select, include all) and `$job_id` (single select), refresh 10 s, last
hour by default, table legends with the last non-null and the minimum value.
"""

from __future__ import annotations

from typing import Any

from dashboards import panels, variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import (
    BLUE,
    GREEN,
    JOB_LEGEND,
    RED,
    YELLOW,
    ColourSteps,
    Common,
    Query,
    checkpoint,
    efficiency,
    gpm,
    gpu,
    training,
)
from dashboards.panels.gpu import GPU_LEGEND
from dashboards.threshold_steps import (
    GOOD_TRAINING_SPEED,
    gpu_memory_steps,
    gpu_utilization_steps,
    temperature_steps,
    training_speed_steps,
)
from observability import catalog, promql
from observability.config import ObservabilityConfig
from observability.rules import dashboard_recording as rec
from observability.rules import jobs
from observability.thresholds import Thresholds

UID = "ml-training-comprehensive"
TITLE = "ML Training Comprehensive"

MODEL = promql.variable_matcher("model_type", "model_type")
JOB = promql.variable_matcher("job_id", "job_id")
# GPUs a per-GPU panel draws at most per target (the recorded topk / bottomk lists).
TOP = rec.GPU_EXTREMES

# The colours the platform's monitoring report specifies. Steps that show an alert's threshold are
# derived from it (dashboards/threshold_steps.py).
NAN_RED_ABOVE_ZERO = ColourSteps(GREEN, ((1, RED),))  # integer counts (ceil), so "1" is "above 0"
PROGRESS = ColourSteps(BLUE, ((50, YELLOW), (100, GREEN)))  # blue -> yellow -> green
ACCURACY = ColourSteps(RED, ((0.85, YELLOW), (0.90, GREEN)))  # red <0.85, yellow 0.85-0.90, green >0.90
FAILURES_RED_ABOVE_ZERO = ColourSteps(GREEN, ((1, RED),))
GPU_ERRORS = ColourSteps(GREEN, ((0.01, RED),))  # red above 0.01 errors/s


def _job(metric: catalog.Metric) -> str:
    return promql.gauge(metric, (MODEL, JOB))


def _high_level_status(th: Thresholds) -> Row:
    nan_count = f"ceil({promql.aggregate('sum', (), promql.increase(catalog.TRAINING_NAN_COUNT, (MODEL, JOB)))})"
    return Row(
        "High-Level Status",
        [
            training.jobs_by_status_now(w=6),
            panels.gauge(
                Common(
                    "Training Speed",
                    f"Epochs per second; below {th.training_slowdown_epochs_per_second.promql} is the TrainingSlowdown "
                    f"warning, {max(GOOD_TRAINING_SPEED, th.training_slowdown_epochs_per_second.value):g} is good.",
                    "none",
                    w=6,
                    min=0,
                    max=1,
                    thresholds=training_speed_steps(th),
                    decimals=2,
                ),
                [Query(_job(catalog.TRAINING_EPOCHS_PER_SECOND), JOB_LEGEND)],
            ),
            panels.stat(
                Common(
                    "NaN Detection Count",
                    "CRITICAL: NaN values detected in the selected jobs (most in one rate interval of the range); "
                    "red as soon as any appears.",
                    "short",
                    w=6,
                    thresholds=NAN_RED_ABOVE_ZERO,
                ),
                [Query(nan_count, "NaN")],
                calcs=("max",),
                background=True,
            ),
            panels.timeseries(
                Common("Training Loss Curves", "Mean training loss of every model type, overlaid.", "none", w=6),
                [
                    Query(
                        promql.aggregate("avg", ("model_type",), promql.gauge(catalog.TRAINING_LOSS, (MODEL,))),
                        "{{model_type}}",
                    )
                ],
            ),
        ],
    )


def _loss_monitoring() -> Row:
    return Row(
        "Loss Monitoring",
        [
            panels.timeseries(
                Common(
                    "Training Loss Curves",
                    "Training loss of every job of the selected model types (MAMBA-2, DQN, PPO, TFT).",
                    "none",
                    w=12,
                    h=9,
                ),
                [Query(promql.gauge(catalog.TRAINING_LOSS, (MODEL,)), JOB_LEGEND)],
            ),
            panels.timeseries(
                Common(
                    "Validation Loss Curves",
                    "Validation loss (solid) against training loss (dashed): a widening gap means overfitting.",
                    "none",
                    w=12,
                    h=9,
                ),
                [
                    Query(_job(catalog.TRAINING_VALIDATION_LOSS), f"{JOB_LEGEND} validation"),
                    Query(_job(catalog.TRAINING_LOSS), f"{JOB_LEGEND} training"),
                ],
                dashed_refs=("B",),
            ),
        ],
    )


def _gpu_monitoring(th: Thresholds) -> Row:
    low, high = th.gpu_utilization_low_percent.short, th.gpu_utilization_high_percent.short
    green = gpu_utilization_steps(th).steps[1][0]
    # Per GPU, then only the fullest TOP of them (an instant query: one pass over the 8,000 GPUs).
    memory = f"100 * {promql.gauge(catalog.GPU_MEMORY_USED_BYTES)} / {promql.gauge(catalog.GPU_MEMORY_TOTAL_BYTES)}"
    return Row(
        "GPU Monitoring",
        [
            panels.timeseries(
                Common(
                    "GPU Utilization Timeline",
                    f"GPU utilization: fleet median, the {TOP} busiest and the {TOP} idlest GPUs; red below {low} "
                    f"(waste) and above {high} (bottleneck), green from {green:g}% to {high}.",
                    "percent",
                    w=12,
                    min=0,
                    max=100,
                    thresholds=gpu_utilization_steps(th),
                ),
                [
                    Query(rec.GPU_UTILIZATION_P50.record, "fleet median"),
                    Query(rec.GPU_UTILIZATION_TOP.record, GPU_LEGEND),
                    Query(rec.GPU_UTILIZATION_BOTTOM.record, f"{GPU_LEGEND} idle"),
                ],
                fill_opacity=20,
                threshold_style=panels.ThresholdStyle.LINE_AND_AREA,
            ),
            panels.stat(
                Common(
                    "GPU Memory Usage",
                    f"Device memory in use on the {TOP} fullest GPUs now; critical (red) at "
                    f"{th.gpu_memory_exhausted_ratio.short}.",
                    "percent",
                    w=12,
                    min=0,
                    max=100,
                    thresholds=gpu_memory_steps(th),
                ),
                [Query(f"topk({TOP}, {memory})", GPU_LEGEND, instant=True)],
                background=True,
            ),
            gpm.true_utilization(
                "Fleet medians over the GPUs that report GPM (Hopper and newer): NVML utilization (a kernel "
                "was running, dashed) against SM activity, tensor-core activity and DRAM bandwidth. The gap "
                "is busyness NVML's figure hides.",
                fleet=(
                    rec.GPU_UTILIZATION_P50_WHERE_GPM.record,
                    rec.GPU_SM_ACTIVE_P50.record,
                    rec.GPU_TENSOR_ACTIVE_P50.record,
                    rec.GPU_DRAM_BANDWIDTH_P50.record,
                ),
                job=(MODEL, JOB),  # the selected job's GPUs (recorded per job)
                job_legend="job",
            ),
        ],
    )


def _training_progress() -> Row:
    return Row(
        "Training Progress",
        [
            panels.gauge(
                Common(
                    "Training Progress Gauge",
                    "Completion of each selected job, 0 to 100%.",
                    "percent",
                    w=8,
                    min=0,
                    max=100,
                    thresholds=PROGRESS,
                ),
                [Query(_job(catalog.TRAINING_PROGRESS_PERCENT), JOB_LEGEND)],
            ),
            panels.stat(
                Common("Current Epoch", "Epoch each selected job is training.", "none", w=8, decimals=0),
                [Query(_job(catalog.TRAINING_CURRENT_EPOCH), JOB_LEGEND)],
            ),
            panels.gauge(
                Common(
                    "Model Accuracy Gauge",
                    "Validation accuracy: red below 0.85, yellow to 0.90, green above.",
                    "percentunit",
                    w=8,
                    min=0,
                    max=1,
                    thresholds=ACCURACY,
                ),
                [Query(_job(catalog.MODEL_ACCURACY), JOB_LEGEND)],
            ),
        ],
    )


def _performance(th: Thresholds) -> Row:
    steps = temperature_steps(th)
    return Row(
        "Performance Metrics",
        [
            gpu.temperature(
                th,
                f"GPU temperature, fleet median and the {TOP} hottest GPUs: green below {steps.steps[0][0]:g} °C, "
                f"yellow to {th.gpu_temperature_high_celsius.short}, red above.",
                [
                    Query(rec.GPU_TEMPERATURE_P50.record, "fleet median"),
                    Query(rec.GPU_TEMPERATURE_TOP.record, GPU_LEGEND),
                ],
                w=12,
            ),
            panels.timeseries(
                Common("Training Iteration Duration", "95th percentile duration of a training iteration.", "s", w=12),
                [Query(promql.selector(rec.ITERATION_SECONDS_P95.record, (MODEL, JOB)), f"p95 {JOB_LEGEND}")],
            ),
        ],
    )


def _checkpoints() -> Row:
    return Row(
        "Checkpoint Management",
        [
            checkpoint.saves_and_failures((MODEL, JOB), w=12),
            checkpoint.save_duration(MODEL, (0.95,), "95th percentile checkpoint save time.", w=12),
        ],
    )


def _advanced() -> Row:
    return Row(
        "Advanced Metrics",
        [
            panels.timeseries(
                Common(
                    "Model Convergence Rate",
                    "Change of the training loss per epoch; negative means improving.",
                    "none",
                    w=12,
                ),
                [Query(_job(catalog.TRAINING_CONVERGENCE_RATE), JOB_LEGEND)],
            ),
            panels.timeseries(
                Common("Data Loading Performance", "95th percentile time to load a batch.", "s", w=12),
                [
                    Query(
                        promql.recorded_quantile(
                            0.95, rec.TRAINING_DATA_LOADING_SECONDS_BUCKET_RATE5M.record, (MODEL,), ("model_type",)
                        ),
                        "p95 {{model_type}}",
                    )
                ],
            ),
        ],
    )


def _error_tracking() -> Row:
    failures = promql.aggregate("sum", ("error_type",), promql.increase(catalog.TRAINING_FAILURES_TOTAL, (MODEL,)))
    return Row(
        "Error Tracking",
        [
            panels.stat(
                Common(
                    "Training Failures by Type",
                    "Training failures by error type (most in one rate interval of the range); red if any.",
                    "short",
                    w=12,
                    thresholds=FAILURES_RED_ABOVE_ZERO,
                ),
                [Query(f"ceil({failures})", "{{error_type}}")],
                calcs=("max",),
                background=True,
            ),
            panels.stat(
                Common(
                    "GPU Errors",
                    "CRITICAL: GPU hardware errors per second; red above 0.01 errors/s.",
                    "cps",
                    w=12,
                    thresholds=GPU_ERRORS,
                    decimals=3,
                ),
                [Query(rec.GPU_ERRORS_RATE.record, "{{error_type}}")],
                calcs=("max",),
                background=True,
            ),
        ],
    )


def _cost_and_energy(cfg: ObservabilityConfig) -> Row:
    unit = f"suffix: {cfg.currency}"
    return Row(
        "GPU Cost and Energy",
        [
            panels.bar_gauge(
                Common(
                    "GPU cost per model type (24 h)",
                    f"Estimated cost ({cfg.currency}) of the GPUs each model type's jobs held over the last 24 hours: "
                    "GPU-hours at the stack's price per GPU model (gpuHourlyCost) plus their energy at "
                    "energyPricePerKWh. An estimate from the stack's prices, not an invoice.",
                    unit,
                    w=12,
                    min=0,
                ),
                [Query(promql.selector(jobs.MODEL_COST_24H, (MODEL,)), "{{model_type}}", instant=True)],
            ),
            panels.bar_gauge(
                Common(
                    "Energy per job",
                    "Energy (kWh) each job's GPUs have consumed since Prometheus first recorded the job (NVML energy "
                    "counters; GPUs that cannot report energy are missing).",
                    "kwatth",
                    w=12,
                    min=0,
                ),
                [Query(promql.selector(jobs.JOB_KWH.record, (MODEL,)), "{{model_type}} {{job_id}}", instant=True)],
            ),
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
                _high_level_status(cfg.thresholds),
                _loss_monitoring(),
                _gpu_monitoring(cfg.thresholds),
                _training_progress(),
                _performance(cfg.thresholds),
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
