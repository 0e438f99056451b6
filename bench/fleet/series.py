"""Which series a fleet exposes: the GPU pollers', the training jobs', the ML service's and Tempo's.

Every series is a `SeriesSpec`: its full label set (target labels included, as Prometheus stores
it after a scrape) and the name of the value pattern that fills it (`values`). The GPU
series follow the poller's own tables (`poller.exported_metrics`), the training-job series are
whatever `foxhunt_trainer` exposes for a running job (read back from its `/metrics`
text), so the benchmark data cannot drift from what the producers really emit.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from bench.fleet.values import has_rare_error
from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.collectives import ALL_REDUCE, track_rank
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.hyperparameters import Hyperparameters
from foxhunt_trainer.remediation import Remediation, RemediationPolicy
from observability.config import ObservabilityConfig
from observability.scrape_config import JOB_NAME
from poller.exported_metrics import (
    ECC_TYPES,
    ERROR_TYPES,
    FAILURE_REASONS,
    GPU_COUNTERS,
    GPU_GAUGES,
    INTERCONNECT_COUNTERS,
    THROTTLE_REASONS,
)

GPU_NAME = "NVIDIA H100 80GB HBM3"
# The XID code of the GPUs that have errors in the fleet (79: the GPU has fallen off the bus).
FLEET_XID = 79
POLLER_PORT = 9400
TRAINER_PORT = 9094
MODEL_TYPES = ("dqn", "ppo", "tft", "mamba")
# The model types whose jobs expose reinforcement-learning series, and the one that runs a search.
RL_MODEL_TYPES = ("dqn", "ppo")
SEARCH_MODEL_TYPE = "tft"
FOLDS = 5


@dataclass(frozen=True)
class SeriesSpec:
    name: str
    labels: tuple[tuple[str, str], ...]
    pattern: str  # a key of `_fleet_values.PATTERNS`
    key: int  # selects one of the pattern's variants, stable per series

    def prefix(self) -> str:
        """`name{l1="v1",...}` as an OpenMetrics sample line starts."""
        body = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{body}}}" if body else self.name


@dataclass(frozen=True)
class HistogramSpec:
    """One histogram child: its buckets, `_sum` and `_count` share one variant of one pattern."""

    metric: catalog.Metric
    labels: tuple[tuple[str, str], ...]
    pattern: str
    key: int


def stable_key(*parts: object) -> int:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _target(namespace: str, pod: str, service: str, ip: str, port: int) -> tuple[tuple[str, str], ...]:
    return (
        ("job", JOB_NAME),
        ("instance", f"{ip}:{port}"),
        ("namespace", namespace),
        ("pod", pod),
        ("service", service),
    )


def node_name(index: int) -> str:
    return f"gpu-node-{index:04d}"


def _ip(index: int, subnet: int) -> str:
    return f"10.{subnet}.{index // 250}.{index % 250 + 1}"


# --- attribution: which job holds which GPUs ---------------------------------------------------------
# Training job i holds the GPUs of node i (all of them); every IDLE_JOB_EVERY-th job keeps them idle,
# the others keep them busy but below saturation. Every other GPU of the fleet is held by no job and
# keeps the fleet's own mix of idle, moderate and saturated GPUs.
IDLE_JOB_EVERY = 10


def gpu_uuid(node_index: int, gpu: int) -> str:
    return f"GPU-{node_index:08x}-{gpu:04x}-4a1e-9b2c-5d6e7f800000"


def job_is_idle(index: int) -> bool:
    return index % IDLE_JOB_EVERY == 0


def holder_utilization(job: int | None) -> str | None:
    """The utilization pattern of the GPUs job `job` holds (None: held by no job)."""
    if job is None:
        return None
    return "held:idle" if job_is_idle(job) else "held:busy"


# --- GPU pollers ---------------------------------------------------------------------------------
def poller_series(
    cfg: ObservabilityConfig, node_index: int, gpus: int, held: str | None = None
) -> Iterator[SeriesSpec]:
    """A node's poller series; `held` is the utilization pattern of a job holding its GPUs (`holder_utilization`)."""
    node = node_name(node_index)
    target = _target(
        "monitoring", f"gpu-poller-{node_index:04d}", cfg.gpu_poller_service, _ip(node_index, 0), POLLER_PORT
    )
    yield SeriesSpec(catalog.UP.name, target, "up", 0)
    node_labels = (*target, ("node", node))
    yield SeriesSpec(catalog.GPU_POLLER_NVML_UP.name, node_labels, "one", 0)
    yield SeriesSpec(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name, node_labels, "poll_seconds", node_index)
    yield SeriesSpec(catalog.GPU_POLLER_DEVICES.name, node_labels, f"const:{gpus}", 0)
    yield SeriesSpec(catalog.GPU_POLLER_DEVICES_ENUMERATED.name, node_labels, f"const:{gpus}", 0)
    for reason in FAILURE_REASONS:
        yield SeriesSpec(
            catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name, (*node_labels, ("reason", reason)), "zero", 0
        )
    driver = (("driver_version", "550.90.07"), ("nvml_version", "12.550.90.07"), ("cuda_driver_version", "12040"))
    yield SeriesSpec(catalog.GPU_DRIVER_INFO.name, (*node_labels, *driver), "one", 0)
    for gpu in range(gpus):
        gpu_labels = (
            *node_labels,
            ("gpu_id", str(gpu)),
            ("uuid", gpu_uuid(node_index, gpu)),
            ("gpu_name", GPU_NAME),
        )
        key = stable_key(node_index, gpu)
        for metric, attribute in GPU_GAUGES:
            pattern = f"gpu:{attribute}"
            if held is not None and metric is catalog.GPU_UTILIZATION_PERCENT:
                pattern = f"{pattern}:{held}"
            yield SeriesSpec(metric.name, gpu_labels, pattern, key)
        for metric, attribute in GPU_COUNTERS:
            yield SeriesSpec(metric.name, gpu_labels, f"gpu:{attribute}", key)
        for reason, _bit in THROTTLE_REASONS:
            yield SeriesSpec(
                catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, (*gpu_labels, ("reason", reason)), f"throttle:{reason}", key
            )
        for ecc_type, _attribute in ECC_TYPES:
            yield SeriesSpec(
                catalog.GPU_ECC_ERRORS_TOTAL.name, (*gpu_labels, ("ecc_type", ecc_type)), f"ecc:{ecc_type}", key
            )
        for metric, directions in INTERCONNECT_COUNTERS:  # GPM byte counters (the fleet is H100)
            for direction, attribute in directions:
                yield SeriesSpec(metric.name, (*gpu_labels, ("direction", direction)), f"gpu:{attribute}", key)
        for error_type in ERROR_TYPES:
            yield SeriesSpec(
                catalog.GPU_ERRORS_TOTAL.name, (*gpu_labels, ("error_type", error_type)), "rare_errors", key
            )
        # The poller creates a code's series on its first occurrence only: an XID series exists on
        # the few GPUs that have errors. It steps with their ml_gpu_errors_total series; it is 0
        # (not yet absent) before the step, so every series has every sample of the hour.
        if has_rare_error(key):
            xid_labels = (*gpu_labels, ("xid", str(FLEET_XID)))
            yield SeriesSpec(catalog.GPU_XID_ERRORS_TOTAL.name, xid_labels, "rare_errors", key)


# --- training jobs ---------------------------------------------------------------------------------
def job_id(index: int) -> str:
    return f"job-{index:04d}-{stable_key('job', index):08x}"


def _trainer_exposition(model_type: str, job: str, gpu_uuids: tuple[str, ...], node: str) -> str:
    """The `/metrics` text of a trainer running `job` on `node` after it has done a bit of everything."""
    metrics = TrainingMetrics()
    handle = metrics.start_job(model_type, job, folds_planned=FOLDS, workers=4, gpu_uuids=gpu_uuids)
    handle.record_training_iteration(1, 1.0, 1.1, 1.0)
    handle.record_training_iteration(2, 0.9, 1.0, 1.0)
    handle.record_data_load(0.5, batches=10)
    with handle.checkpoint("s3://checkpoints/step-2", step=2) as save:
        save.size_bytes = 500_000_000
    handle.set_model_quality(0.9, 0.88, 0.9, 0.86)
    handle.set_regression_quality(rmse=0.42, mae=0.31, r2=0.87)
    handle.set_resource_usage(4e9, 180.0)
    # Each GPU's device memory as the job's own allocator reports it (the default reads PyTorch's).
    handle.track_gpu_memory(lambda: dict.fromkeys(gpu_uuids, 8e9))
    handle.set_model_flops(5e13, "bf16")
    handle.set_model_flops(5e13, "bf16")
    handle.record_step(samples=64)
    handle.record_step_loss(0.9)
    handle.record_gradient_norm(1.5)
    handle.set_learning_rates({"0": 1e-3})
    handle.set_hyperparameters(Hyperparameters(64, "AdamW", "bf16", "LambdaLR"))
    # Remediation on, its rollback budget untouched (the budget is published when it is set up).
    Remediation(
        handle, RemediationPolicy(enabled=True, max_rollbacks=3), restore=lambda _: None, lower_lr=lambda _: None
    )
    collectives = track_rank(handle, node=node, gpu_uuids=gpu_uuids)
    collectives.launched(ALL_REDUCE)
    collectives.completed(ALL_REDUCE, 4_000_000)
    for fold in range(FOLDS):
        handle.record_fold(fold, 0.5, 0.6, 20, 600.0)
    if model_type in RL_MODEL_TYPES:  # the model-specific series of reinforcement learning
        handle.rl.set_exploration_rate(0.5)
        handle.rl.set_q_value(20.0)
        handle.rl.record_policy_update(
            entropy=0.6, value_loss=20.0, approx_kl=0.01, clip_fraction=0.1, explained_variance=0.8
        )
        handle.rl.record_episodes(10, mean_reward=100.0, mean_length=100.0)
    if model_type == SEARCH_MODEL_TYPE:  # a hyperparameter search: one study
        study = handle.study("search")
        study.set_trial_counts({"running": 1, "waiting": 2, "complete": 10, "pruned": 5, "failed": 1})
        study.set_best_value(0.2)
        study.record_trial_end("complete", 20, 0.3)
        study.record_trial_progress(17, 4, 0.5)
    return render_text(metrics.registry).decode()


def _job_pattern(name: str) -> str:
    return f"job:{name}"


def training_job_series(
    cfg: ObservabilityConfig, index: int, gpu_uuids: tuple[str, ...] = ()
) -> tuple[list[SeriesSpec], list[HistogramSpec]]:
    """The series one training job's pod exposes, with its target labels (and one
    `ml_training_job_gpu_info` series for each of `gpu_uuids`)."""
    model_type = MODEL_TYPES[index % len(MODEL_TYPES)]
    job = job_id(index)
    target = _target("training", f"train-{job}", cfg.training_job_service, _ip(index, 1), TRAINER_PORT)
    plain = [SeriesSpec(catalog.UP.name, target, "up", 0)]
    histograms: list[HistogramSpec] = []
    seen_histograms: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    key = stable_key("job", index)
    # The pod runs on the node of the GPUs it holds (job i holds node i's), and its per-rank placement
    # says so: the placement's `node` is what the fleet's targets hash to a shard.
    node = node_name(index)
    for family in text_string_to_metric_families(_trainer_exposition(model_type, job, gpu_uuids, node)):
        metric = catalog.by_name(family.name if family.type != "counter" else _counter_name(family.name))
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            full = (*target, *labels)
            if metric.type is catalog.MetricType.HISTOGRAM:
                if (metric.name, labels) not in seen_histograms:
                    seen_histograms.add((metric.name, labels))
                    histograms.append(HistogramSpec(metric, full, _job_pattern(metric.name), key))
                continue
            pattern = _job_pattern(metric.name)
            if metric.type is catalog.MetricType.INFO:
                pattern = "one"
            if metric in (catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS, catalog.CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS):
                pattern = "just_now"
            if metric is catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS:
                pattern = "started"
            if metric is catalog.TRAINING_PHASE_SECONDS_TOTAL:
                pattern = f"phase:{dict(labels)['phase']}"
            if metric is catalog.TRAINING_JOBS_BY_STATUS:
                pattern = f"status:{dict(labels)['status']}"
            named = dict(labels)
            extra = (
                named.get("tensor_type")
                or named.get("error_type")
                or named.get("fold")
                or named.get("uuid")
                or named.get("phase")
                or named.get("state")
                or named.get("collective")
                or ""
            )
            yield_key = stable_key(key, extra)
            plain.append(SeriesSpec(metric.name, full, pattern, yield_key))
    return plain, histograms


def training_worker_series(
    cfg: ObservabilityConfig, index: int, worker: int, gpu_uuids: tuple[str, ...]
) -> list[SeriesSpec]:
    """A further pod of multi-node job `index` (on another node): the GPUs it was given. The job's
    own series (loss, progress, ...) come from its first pod, where rank 0 runs."""
    model_type = MODEL_TYPES[index % len(MODEL_TYPES)]
    job = job_id(index)
    pod = f"train-{job}-worker-{worker}"
    target = _target("training", pod, cfg.training_job_service, _ip(worker, 3), TRAINER_PORT)
    info = catalog.TRAINING_JOB_GPU_INFO.name
    series = [SeriesSpec(catalog.UP.name, target, "up", 0)]
    for uuid in gpu_uuids:
        labels = (*target, ("job_id", job), ("model_type", model_type), ("uuid", uuid))
        series.append(SeriesSpec(info, labels, "one", 0))
    return series


def _counter_name(parsed_family: str) -> str:
    """prometheus-client's parser drops `_total` from counter families; find the catalog name."""
    for candidate in (parsed_family + "_total", parsed_family):
        try:
            return catalog.by_name(candidate).name
        except KeyError:
            continue
    raise KeyError(f"counter {parsed_family} is not in the catalog")


# --- the ML training service and Tempo's metrics generator --------------------------------------------
def service_series(cfg: ObservabilityConfig) -> tuple[list[SeriesSpec], list[HistogramSpec]]:
    target = _target("ml", "ml-training-service-0", cfg.training_service, "10.2.0.1", TRAINER_PORT)
    plain = [SeriesSpec(catalog.UP.name, target, "up", 0)]
    histograms: list[HistogramSpec] = []
    base = (*target[:-1],)  # the service's own `service` label is the target label
    service = (("service", cfg.training_service),)
    for i, model_type in enumerate(MODEL_TYPES):
        labels = (*base, ("model_type", model_type), *service)
        histograms.append(HistogramSpec(catalog.INFERENCE_LATENCY_SECONDS, labels, "inference_latency", i))
        histograms.append(HistogramSpec(catalog.PREDICTION_CONFIDENCE, labels, "confidence", i))
        histograms.append(HistogramSpec(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, labels, "feature_seconds", i))
        plain.append(SeriesSpec(catalog.MODEL_CACHE_HITS_TOTAL.name, labels, "rate:20", i))
        plain.append(SeriesSpec(catalog.MODEL_CACHE_MISSES_TOTAL.name, labels, "rate:2", i))
        plain.append(SeriesSpec(catalog.MODEL_DRIFT_SCORE.name, labels, "drift", i))
        plain.append(
            SeriesSpec(catalog.MODEL_LOADING_FAILURES_TOTAL.name, (*labels, ("error_type", "timeout")), "zero", 0)
        )
        for feature in ("price", "volume", "spread"):
            plain.append(
                SeriesSpec(
                    catalog.FEATURE_DISTRIBUTION_DISTANCE.name,
                    (*labels, ("feature", feature)),
                    "drift",
                    stable_key(i, feature),
                )
            )
    for operation in ("get", "put"):
        plain.append(
            SeriesSpec(
                catalog.S3_ERRORS_TOTAL.name,
                (*base, ("operation", operation), ("error_type", "timeout"), *service),
                "zero",
                0,
            )
        )
    for volume in ("models", "checkpoints"):
        labels = (*base, *service, ("volume", volume))
        plain.append(SeriesSpec(catalog.MODEL_STORAGE_USED_BYTES.name, labels, "storage_used", stable_key(volume)))
        plain.append(SeriesSpec(catalog.MODEL_STORAGE_CAPACITY_BYTES.name, labels, "const:2000000000000", 0))
    for dataset in ("market-ticks", "order-book"):
        plain.append(
            SeriesSpec(
                catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS.name,
                (*base, *service, ("dataset", dataset)),
                "data_updated",
                0,
            )
        )
    return plain, histograms


SPAN_NAMES = ("grpc.request", "db.query", "inference", "checkpoint.save")


def tempo_series(cfg: ObservabilityConfig) -> tuple[list[SeriesSpec], list[HistogramSpec]]:
    """Span metrics and service graphs as Tempo's metrics generator remote-writes them (no target)."""
    services = cfg.platform_services or (cfg.training_service, "api-gateway", "feature-store", "model-registry")
    plain: list[SeriesSpec] = []
    histograms: list[HistogramSpec] = []
    for service in services:
        for span_name in SPAN_NAMES:
            for status, pattern in (("STATUS_CODE_UNSET", "rate:5"), ("STATUS_CODE_ERROR", "rate:0.05")):
                labels = (
                    ("service", service),
                    ("span_name", span_name),
                    ("span_kind", "SPAN_KIND_SERVER"),
                    ("status_code", status),
                )
                key = stable_key(service, span_name, status)
                plain.append(SeriesSpec(catalog.SPANMETRICS_CALLS_TOTAL.name, labels, pattern, key))
                histograms.append(HistogramSpec(catalog.SPANMETRICS_LATENCY, labels, "span_latency", key))
    for client, server in itertools.pairwise(services):
        edge = (("client", client), ("server", server))
        key = stable_key(client, server)
        plain.append(SeriesSpec(catalog.SERVICE_GRAPH_REQUEST_TOTAL.name, edge, "rate:5", key))
        plain.append(SeriesSpec(catalog.SERVICE_GRAPH_REQUEST_FAILED_TOTAL.name, edge, "rate:0.05", key))
        histograms.append(HistogramSpec(catalog.SERVICE_GRAPH_REQUEST_SERVER_SECONDS, edge, "span_latency", key))
    return plain, histograms
