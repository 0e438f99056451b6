"""Catalog integrity: the contract every other part of the project takes metric names from."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import MetricType, Producer

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# The metric names users' training code and dashboards already use: 32 distinct names, kept as
# they are (renaming one would break every query written against it).
REPORT_LISTED = {
    "ml_training_loss", "ml_training_validation_loss", "ml_training_current_epoch",
    "ml_training_progress_percent", "ml_training_epochs_per_second", "ml_training_iteration_seconds",
    "ml_training_convergence_rate", "ml_training_nan_count", "ml_training_gradient_explosion_total",
    "ml_training_failures_total", "ml_gpu_utilization_percent", "ml_gpu_memory_used_bytes",
    "ml_gpu_memory_total_bytes", "ml_gpu_temperature_celsius", "ml_gpu_power_watts", "ml_gpu_errors_total",
    "ml_checkpoint_saves_total", "ml_checkpoint_save_failures_total", "ml_checkpoint_save_duration_seconds",
    "ml_checkpoint_size_bytes", "ml_model_accuracy", "ml_model_f1_score", "ml_model_precision",
    "ml_model_recall", "ml_training_memory_used_bytes", "ml_training_cpu_usage_percent",
    "ml_training_active_workers", "ml_training_data_batches_total", "ml_training_data_loading_seconds",
    "ml_feature_engineering_errors_total", "ml_training_jobs_by_status", "ml_training_job_duration_seconds",
}  # fmt: skip


def test_names_are_unique_and_valid() -> None:
    names = [m.name for m in catalog.ALL_METRICS]
    assert len(names) == len(set(names))
    for name in names:
        assert METRIC_NAME.match(name), name
    series = [s for m in catalog.ALL_METRICS for s in m.series_names]
    assert len(series) == len(set(series)), "a histogram series collides with another family"


@pytest.mark.parametrize("metric", catalog.ALL_METRICS, ids=lambda m: m.name)
def test_metric_follows_conventions(metric: catalog.Metric) -> None:
    assert metric.labels, f"{metric.name} has an empty label set"
    assert len(set(metric.labels)) == len(metric.labels)
    for label in metric.labels:
        assert LABEL_NAME.match(label) and not label.startswith("__"), label
    assert metric.help.strip().endswith((".", ")")), f"{metric.name}: help must be a sentence"
    if metric.type is MetricType.COUNTER and not metric.name.endswith("_total"):
        # The only exception: a name users' binaries already emit, and the help says so.
        assert metric.name in catalog.REPORT_METRIC_NAMES, metric.name
        assert "Name kept" in metric.help
    if metric.type is not MetricType.COUNTER:
        assert not metric.name.endswith("_total"), f"{metric.name}: only counters end in _total"
    if metric.type is MetricType.HISTOGRAM:
        assert metric.buckets == tuple(sorted(metric.buckets)) and metric.buckets
        assert "le" not in metric.labels
    else:
        assert not metric.buckets
    if metric.unit == "seconds" and metric.producer is not Producer.TEMPO_METRICS_GENERATOR:
        # (Tempo names its own span-latency histogram `traces_spanmetrics_latency`.)
        assert "_seconds" in metric.name
    if metric.unit == "bytes":  # a byte counter ends in `_bytes_total` (node_exporter's convention)
        assert metric.name.removesuffix("_total").endswith("_bytes")
    if metric.type is MetricType.INFO:
        assert metric.name.endswith("_info")


def test_every_metric_users_already_use_is_in_the_catalog() -> None:
    assert set(catalog.REPORT_METRIC_NAMES) == REPORT_LISTED
    for name in REPORT_LISTED:
        catalog.by_name(name)


def test_the_labels_users_already_use_are_kept() -> None:
    assert set(catalog.TRAINING_NAN_COUNT.labels) >= {"model_type", "job_id", "tensor_type"}
    assert "gpu_id" in catalog.GPU_ERRORS_TOTAL.labels and "error_type" in catalog.GPU_ERRORS_TOTAL.labels
    assert catalog.TRAINING_JOBS_BY_STATUS.labels == ("status",)
    assert "error_type" in catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.labels
    for metric in catalog.by_producer(Producer.GPU_POLLER):
        if metric.name.startswith("ml_gpu_") and not metric.name.startswith(("ml_gpu_poller", "ml_gpu_driver")):
            assert {"node", "gpu_id", "uuid", "gpu_name"} <= set(metric.labels), metric.name


def test_per_fold_view_and_alert_inputs_exist() -> None:
    fold = [m for m in catalog.ALL_METRICS if "fold" in m.labels]
    assert len(fold) >= 3
    for name in (
        "ml_inference_latency_seconds", "ml_model_loading_failures_total", "ml_model_cache_hits_total",
        "ml_model_cache_misses_total", "ml_model_drift_score", "ml_feature_distribution_distance",
        "ml_prediction_confidence", "ml_training_data_last_update_timestamp_seconds",
        "ml_feature_extraction_duration_seconds", "ml_s3_errors_total", "ml_model_storage_used_bytes",
    ):  # fmt: skip
        assert catalog.by_name(name).producer is Producer.ML_SERVICE
    assert catalog.by_producer(Producer.TEMPO_METRICS_GENERATOR)


def test_lookup_by_series_and_unknown_name() -> None:
    assert catalog.by_name("ml_training_iteration_seconds_bucket") is catalog.TRAINING_ITERATION_SECONDS
    with pytest.raises(KeyError, match="not in the catalog"):
        catalog.by_name("ml_no_such_metric")
    with pytest.raises(TypeError, match="not a histogram"):
        _ = catalog.TRAINING_LOSS.bucket


def test_catalog_imports_nothing_from_the_project() -> None:
    tree = ast.parse(Path(catalog.__file__).read_text())
    project_packages = {"infra", "observability", "dashboards", "poller", "policy", "examples", "bench"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & project_packages
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and (node.module or "").split(".")[0] not in project_packages
