"""Training cockpit (seed 000, component 4): the per-fold view of training jobs in 8 rows.

Variables: `$model` (label `model_type`), `$fold`, `$node` (GPUs) and `$interval`, the minimum
query interval from which Grafana derives `$__rate_interval` for every rate in the dashboard.
"""

from __future__ import annotations

from typing import Any

from dashboards import panels, promql, variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import BLUE, GREEN, RED, YELLOW, Common, Query, Thresholds
from dashboards.threshold_steps import temperature_steps
from observability import catalog
from observability.config import ObservabilityConfig
from observability.rules import dashboard_recording as rec
from observability.rules.model import RecordingRule
from observability.thresholds import Thresholds as AlertThresholds

UID = "foxhunt-training-cockpit"
TITLE = "Foxhunt Training Cockpit"

MODEL = promql.variable_matcher("model_type", "model")
FOLD = promql.variable_matcher("fold", "fold")
NODE = promql.variable_matcher("node", "node")
JOB_LEGEND = "{{model_type}} {{job_id}}"
FOLD_LEGEND = "{{model_type}} {{job_id}} fold {{fold}}"
GPU_LEGEND = "{{node}} GPU {{gpu_id}}"
ERRORS = Thresholds(GREEN, ((1e-3, RED),))
# GPUs a per-GPU panel draws at most per target (topk / bottomk).
TOP = 5


def _sum_rate(metric: catalog.Metric, labels: tuple[str, ...], matchers: tuple[str, ...] = (MODEL,)) -> str:
    return promql.by("sum", labels, promql.rate(metric, matchers))


def _quantiles(rule: RecordingRule, labels: tuple[str, ...]) -> list[Query]:
    legend = " ".join(f"{{{{{label}}}}}" for label in labels)
    return [
        Query(promql.recorded_quantile(q, rule.record, (MODEL,), labels), f"p{round(q * 100)} {legend}")
        for q in (0.5, 0.95)
    ]


def _active_jobs() -> Row:
    fold_progress = (
        f"100 * {promql.by('count', ('model_type', 'job_id'), promql.gauge(catalog.TRAINING_FOLD_LOSS, (MODEL,)))}"
        f" / {promql.by('max', ('model_type', 'job_id'), promql.gauge(catalog.TRAINING_FOLDS_PLANNED, (MODEL,)))}"
    )
    return Row(
        "Active Jobs",
        [
            panels.stat(
                Common("Active Workers", "Training workers running now, per model type.", "short", w=4),
                [
                    Query(
                        promql.by("sum", ("model_type",), promql.gauge(catalog.TRAINING_ACTIVE_WORKERS, (MODEL,))),
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
                    "Best training loss (solid) and validation loss (dashed) of each fold.",
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
                    Query(promql.by("max", (), _gpus(catalog.GPU_MEMORY_TOTAL_BYTES)), "total"),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common(
                    "GPU Temperature",
                    f"Core temperature of the {TOP} hottest selected GPUs; throttling risk above "
                    f"{th.gpu_temperature_high_celsius.short}.",
                    "celsius",
                    w=8,
                    thresholds=temperature_steps(th),
                ),
                [_busiest(catalog.GPU_TEMPERATURE_CELSIUS)],
                threshold_style=panels.ThresholdStyle.LINE,
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
                    Query(promql.by("max", (), _gpus(catalog.GPU_POWER_LIMIT_WATTS)), "limit"),
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
            panels.timeseries(
                Common("Checkpoint Saves", "Successful checkpoint saves per second.", "cps", w=6, min=0),
                [Query(_sum_rate(catalog.CHECKPOINT_SAVES_TOTAL, ("model_type",)), "{{model_type}}")],
            ),
            panels.timeseries(
                Common(
                    "Checkpoint Failures",
                    "Failed checkpoint saves per second, by error type.",
                    "cps",
                    w=6,
                    min=0,
                    thresholds=ERRORS,
                ),
                [
                    Query(
                        _sum_rate(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL, ("model_type", "error_type")),
                        "{{model_type}} {{error_type}}",
                    )
                ],
                colours_by_ref={"A": RED},
            ),
            panels.timeseries(
                Common("Checkpoint Save Duration", "Median and 95th percentile checkpoint save time.", "s", w=6),
                _quantiles(rec.CHECKPOINT_SAVE_DURATION_SECONDS_BUCKET_RATE5M, ("model_type",)),
            ),
            panels.timeseries(
                Common("Checkpoint Size", "Size of each job's latest checkpoint.", "bytes", w=6, min=0),
                [Query(promql.gauge(catalog.CHECKPOINT_SIZE_BYTES, (MODEL,)), JOB_LEGEND)],
            ),
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
                        promql.by(
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
                "NaN values detected per second, by tensor type (loss, gradient, activation).",
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
                "Training failures per second, by error type (nan, oom, timeout, config).",
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
                    "Median and 95th percentile duration of jobs that ended in the last hour.",
                    "s",
                    w=12,
                ),
                [
                    Query(
                        promql.recorded_quantile(q, job_duration.record, (MODEL,), ("model_type",)),
                        f"p{round(q * 100)} {{{{model_type}}}}",
                    )
                    for q in (0.5, 0.95)
                ],
            ),
            panels.timeseries(
                Common(
                    "Training Jobs by Status",
                    "Training jobs in each state (pending, running, completed, failed, ...).",
                    "short",
                    w=12,
                    min=0,
                ),
                [Query(promql.by("sum", ("status",), promql.gauge(catalog.TRAINING_JOBS_BY_STATUS)), "{{status}}")],
                stacked=True,
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
                _active_jobs(),
                _training_progress(),
                _gpu_resources(cfg.thresholds),
                _model_quality(),
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
