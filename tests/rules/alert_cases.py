"""Firing and silent cases of every alert (default config: scrape and evaluation every 15s).

Sample i of a series is at 15*i seconds. Each case says when the alert must be silent and when
it must fire (with which labels and value), at the edges of its threshold and its `for`. Times
are worked out in the comments; thresholds are the seed's numbers, spelled out here on purpose
so a changed threshold in the rules fails these tests.
"""

from __future__ import annotations

from observability import catalog
from observability.promql import duration
from observability.rules import recording
from tests.rules.health_cases import HEALTH_CASES
from tests.rules.promtool_harness import (
    Case,
    Check,
    Firing,
    RecordCase,
    bucket_quantile,
    counter,
    gpu_labels,
    histogram,
    histogram_in_bucket,
    join,
    poller_target,
    series,
    values,
)

S = 15  # scrape interval of the default config (seconds)


def t(seconds: int) -> str:
    return duration(seconds)


def silent(*times: int) -> tuple[Check, ...]:
    return tuple(Check(t(x)) for x in times)


def fires(at: int, *firing: Firing) -> Check:
    return Check(t(at), tuple(firing))


# Scrape-target labels every pod's series carries (alerts keep only what locates the problem).
TRAINING_POD = {
    "namespace": "training",
    "pod": "train-dqn-7f9c",
    "service": "training-job",
    "instance": "10.0.1.5:9094",
    "job": "pods",
}
INFERENCE_POD = {
    "namespace": "foxhunt",
    "pod": "ml-inference-service-5d8b",
    "service": "ml-inference-service",
    "instance": "10.0.2.8:9095",
    "job": "pods",
}
TRAINING_SERVICE_POD = {
    "namespace": "foxhunt",
    "pod": "ml-training-service-6c4a",
    "service": "ml-training-service",
    "instance": "10.0.2.3:9094",
    "job": "pods",
}
FEATURE_STORE_POD = {
    "namespace": "foxhunt",
    "pod": "feature-store-9a1e",
    "service": "feature-store",
    "instance": "10.0.2.9:9096",
    "job": "pods",
}

NAN_JOB = {"model_type": "dqn", "job_id": "job-1", "tensor_type": "loss"}
NAN_LABELS = {"namespace": "training", **NAN_JOB}
SLOW_JOB = {"model_type": "ppo", "job_id": "job-2"}
INFERENCE = {"model_type": "tft"}
INFERENCE_LABELS = {"namespace": "foxhunt", "service": "ml-inference-service", "model_type": "tft"}
GPU0 = gpu_labels("0")
GPU1 = gpu_labels("1")
TARGET = poller_target()

H100_BYTES = 80e9


def _nan(values_text: str) -> dict[str, str]:
    return {series(catalog.TRAINING_NAN_COUNT, {**TRAINING_POD, **NAN_JOB}): values_text}


def _gpu(
    metric: catalog.Metric, gpu: dict[str, str], values_text: str, target: dict[str, str] = TARGET
) -> dict[str, str]:
    return {series(metric, {**target, **gpu}): values_text}


def _memory(used_text: str, gpu: dict[str, str] = GPU0, samples: int = 60) -> dict[str, str]:
    return {
        **_gpu(catalog.GPU_MEMORY_USED_BYTES, gpu, used_text),
        **_gpu(catalog.GPU_MEMORY_TOTAL_BYTES, gpu, values((H100_BYTES, samples))),
    }


def _flat_then_growing(step: float, flat: int = 21, growing: int = 45) -> str:
    """A counter flat at 0 for `flat` scrapes (0..(flat-1)*15s), then growing `step` per scrape."""
    return join([0.0] * flat, counter(step, step, growing))


CASES: tuple[Case, ...] = (
    # --- ml_training_performance -----------------------------------------------------------------
    Case(
        "TrainingNaNDetected",
        "first NaN on a zero counter fires at the first evaluation that sees it",
        _nan(values((0, 3), (1, 20))),
        (*silent(30), fires(45, Firing(NAN_LABELS))),
    ),
    Case(
        "TrainingNaNDetected",
        "a counter created by its first NaN fires (increase() cannot see it)",
        _nan(values((None, 3), (1, 20))),
        (*silent(30), fires(45, Firing(NAN_LABELS))),
    ),
    Case(
        "TrainingNaNDetected",
        "resolves 10m after the last NaN instead of firing forever",
        _nan(values((0, 2), (1, 60))),  # NaN at 30s; the 0 at 15s leaves the window after 10m15s
        (fires(615, Firing(NAN_LABELS)), *silent(630, 14 * 60)),
    ),
    Case(
        "TrainingNaNDetected",
        "a counter reset by a restarted job is not a NaN; the next NaN is",
        _nan(values((5, 45), (0, 4), (1, 20))),  # 5 until 11m, reset to 0, NaN at 12m15s
        (*silent(12 * 60), fires(12 * 60 + 15, Firing(NAN_LABELS))),
    ),
    Case(
        "TrainingSlowdown",
        "below 0.1 epochs/s for 5m fires",
        {series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values((0.05, 41))},
        (*silent(285), fires(300, Firing({"namespace": "training", **SLOW_JOB}, 0.05))),
    ),
    Case(
        "TrainingSlowdown",
        "exactly 0.1 epochs/s stays silent",
        {series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values((0.1, 41))},
        silent(300, 600),
    ),
    Case(
        "TrainingSlowdown",
        "one faster sample restarts the 5m",
        {
            series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values(
                (0.05, 10), (0.2, 1), (0.05, 30)
            )
        },
        (*silent(300, 450), fires(465, Firing({"namespace": "training", **SLOW_JOB}, 0.05))),
    ),  # 165s + 5m
    Case(
        "MLInferenceLatencyHigh",
        "p99 of 149.5ms for 2m fires",
        histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, 0.15, 10, 30),
        (*silent(120), fires(135, Firing(INFERENCE_LABELS, bucket_quantile(0.99, 0.1, 0.15)))),
    ),  # first rate at 15s
    Case(
        "MLInferenceLatencyHigh",
        "p99 just under 100ms stays silent",
        histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, 0.1, 10, 30),
        silent(135, 300),
    ),
    Case(
        "MLInferenceLatencyHigh",
        "no requests (no p99) stays silent",
        histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, 0.15, 0, 30),
        silent(300),
    ),
    # --- ml_training_availability ----------------------------------------------------------------
    Case(
        "MLTrainingServiceDown",
        "every target down for 30s fires",
        {series(catalog.UP, TRAINING_SERVICE_POD): values((0, 20))},
        (*silent(15), fires(30, Firing({"namespace": "foxhunt", "service": "ml-training-service"}))),
    ),
    Case(
        "MLTrainingServiceDown",
        "one of two replicas down stays silent",
        {
            series(catalog.UP, TRAINING_SERVICE_POD): values((0, 20)),
            series(
                catalog.UP, {**TRAINING_SERVICE_POD, "pod": "ml-training-service-7d1b", "instance": "10.0.2.4:9094"}
            ): values((1, 20)),
        },
        silent(30, 240),
    ),
    Case(
        "MLTrainingServiceDown",
        "no target discovered at all fires (absent)",
        {series(catalog.UP, {**INFERENCE_POD}): values((1, 20))},
        (*silent(15), fires(30, Firing({"service": "ml-training-service"}))),
    ),
    Case(
        "MLTrainingServiceDown",
        "down for two scrapes, then back, stays silent",
        {series(catalog.UP, TRAINING_SERVICE_POD): values((1, 1), (0, 2), (1, 20))},
        silent(30, 45, 120),
    ),
    # rate over 2m of a counter flat until 5m, then +3 per scrape: k scrapes in, rate = 3k/120,
    # above 0.1 from k=5 (6m15s); `for: 1m` -> fires at 7m15s, when the rate is 24/120 = 0.2.
    Case(
        "ModelLoadingFailures",
        "0.2 failures/s fires after the rate crosses 0.1 and 1m of `for`",
        {
            series(
                catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
            ): _flat_then_growing(3)
        },
        (*silent(420), fires(435, Firing(INFERENCE_LABELS, 0.2))),
    ),
    Case(
        "ModelLoadingFailures",
        "exactly 0.1 failures/s stays silent",
        {
            series(
                catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
            ): _flat_then_growing(1.5)
        },
        silent(435, 600),
    ),
    Case(
        "ModelLoadingFailures",
        "two error types of 0.067/s each add up above 0.1/s",
        {
            series(
                catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
            ): _flat_then_growing(1),
            series(
                catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "corrupt"}
            ): _flat_then_growing(1),
        },
        (fires(600, Firing(INFERENCE_LABELS, 16 / 120)),),
    ),
    Case(
        "ModelCacheMissesHigh",
        "30% misses for 5m fires",
        {
            series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 3, 40)),
            series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 7, 40)),
        },
        (*silent(300), fires(315, Firing(INFERENCE_LABELS, 0.3))),
    ),  # ratio from 15s, + 5m
    Case(
        "ModelCacheMissesHigh",
        "21% misses fires, 19% stays silent",
        {
            series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 21, 40)),
            series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 79, 40)),
            series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, "model_type": "dqn"}): join(counter(0, 19, 40)),
            series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, "model_type": "dqn"}): join(counter(0, 81, 40)),
        },
        (fires(315, Firing(INFERENCE_LABELS, 0.21)),),
    ),
    Case(
        "ModelCacheMissesHigh",
        "no lookups stays silent",
        {
            series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): values((0, 40)),
            series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): values((0, 40)),
        },
        silent(315),
    ),
    # --- ml_gpu_resources ------------------------------------------------------------------------
    Case(
        "GPUUtilizationLow",
        "29.9% for 10m fires for that GPU only",
        {
            **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((29.9, 50))),
            **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU1, values((80, 50))),
        },
        (*silent(585), fires(600, Firing(GPU0, 29.9))),
    ),
    Case(
        "GPUUtilizationLow",
        "exactly 30% stays silent",
        _gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((30, 50))),
        silent(600, 720),
    ),
    Case(
        "GPUUtilizationLow",
        "a restarted poller pod continues the same 10m",
        {
            **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((10, 21))),
            **_gpu(
                catalog.GPU_UTILIZATION_PERCENT,
                GPU0,
                values((None, 21), (10, 30)),
                poller_target(pod="gpu-poller-fghij"),
            ),
        },
        (*silent(585), fires(600, Firing(GPU0, 10))),
    ),
    Case(
        "GPUUtilizationCritical",
        "95.5% for 5m fires",
        _gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((95.5, 30))),
        (*silent(285), fires(300, Firing(GPU0, 95.5))),
    ),
    Case(
        "GPUUtilizationCritical",
        "exactly 95% stays silent",
        _gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((95, 30))),
        silent(300, 420),
    ),
    Case(
        "GPUMemoryUsageHigh",
        "91% for 5m fires",
        _memory(values((0.91 * H100_BYTES, 60))),
        (*silent(285), fires(300, Firing(GPU0, 0.91))),
    ),
    Case("GPUMemoryUsageHigh", "exactly 90% stays silent", _memory(values((0.9 * H100_BYTES, 60))), silent(300, 600)),
    # `for` is 15s at the default intervals: 96% from 60s is pending at 60s, firing at 75s.
    Case(
        "GPUMemoryExhausted",
        "96% on two consecutive scrapes fires",
        _memory(values((0.5 * H100_BYTES, 4), (0.96 * H100_BYTES, 40))),
        (*silent(60), fires(75, Firing(GPU0, 0.96))),
    ),
    Case(
        "GPUMemoryExhausted",
        "a one-scrape spike stays silent",
        _memory(values((0.5 * H100_BYTES, 4), (0.97 * H100_BYTES, 1), (0.5 * H100_BYTES, 40))),
        silent(60, 75, 90, 300),
    ),
    Case("GPUMemoryExhausted", "exactly 95% stays silent", _memory(values((0.95 * H100_BYTES, 60))), silent(75, 300)),
    Case(
        "GPUTemperatureHigh",
        "86 °C for 2m fires",
        _gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((86, 20))),
        (*silent(105), fires(120, Firing(GPU0, 86))),
    ),
    Case(
        "GPUTemperatureHigh",
        "exactly 85 °C stays silent",
        _gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((85, 20))),
        silent(120, 240),
    ),
    # The poller counts every XID in ml_gpu_errors_total{error_type="xid"} (created at 0) and creates
    # the per-code ml_gpu_xid_errors_total series on a code's first occurrence; the alert reads only
    # the former, so an XID of a code never seen before fires as quickly as any other.
    Case(
        "GPUErrorsDetected",
        "an XID fires at the first evaluation that sees it, for that GPU only",
        {
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((0, 3), (1, 20))),
            **_gpu(catalog.GPU_XID_ERRORS_TOTAL, {**GPU0, "xid": "79"}, values((None, 3), (1, 20))),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU1, "error_type": "xid"}, values((0, 23))),
        },
        (*silent(30), fires(45, Firing(GPU0))),
    ),
    Case(
        "GPUErrorsDetected",
        "per-code XID series alone do not fire (the errors counter is the signal)",
        _gpu(catalog.GPU_XID_ERRORS_TOTAL, {**GPU0, "xid": "79"}, values((0, 3), (1, 20))),
        silent(45, 120),
    ),
    Case(
        "GPUErrorsDetected",
        "a first uncorrectable ECC error (new series) fires",
        _gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "ecc_uncorrected"}, values((None, 3), (1, 20))),
        (*silent(30), fires(45, Firing(GPU0))),
    ),
    Case(
        "GPUErrorsDetected",
        "an XID and a lost GPU at once are one alert per GPU",
        {
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((0, 3), (1, 20))),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "gpu_lost"}, values((0, 3), (1, 20))),
        },
        (fires(45, Firing(GPU0)), fires(120, Firing(GPU0))),
    ),
    Case(
        "GPUErrorsDetected",
        "a restarted poller re-exporting old counts stays silent",
        {
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "ecc_uncorrected"}, values((2, 61))),
            **_gpu(
                catalog.GPU_ERRORS_TOTAL,
                {**GPU0, "error_type": "ecc_uncorrected"},
                values((None, 61), (2, 40)),
                poller_target(pod="gpu-poller-fghij"),
            ),
        },
        silent(15 * 60 + 15, 20 * 60),
    ),
    Case(
        "GPUErrorsDetected",
        "resolves 10m after the last error",
        _gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((0, 2), (1, 60))),
        (fires(615, Firing(GPU0)), *silent(630)),
    ),
    # --- ml_model_quality ------------------------------------------------------------------------
    Case(
        "ModelDriftDetected",
        "drift 0.16 for 10m fires",
        {series(catalog.MODEL_DRIFT_SCORE, {**INFERENCE_POD, **INFERENCE}): values((0.16, 50))},
        (*silent(585), fires(600, Firing(INFERENCE_LABELS, 0.16))),
    ),
    Case(
        "ModelDriftDetected",
        "drift exactly 0.15 stays silent",
        {series(catalog.MODEL_DRIFT_SCORE, {**INFERENCE_POD, **INFERENCE}): values((0.15, 50))},
        silent(600, 720),
    ),
    Case(
        "FeatureDistributionShift",
        "distance 0.25 for 10m fires for that feature only",
        {
            series(catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "price"}): values(
                (0.25, 50)
            ),
            series(catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "volume"}): values(
                (0.1, 50)
            ),
        },
        (*silent(585), fires(600, Firing({**INFERENCE_LABELS, "feature": "price"}, 0.25))),
    ),
    Case(
        "FeatureDistributionShift",
        "distance exactly 0.20 stays silent",
        {
            series(catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "price"}): values(
                (0.2, 50)
            )
        },
        silent(600, 720),
    ),
    Case(
        "PredictionConfidenceLow",
        "median 0.65 for 10m fires",
        histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, 0.7, 10, 50),
        (*silent(600), fires(615, Firing(INFERENCE_LABELS, 0.65))),
    ),  # median from 15s, + 10m
    Case(
        "PredictionConfidenceLow",
        "median exactly 0.70 stays silent",
        histogram(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, {0.7: 5, 0.8: 5}, 50),
        silent(615, 720),
    ),
    Case(
        "PredictionConfidenceLow",
        "no predictions stays silent",
        histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, 0.7, 0, 50),
        silent(615),
    ),
    Case(
        "MLModelAccuracyDegraded",
        "accuracy 0.9 -> 0.8 (below 0.9 x best) for 1m fires",
        {
            series(catalog.MODEL_ACCURACY, {**TRAINING_POD, "model_type": "tft", "job_id": "job-3"}): values(
                (0.9, 20), (0.8, 20)
            )
        },
        (*silent(345), fires(360, Firing({"namespace": "training", "model_type": "tft", "job_id": "job-3"}, 0.8))),
    ),
    Case(
        "MLModelAccuracyDegraded",
        "accuracy 0.9 -> 0.82 (within 10% of best) stays silent",
        {
            series(catalog.MODEL_ACCURACY, {**TRAINING_POD, "model_type": "tft", "job_id": "job-3"}): values(
                (0.9, 20), (0.82, 20)
            )
        },
        silent(360, 540),
    ),
    Case(
        "MLModelAccuracyDegraded",
        "rising accuracy stays silent",
        {
            series(catalog.MODEL_ACCURACY, {**TRAINING_POD, "model_type": "tft", "job_id": "job-3"}): join(
                counter(0.5, 0.01, 40)
            )
        },
        silent(300, 585),
    ),
    # --- ml_data_pipeline ------------------------------------------------------------------------
    # Last update 86000s before time 0: the age passes 24h (86400s) after 400s.
    Case(
        "TrainingDataStale",
        "data older than 24h fires",
        {
            series(
                catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS, {**FEATURE_STORE_POD, "dataset": "market-ticks"}
            ): values((-86000, 60))
        },
        (*silent(400), fires(405, Firing({"dataset": "market-ticks"}, 86405))),
    ),
    Case(
        "TrainingDataStale",
        "data updated every scrape stays silent",
        {
            series(
                catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS, {**FEATURE_STORE_POD, "dataset": "market-ticks"}
            ): join(counter(0, S, 60))
        },
        silent(405, 840),
    ),
    # rate over 5m of a counter flat until 5m then +18 per scrape: 18k/300 > 1 from k=17 (9m15s);
    # `for: 5m` -> fires at 14m15s, when the rate is 360/300 = 1.2.
    Case(
        "FeatureEngineeringErrors",
        "1.2 errors/s fires after the rate crosses 1 and 5m of `for`",
        {
            series(
                catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
                {**TRAINING_POD, "model_type": "dqn", "error_type": "missing_column"},
            ): _flat_then_growing(18)
        },
        (*silent(840), fires(855, Firing({"namespace": "training", "model_type": "dqn"}, 1.2))),
    ),
    Case(
        "FeatureEngineeringErrors",
        "exactly 1 error/s stays silent",
        {
            series(
                catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
                {**TRAINING_POD, "model_type": "dqn", "error_type": "missing_column"},
            ): _flat_then_growing(15)
        },
        silent(855, 960),
    ),
    Case(
        "FeatureExtractionLatencyHigh",
        "p95 of 9.75s for 5m fires",
        histogram_in_bucket(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, {**INFERENCE_POD, **INFERENCE}, 10.0, 4, 30),
        (*silent(300), fires(315, Firing(INFERENCE_LABELS, bucket_quantile(0.95, 5, 10)))),
    ),
    Case(
        "FeatureExtractionLatencyHigh",
        "p95 under 5s stays silent",
        histogram_in_bucket(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, {**INFERENCE_POD, **INFERENCE}, 5.0, 4, 30),
        silent(315, 420),
    ),
    # --- ml_storage ------------------------------------------------------------------------------
    Case(
        "S3ConnectionErrors",
        "0.6/s on each of two operations adds up to 1.2/s and fires",
        {
            series(
                catalog.S3_ERRORS_TOTAL,
                {**TRAINING_SERVICE_POD, "operation": "put_object", "error_type": "connect_timeout"},
            ): _flat_then_growing(9),
            series(
                catalog.S3_ERRORS_TOTAL,
                {**TRAINING_SERVICE_POD, "operation": "get_object", "error_type": "connect_timeout"},
            ): _flat_then_growing(9),
        },
        (*silent(840), fires(855, Firing({"namespace": "foxhunt", "service": "ml-training-service"}, 1.2))),
    ),
    Case(
        "S3ConnectionErrors",
        "exactly 1 error/s stays silent",
        {
            series(
                catalog.S3_ERRORS_TOTAL,
                {**TRAINING_SERVICE_POD, "operation": "put_object", "error_type": "connect_timeout"},
            ): _flat_then_growing(15)
        },
        silent(855, 960),
    ),
    Case(
        "CheckpointSaveFailures",
        "a failure fires at the first evaluation that sees it",
        {
            series(
                catalog.CHECKPOINT_SAVE_FAILURES_TOTAL,
                {**TRAINING_POD, "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"},
            ): values((0, 3), (1, 20))
        },
        (
            *silent(30),
            fires(
                45, Firing({"namespace": "training", "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"})
            ),
        ),
    ),
    Case(
        "CheckpointSaveFailures",
        "a job's first failure (new series) fires",
        {
            series(
                catalog.CHECKPOINT_SAVE_FAILURES_TOTAL,
                {**TRAINING_POD, "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"},
            ): values((None, 3), (1, 20))
        },
        (
            *silent(30),
            fires(
                45, Firing({"namespace": "training", "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"})
            ),
        ),
    ),
    Case(
        "CheckpointSaveFailures",
        "resolves 10m after the last failure",
        {
            series(
                catalog.CHECKPOINT_SAVE_FAILURES_TOTAL,
                {**TRAINING_POD, "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"},
            ): values((0, 2), (1, 60))
        },
        (
            fires(
                615,
                Firing({"namespace": "training", "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"}),
            ),
            *silent(630),
        ),
    ),
    Case(
        "ModelStorageUsageHigh",
        "86% full for 10m fires",
        {
            series(catalog.MODEL_STORAGE_USED_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values((86, 50)),
            series(catalog.MODEL_STORAGE_CAPACITY_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                (100, 50)
            ),
        },
        (
            *silent(585),
            fires(600, Firing({"namespace": "foxhunt", "service": "ml-training-service", "volume": "models"}, 0.86)),
        ),
    ),
    Case(
        "ModelStorageUsageHigh",
        "exactly 85% full stays silent",
        {
            series(catalog.MODEL_STORAGE_USED_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values((85, 50)),
            series(catalog.MODEL_STORAGE_CAPACITY_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                (100, 50)
            ),
        },
        silent(600, 720),
    ),
    # --- ml_monitoring_health (and the lost-at-first-pass GPU): tests/rules/health_cases.py -------
    *HEALTH_CASES,
)


RECORD_CASES: tuple[RecordCase, ...] = (
    RecordCase(
        recording.INFERENCE_LATENCY_P99.record,
        "p99 inside the bucket (0.1, 0.15]",
        histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, 0.15, 10, 30),
        "5m",
        ((INFERENCE_LABELS, bucket_quantile(0.99, 0.1, 0.15)),),
    ),
    RecordCase(
        recording.MODEL_CACHE_MISS_RATIO.record,
        "misses over lookups",
        {
            series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 1, 40)),
            series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(counter(0, 3, 40)),
        },
        "5m",
        ((INFERENCE_LABELS, 0.25),),
    ),
    RecordCase(
        recording.PREDICTION_CONFIDENCE_P50.record,
        "median inside the bucket (0.6, 0.7]",
        histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, 0.7, 10, 30),
        "5m",
        ((INFERENCE_LABELS, bucket_quantile(0.5, 0.6, 0.7)),),
    ),
    RecordCase(
        recording.FEATURE_EXTRACTION_P95.record,
        "p95 inside the bucket (5, 10]",
        histogram_in_bucket(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, {**INFERENCE_POD, **INFERENCE}, 10.0, 4, 30),
        "5m",
        ((INFERENCE_LABELS, bucket_quantile(0.95, 5, 10)),),
    ),
    RecordCase(
        recording.MODEL_STORAGE_USED_RATIO.record,
        "used over capacity per volume",
        {
            series(catalog.MODEL_STORAGE_USED_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values((30, 10)),
            series(catalog.MODEL_STORAGE_CAPACITY_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                (120, 10)
            ),
        },
        "1m",
        (({"namespace": "foxhunt", "service": "ml-training-service", "volume": "models"}, 0.25),),
    ),
    RecordCase(
        recording.TRAINING_DATA_AGE_SECONDS.record,
        "seconds since the newest update",
        {
            series(
                catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS, {**FEATURE_STORE_POD, "dataset": "market-ticks"}
            ): values((100, 30))
        },
        "5m",
        (({"dataset": "market-ticks"}, 200),),
    ),
)
