"""Firing and silent cases of every alert (default config: scrape and evaluation every 15s).

Sample i of a series is at 15*i seconds. Each case says when the alert must be silent and when
it must fire (with which labels and value), at the edges of its threshold and its `for`. Times
are worked out in the comments. Threshold edges come from the thresholds the rules are rendered
with (`alert_cases(thresholds)`), so a changed threshold in thresholds.yaml moves the cases too,
while a rule that stops reading its threshold (or compares the wrong way) fails them.
"""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import duration
from observability.rules import gpu as gpu_rules
from observability.rules import jobs, recording
from observability.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tests.rules.distributed_cases import DISTRIBUTED_RECORD_CASES, distributed_cases
from tests.rules.goodput_cases import efficiency_alert_cases, goodput_record_cases
from tests.rules.ha_cases import HA_RECORD_CASES, ha_cases
from tests.rules.health_cases import HEALTH_CASES, threshold_health_cases
from tests.rules.promtool_harness import (
    Case,
    Check,
    Firing,
    RecordCase,
    bucket_above,
    bucket_below,
    bucket_quantile,
    counter,
    gpu_labels,
    histogram_in_bucket,
    join,
    poller_target,
    series,
    values,
)
from tests.rules.shared_gpu_cases import SHARED_GPU_RECORD_CASES, shared_gpu_alert_cases

S = 15  # scrape interval of the default config (seconds)
CFG = ObservabilityConfig()


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


GPU_OTHER_NODE = gpu_labels("0", node="gpu-node-2")
JOB_1 = {"model_type": "dqn", "job_id": "job-1"}


def _holds(job: dict[str, str], *gpus: dict[str, str], samples: str = values((1, 120))) -> dict[str, str]:
    """The training job's `ml_training_job_gpu_info` series for each GPU it holds."""
    return {
        series(catalog.TRAINING_JOB_GPU_INFO, {**TRAINING_POD, **job, "uuid": gpu["uuid"]}): samples for gpu in gpus
    }


def _ratios(start: float, step: float, samples: int) -> list[float]:
    """Memory used in bytes: `start` of the total, then `step` of the total more at each scrape."""
    return [(start + step * i) * H100_BYTES for i in range(samples)]


CHECKPOINT_FAILURE = Firing(
    {"namespace": "training", "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"}
)


def _checkpoint_failures(values_text: str) -> dict[str, str]:
    """A training job's checkpoint-failure counter (disk full)."""
    labels = {**TRAINING_POD, "model_type": "dqn", "job_id": "job-1", "error_type": "disk_full"}
    return {series(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL, labels): values_text}


def _flat_then_growing(step: float, flat: int = 21, growing: int = 45) -> str:
    """A counter flat at 0 for `flat` scrapes (0..(flat-1)*15s), then growing `step` per scrape."""
    return join([0.0] * flat, counter(step, step, growing))


def _speed(values_text: str) -> dict[str, str]:
    return {series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values_text}


def _job_failures(values_text: str) -> dict[str, str]:
    """A training job's failure counter (out of memory)."""
    labels = {**TRAINING_POD, "model_type": "dqn", "job_id": "job-1", "error_type": "oom"}
    return {series(catalog.TRAINING_FAILURES_TOTAL, labels): values_text}


JOB_FAILURE = Firing({"namespace": "training", "model_type": "dqn", "job_id": "job-1", "error_type": "oom"})
RECOVERING_JOB = {"namespace": "training", "model_type": "dqn", "job_id": "job-1"}


def _job_pod(n: int) -> dict[str, str]:
    """The scrape labels of the job's n-th pod (a restarted pod has a new name and address)."""
    return {**TRAINING_POD, **RECOVERING_JOB, "pod": f"train-dqn-{n}", "instance": f"10.0.1.{5 + n}:9094"}


def _pod_recoveries(n: int, start: int, rollbacks: list[int], resumed: bool) -> dict[str, str]:
    """The n-th pod of the job, scraped from sample `start` on: its rollback counter at each sample
    (samples before `start` are missing: the pod did not exist) and its resume counter (1 in a
    pod that resumed from a checkpoint)."""
    before = [None] * start
    return {
        series(catalog.TRAINING_ROLLBACKS_TOTAL, _job_pod(n)): join(before, rollbacks),
        series(catalog.TRAINING_RESUMED, _job_pod(n)): join(before, [int(resumed)] * len(rollbacks)),
    }


def recovery_cases(th: Thresholds) -> tuple[Case, ...]:
    """TrainingJobKeepsRecovering at its threshold's edge: rollbacks of one process, restarted
    pods, and both together."""
    n = int(th.training_recoveries_count.value)
    # One rollback every 4 samples from sample 4 on: rollback k is seen from sample 4k (60k s).
    climbing = [i // 4 for i in range(4 * n + 4)]
    fired_at = 60 * n
    two_restarts_later = {
        # Pod 0 rolls back n-1 times and fails at sample 4n-1; pod 1 resumes at sample 4n.
        **_pod_recoveries(0, 0, [min(i // 4, n - 1) for i in range(4 * n)], resumed=False),
        **_pod_recoveries(1, 4 * n, [0] * 20, resumed=True),
    }
    restarted_pods: dict[str, str] = {}
    for k in range(n):  # pod k resumed from the checkpoint and is replaced 4 samples later
        restarted_pods.update(_pod_recoveries(k, 4 * k, [0] * 4, resumed=True))
    return (
        Case(
            "TrainingJobKeepsRecovering",
            f"{n} rollbacks of one process within the hour fire at rollback {n}",
            _pod_recoveries(0, 0, climbing, resumed=False),
            (*silent(fired_at - 15), fires(fired_at, Firing(RECOVERING_JOB, n))),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"a process whose first scrape already counts {n} rollbacks fires (increase() alone sees none)",
            _pod_recoveries(0, 0, [n] * 20, resumed=False),
            (fires(15, Firing(RECOVERING_JOB, n)),),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"two ranks of one pod that rolled back together {n - 1} times each are {n - 1} rollbacks: silent",
            {
                **_pod_recoveries(0, 0, [min(i // 4, n - 1) for i in range(4 * n + 20)], resumed=False),
                **{
                    series(metric, {**_job_pod(0), "instance": "10.0.1.5:9095"}): text
                    for metric, text in (
                        (catalog.TRAINING_ROLLBACKS_TOTAL, join([min(i // 4, n - 1) for i in range(4 * n + 20)])),
                        (catalog.TRAINING_RESUMED, values((0, 4 * n + 20))),
                    )
                },
            },
            silent(fired_at, fired_at + 240),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"{n - 1} rollbacks of one process stay silent",
            _pod_recoveries(0, 0, [min(i // 4, n - 1) for i in range(4 * n + 40)], resumed=False),
            silent(fired_at, fired_at + 300),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"{n - 1} rollbacks and then a restarted pod fire when the restarted pod is first scraped",
            two_restarts_later,
            (*silent(fired_at - 15), fires(fired_at, Firing(RECOVERING_JOB, n))),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"{n} restarted pods within the hour fire when the last is first scraped, {n - 1} stay silent",
            restarted_pods,
            (*silent(fired_at - 75), fires(fired_at - 60, Firing(RECOVERING_JOB, n))),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"a pod that resumed more than an hour ago is no restart within it: {n - 1} rollbacks then stay silent",
            # It resumed at 0s and rolls back n-1 times at 3660s (sample 244).
            _pod_recoveries(0, 0, [0] * 244 + [n - 1] * 16, resumed=True),
            silent(3600 + 90, 3600 + 225),
        ),
        Case(
            "TrainingJobKeepsRecovering",
            f"{n} rollbacks resolve once they are older than the hour",
            _pod_recoveries(0, 0, climbing + [n] * 260, resumed=False),
            (fires(3540, Firing(RECOVERING_JOB, n)), *silent(3600 + 60 * n + 60)),
        ),
    )


def alert_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    """Every case, its threshold edges taken from `th` (the same values the rules are rendered with)."""
    slow = th.training_slowdown_epochs_per_second.value
    ratio = th.training_slowdown_ratio.value
    pace = 0.2  # epochs/s the job had (5-s epochs); `slower` is half the alert's edge below it
    slower = pace * ratio / 2
    p99 = th.inference_p99_seconds.value
    loading = th.model_loading_failures_per_second.value
    miss = th.model_cache_miss_ratio.value
    util_low, util_high = th.gpu_utilization_low_percent.value, th.gpu_utilization_high_percent.value
    mem_high, mem_full = th.gpu_memory_high_ratio.value, th.gpu_memory_exhausted_ratio.value
    hot = th.gpu_temperature_high_celsius.value
    prediction_floor = th.gpu_memory_prediction_floor_ratio.value
    drift, distance = th.model_drift_score.value, th.feature_distribution_distance.value
    confidence, drop = th.prediction_confidence_median.value, th.model_accuracy_drop_factor.value
    stale = th.training_data_stale_seconds.value
    feature_errors, extraction = th.feature_engineering_errors_per_second.value, th.feature_extraction_p95_seconds.value
    s3_errors, storage = th.s3_errors_per_second.value, th.model_storage_used_ratio.value
    p99_over, p99_under = (
        bucket_above(catalog.INFERENCE_LATENCY_SECONDS, p99),
        bucket_below(catalog.INFERENCE_LATENCY_SECONDS, p99),
    )
    conf_under, conf_over = (
        bucket_below(catalog.PREDICTION_CONFIDENCE, confidence),
        bucket_above(catalog.PREDICTION_CONFIDENCE, confidence),
    )
    ext_over, ext_under = (
        bucket_above(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, extraction),
        bucket_below(catalog.FEATURE_EXTRACTION_DURATION_SECONDS, extraction),
    )
    return (
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
            f"half of {slow:g} epochs/s for 5m fires",
            {series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values((slow / 2, 41))},
            (*silent(285), fires(300, Firing({"namespace": "training", **SLOW_JOB}, slow / 2))),
        ),
        Case(
            "TrainingSlowdown",
            f"exactly {slow:g} epochs/s stays silent",
            {series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values((slow, 41))},
            silent(300, 600),
        ),
        Case(
            "TrainingSlowdown",
            "one faster sample restarts the 5m",
            {
                series(catalog.TRAINING_EPOCHS_PER_SECOND, {**TRAINING_POD, **SLOW_JOB}): values(
                    (slow / 2, 10), (slow * 2, 1), (slow / 2, 30)
                )
            },
            (*silent(300, 450), fires(465, Firing({"namespace": "training", **SLOW_JOB}, slow / 2))),
        ),  # 165s + 5m
        Case(
            "TrainingSlowdown",
            "a job with long epochs (20 s) that keeps its pace stays silent",
            _speed(values((0.05, 81))),
            silent(300, 1200),
        ),
        Case(
            "TrainingSlowdown",
            f"below {ratio:g} of its own median for 5m fires",
            _speed(values((pace, 80), (slower, 40))),  # slower from 20m
            (*silent(1485), fires(1500, Firing({"namespace": "training", **SLOW_JOB}, slower))),
        ),
        Case(
            "TrainingSlowdown",
            f"exactly {ratio:g} of its own median stays silent",
            _speed(values((pace, 80), (pace * ratio, 40))),
            silent(1500, 1785),
        ),
        Case(
            "TrainingSlowdown",
            "one slow epoch (a CPU-contended 40 s instead of 20 s) stays silent",
            _speed(values((0.05, 40), (0.025, 3), (0.05, 40))),
            silent(600, 645, 1200),
        ),
        Case(
            "TrainingSlowdown",
            "a job that stays slower becomes its own new normal once it has run so for half the hour",
            _speed(values((pace, 80), (slower, 100))),  # from 40m the slow samples are the median
            (fires(2385, Firing({"namespace": "training", **SLOW_JOB}, slower)), *silent(2400, 2685)),
        ),
        Case(
            "TrainingJobFailed",
            "a failure fires at the first evaluation that sees it",
            _job_failures(values((0, 3), (1, 20))),
            (*silent(30), fires(45, JOB_FAILURE)),
        ),
        Case(
            "TrainingJobFailed",
            "a job whose first series carries its failure (it failed before the first scrape) fires",
            _job_failures(values((None, 3), (1, 20))),
            (*silent(30), fires(45, JOB_FAILURE)),
        ),
        Case(
            "TrainingJobFailed",
            "resolves 10m after the failure",
            _job_failures(values((0, 2), (1, 60))),
            (fires(615, JOB_FAILURE), *silent(630)),
        ),
        Case(
            "MLInferenceLatencyHigh",
            f"p99 in the bucket {p99_over} above {p99:g}s for 2m fires",
            histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, p99_over[1], 10, 30),
            (*silent(120), fires(135, Firing(INFERENCE_LABELS, bucket_quantile(0.99, *p99_over)))),
        ),  # first rate at 15s
        Case(
            "MLInferenceLatencyHigh",
            f"p99 in the bucket {p99_under} under {p99:g}s stays silent",
            histogram_in_bucket(
                catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, p99_under[1], 10, 30
            ),
            silent(135, 300),
        ),
        Case(
            "MLInferenceLatencyHigh",
            "no requests (no p99) stays silent",
            histogram_in_bucket(catalog.INFERENCE_LATENCY_SECONDS, {**INFERENCE_POD, **INFERENCE}, p99_over[1], 0, 30),
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
        # rate over 2m of a counter flat until 5m, then +30t per scrape (t the threshold): k scrapes in,
        # rate = 30tk/120 = tk/4, above t from k=5 (6m15s); `for: 1m` -> fires at 7m15s, at rate 2t.
        Case(
            "ModelLoadingFailures",
            f"{2 * loading:g} failures/s fires after the rate crosses {loading:g} and 1m of `for`",
            {
                series(
                    catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
                ): _flat_then_growing(30 * loading)
            },
            (*silent(420), fires(435, Firing(INFERENCE_LABELS, 2 * loading))),
        ),
        Case(
            "ModelLoadingFailures",
            f"exactly {loading:g} failures/s stays silent",
            {
                series(
                    catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
                ): _flat_then_growing(15 * loading)
            },
            silent(435, 600),
        ),
        Case(
            "ModelLoadingFailures",
            f"two error types of {2 * loading / 3:.3g}/s each add up above {loading:g}/s",
            {
                series(
                    catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "not_found"}
                ): _flat_then_growing(10 * loading),
                series(
                    catalog.MODEL_LOADING_FAILURES_TOTAL, {**INFERENCE_POD, **INFERENCE, "error_type": "corrupt"}
                ): _flat_then_growing(10 * loading),
            },
            (fires(600, Firing(INFERENCE_LABELS, 160 * loading / 120)),),
        ),
        Case(
            "ModelCacheMissesHigh",
            f"{1.5 * miss:.0%} misses for 5m fires",
            {
                series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(
                    counter(0, 15 * miss, 40)
                ),
                series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(
                    counter(0, 10 - 15 * miss, 40)
                ),
            },
            (*silent(300), fires(315, Firing(INFERENCE_LABELS, 1.5 * miss))),
        ),  # ratio from 15s, + 5m
        Case(
            "ModelCacheMissesHigh",
            f"{miss + 0.01:.0%} misses fires, {miss - 0.01:.0%} stays silent",
            {
                series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(
                    counter(0, 100 * miss + 1, 40)
                ),
                series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, **INFERENCE}): join(
                    counter(0, 99 - 100 * miss, 40)
                ),
                series(catalog.MODEL_CACHE_MISSES_TOTAL, {**INFERENCE_POD, "model_type": "dqn"}): join(
                    counter(0, 100 * miss - 1, 40)
                ),
                series(catalog.MODEL_CACHE_HITS_TOTAL, {**INFERENCE_POD, "model_type": "dqn"}): join(
                    counter(0, 101 - 100 * miss, 40)
                ),
            },
            (fires(315, Firing(INFERENCE_LABELS, miss + 0.01)),),
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
            f"a job whose GPUs average {util_low - 0.1:g}% for 10m fires once, for the job; an idle GPU no job "
            "holds does not",
            {
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_low - 10, 50))),
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU_OTHER_NODE, values((util_low + 9.8, 50))),
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU1, values((0, 50))),
                **_holds(JOB_1, GPU0, GPU_OTHER_NODE),
            },
            (*silent(585), fires(600, Firing(JOB_1, util_low - 0.1, "gpu-node-1: 1 GPU(s); gpu-node-2: 1 GPU(s); "))),
        ),
        Case(
            "GPUUtilizationLow",
            f"a job at exactly {util_low:g}% stays silent",
            {**_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_low, 50))), **_holds(JOB_1, GPU0)},
            silent(600, 720),
        ),
        Case(
            "GPUUtilizationLow",
            "idle GPUs no job holds never fire it",
            {
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((0, 80))),
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU1, values((util_low / 6, 80))),
            },
            silent(600, 900, 1185),
        ),
        Case(
            "GPUUtilizationLow",
            "a finished job's GPU stops counting for it once its info series is gone",
            {
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_low / 3, 120))),
                **_holds(JOB_1, GPU0, samples="1 1 1 1 1"),
            },
            silent(600, 900, 1500),
        ),
        Case(
            "GPUUtilizationLow",
            "a restarted poller pod continues the same 10m",
            {
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_low / 3, 21))),
                **_gpu(
                    catalog.GPU_UTILIZATION_PERCENT,
                    GPU0,
                    values((None, 21), (util_low / 3, 30)),
                    poller_target(pod="gpu-poller-fghij"),
                ),
                **_holds(JOB_1, GPU0),
            },
            (*silent(585), fires(600, Firing(JOB_1, util_low / 3, "gpu-node-1: 1 GPU(s); "))),
        ),
        Case(
            "GPUUtilizationCritical",
            f"a job whose GPUs average {util_high + 0.5:g}% for 5m fires for the job",
            {**_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_high + 0.5, 30))), **_holds(JOB_1, GPU0)},
            (*silent(285), fires(300, Firing(JOB_1, util_high + 0.5, "gpu-node-1: 1 GPU(s); "))),
        ),
        Case(
            "GPUUtilizationCritical",
            f"a job at exactly {util_high:g}% stays silent",
            {**_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((util_high, 30))), **_holds(JOB_1, GPU0)},
            silent(300, 420),
        ),
        Case(
            "GPUUtilizationCritical",
            f"a saturated GPU no job holds stays silent, and a job averaging {util_high - 1:g}% (one GPU at "
            "100%) is not saturated",
            {
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((100, 30))),
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU1, values((100, 30))),
                **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU_OTHER_NODE, values((2 * util_high - 102, 30))),
                **_holds(JOB_1, GPU1, GPU_OTHER_NODE),
            },
            silent(300, 420),
        ),
        Case(
            "GPUMemoryUsageHigh",
            f"{mem_high + 0.01:.0%} for 5m fires",
            _memory(values(((mem_high + 0.01) * H100_BYTES, 60))),
            (*silent(285), fires(300, Firing(GPU0, mem_high + 0.01))),
        ),
        Case(
            "GPUMemoryUsageHigh",
            f"exactly {mem_high:.0%} stays silent",
            _memory(values((mem_high * H100_BYTES, 60))),
            silent(300, 600),
        ),
        Case(
            "GPUMemoryUsageHigh",
            f"{mem_high + 0.01:.0%} on a GPU a job holds fires with the job's labels",
            {**_memory(values(((mem_high + 0.01) * H100_BYTES, 60))), **_holds(JOB_1, GPU0)},
            (*silent(285), fires(300, Firing({**GPU0, **JOB_1}, mem_high + 0.01))),
        ),
        # `for` is 15s at the default intervals: 1 point above from 60s is pending at 60s, firing at 75s.
        Case(
            "GPUMemoryExhausted",
            f"{mem_full + 0.01:.0%} on two consecutive scrapes fires",
            _memory(values((mem_full / 2 * H100_BYTES, 4), ((mem_full + 0.01) * H100_BYTES, 40))),
            (*silent(60), fires(75, Firing(GPU0, mem_full + 0.01))),
        ),
        Case(
            "GPUMemoryExhausted",
            f"{mem_full + 0.01:.0%} on a GPU a job holds fires with the job's labels, within the same 75s",
            {
                **_memory(values((mem_full / 2 * H100_BYTES, 4), ((mem_full + 0.01) * H100_BYTES, 40))),
                **_holds(JOB_1, GPU0),
            },
            (*silent(60), fires(75, Firing({**GPU0, **JOB_1}, mem_full + 0.01))),
        ),
        Case(
            "GPUMemoryExhausted",
            "a one-scrape spike stays silent",
            _memory(
                values(
                    (mem_full / 2 * H100_BYTES, 4), ((mem_full + 0.02) * H100_BYTES, 1), (mem_full / 2 * H100_BYTES, 40)
                )
            ),
            silent(60, 75, 90, 300),
        ),
        Case(
            "GPUMemoryExhausted",
            f"exactly {mem_full:.0%} stays silent",
            _memory(values((mem_full * H100_BYTES, 60))),
            silent(75, 300),
        ),
        Case(
            "GPUTemperatureHigh",
            f"{hot + 1:g} °C for 2m fires",
            _gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((hot + 1, 20))),
            (*silent(105), fires(120, Firing(GPU0, hot + 1))),
        ),
        Case(
            "GPUTemperatureHigh",
            f"{hot + 1:g} °C on a GPU a job holds fires with the job's labels; the hot GPU no job holds still fires",
            {
                **_gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((hot + 1, 20))),
                **_gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU1, values((hot + 5, 20))),
                **_holds(JOB_1, GPU0),
            },
            (*silent(105), fires(120, Firing({**GPU0, **JOB_1}, hot + 1), Firing(GPU1, hot + 5))),
        ),
        Case(
            "GPUTemperatureHigh",
            f"exactly {hot:g} °C stays silent",
            _gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((hot, 20))),
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
            "an XID on a GPU a job holds fires with the job's labels",
            {
                **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((0, 3), (1, 20))),
                **_holds(JOB_1, GPU0, samples=values((1, 23))),
            },
            (*silent(30), fires(45, Firing({**GPU0, **JOB_1}))),
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
        # GPUMemoryExhaustionPredicted: used = 55% + 0.5% of the total per scrape (2% a minute), so the
        # 10m trend adds 20%: it reaches the total once 80% is in use (scrape 50, 750s), pending from
        # then and firing 2m later; at 900s 85% is in use.
        Case(
            "GPUMemoryExhaustionPredicted",
            "a steady climb that reaches the total within 10m fires after 2m",
            _memory(join(_ratios(0.55, 0.005, 80)), samples=80),
            (*silent(600, 735, 855), fires(900, Firing(GPU0, 0.85))),
        ),
        Case(
            "GPUMemoryExhaustionPredicted",
            "on a GPU a job holds it carries the job's labels",
            {**_memory(join(_ratios(0.55, 0.005, 80)), samples=80), **_holds(JOB_1, GPU0, samples=values((1, 80)))},
            (fires(900, Firing({**GPU0, **JOB_1}, 0.85)),),
        ),
        Case(
            "GPUMemoryExhaustionPredicted",
            "flat usage at 90% stays silent",
            _memory(values((0.9 * H100_BYTES, 80)), samples=80),
            silent(600, 900, 1185),
        ),
        Case(
            "GPUMemoryExhaustionPredicted",
            "falling usage stays silent",
            _memory(join(_ratios(0.94, -0.005, 80)), samples=80),
            silent(300, 600, 900),
        ),
        Case(
            "GPUMemoryExhaustionPredicted",
            "one spike to 99% on flat 70% stays silent",
            _memory(values((0.7 * H100_BYTES, 40), (0.99 * H100_BYTES, 1), (0.7 * H100_BYTES, 39)), samples=80),
            silent(600, 615, 630, 735, 900),
        ),
        # A steep climb (2% of the total per scrape: the 10m trend adds 80%) is trusted only above the
        # floor: from 41% below it, usage passes it at scrape 21 (315s, 1% above). The trend is fitted
        # through the samples above the floor, so it needs a second one (330s): pending from then,
        # firing 2m later (the last sample, at 435s, is 17% above the floor).
        Case(
            "GPUMemoryExhaustionPredicted",
            f"a steep climb fires only once above {prediction_floor:.0%} of the memory",
            _memory(join(_ratios(prediction_floor - 0.41, 0.02, 30)), samples=30),
            (*silent(300, 435), fires(450, Firing(GPU0, prediction_floor + 0.17))),
        ),
        # --- ml_model_quality ------------------------------------------------------------------------
        Case(
            "ModelDriftDetected",
            f"drift {drift + 0.01:g} for 10m fires",
            {series(catalog.MODEL_DRIFT_SCORE, {**INFERENCE_POD, **INFERENCE}): values((drift + 0.01, 50))},
            (*silent(585), fires(600, Firing(INFERENCE_LABELS, drift + 0.01))),
        ),
        Case(
            "ModelDriftDetected",
            f"drift exactly {drift:g} stays silent",
            {series(catalog.MODEL_DRIFT_SCORE, {**INFERENCE_POD, **INFERENCE}): values((drift, 50))},
            silent(600, 720),
        ),
        Case(
            "FeatureDistributionShift",
            f"distance {distance + 0.05:g} for 10m fires for that feature only",
            {
                series(
                    catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "price"}
                ): values((distance + 0.05, 50)),
                series(
                    catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "volume"}
                ): values((distance / 2, 50)),
            },
            (*silent(585), fires(600, Firing({**INFERENCE_LABELS, "feature": "price"}, distance + 0.05))),
        ),
        Case(
            "FeatureDistributionShift",
            f"distance exactly {distance:g} stays silent",
            {
                series(
                    catalog.FEATURE_DISTRIBUTION_DISTANCE, {**INFERENCE_POD, **INFERENCE, "feature": "price"}
                ): values((distance, 50))
            },
            silent(600, 720),
        ),
        Case(
            "PredictionConfidenceLow",
            f"median in the bucket {conf_under} under {confidence:g} for 10m fires",
            histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, conf_under[1], 10, 50),
            (*silent(600), fires(615, Firing(INFERENCE_LABELS, bucket_quantile(0.5, *conf_under)))),
        ),  # median from 15s, + 10m
        Case(
            "PredictionConfidenceLow",
            f"median in the bucket {conf_over} above {confidence:g} stays silent",
            histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, conf_over[1], 10, 50),
            silent(615, 720),
        ),
        Case(
            "PredictionConfidenceLow",
            "no predictions stays silent",
            histogram_in_bucket(catalog.PREDICTION_CONFIDENCE, {**INFERENCE_POD, **INFERENCE}, conf_under[1], 0, 50),
            silent(615),
        ),
        Case(
            "MLModelAccuracyDegraded",
            f"accuracy 0.9 -> {0.9 * drop - 0.01:g} (below {drop:g} x best) for 1m fires",
            {
                series(catalog.MODEL_ACCURACY, {**TRAINING_POD, "model_type": "tft", "job_id": "job-3"}): values(
                    (0.9, 20), (0.9 * drop - 0.01, 20)
                )
            },
            (
                *silent(345),
                fires(
                    360, Firing({"namespace": "training", "model_type": "tft", "job_id": "job-3"}, 0.9 * drop - 0.01)
                ),
            ),
        ),
        Case(
            "MLModelAccuracyDegraded",
            f"accuracy 0.9 -> {0.9 * drop + 0.01:g} (within {drop:g} x best) stays silent",
            {
                series(catalog.MODEL_ACCURACY, {**TRAINING_POD, "model_type": "tft", "job_id": "job-3"}): values(
                    (0.9, 20), (0.9 * drop + 0.01, 20)
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
        # Last update 400s less than the threshold before time 0: the age passes the threshold after 400s.
        Case(
            "TrainingDataStale",
            f"data older than {stale:g}s fires",
            {
                series(
                    catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS,
                    {**FEATURE_STORE_POD, "dataset": "market-ticks"},
                ): values((-(stale - 400), 60))
            },
            (*silent(400), fires(405, Firing({"dataset": "market-ticks"}, stale + 5))),
        ),
        Case(
            "TrainingDataStale",
            "data updated every scrape stays silent",
            {
                series(
                    catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS,
                    {**FEATURE_STORE_POD, "dataset": "market-ticks"},
                ): join(counter(0, S, 60))
            },
            silent(405, 840),
        ),
        # rate over 5m of a counter flat until 5m then +18t per scrape (t the threshold): 18tk/300 > t
        # from k=17 (9m15s); `for: 5m` -> fires at 14m15s, when the rate is 360t/300 = 1.2t.
        Case(
            "FeatureEngineeringErrors",
            f"{1.2 * feature_errors:g} errors/s fires after the rate crosses {feature_errors:g} and 5m of `for`",
            {
                series(
                    catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
                    {**TRAINING_POD, "model_type": "dqn", "error_type": "missing_column"},
                ): _flat_then_growing(18 * feature_errors)
            },
            (*silent(840), fires(855, Firing({"namespace": "training", "model_type": "dqn"}, 1.2 * feature_errors))),
        ),
        Case(
            "FeatureEngineeringErrors",
            f"exactly {feature_errors:g} error/s stays silent",
            {
                series(
                    catalog.FEATURE_ENGINEERING_ERRORS_TOTAL,
                    {**TRAINING_POD, "model_type": "dqn", "error_type": "missing_column"},
                ): _flat_then_growing(15 * feature_errors)
            },
            silent(855, 960),
        ),
        Case(
            "FeatureExtractionLatencyHigh",
            f"p95 in the bucket {ext_over} above {extraction:g}s for 5m fires",
            histogram_in_bucket(
                catalog.FEATURE_EXTRACTION_DURATION_SECONDS, {**INFERENCE_POD, **INFERENCE}, ext_over[1], 4, 30
            ),
            (*silent(300), fires(315, Firing(INFERENCE_LABELS, bucket_quantile(0.95, *ext_over)))),
        ),
        Case(
            "FeatureExtractionLatencyHigh",
            f"p95 in the bucket {ext_under} under {extraction:g}s stays silent",
            histogram_in_bucket(
                catalog.FEATURE_EXTRACTION_DURATION_SECONDS, {**INFERENCE_POD, **INFERENCE}, ext_under[1], 4, 30
            ),
            silent(315, 420),
        ),
        # --- ml_storage ------------------------------------------------------------------------------
        Case(
            "S3ConnectionErrors",
            f"{0.6 * s3_errors:g}/s on each of two operations adds up to {1.2 * s3_errors:g}/s and fires",
            {
                series(
                    catalog.S3_ERRORS_TOTAL,
                    {**TRAINING_SERVICE_POD, "operation": "put_object", "error_type": "connect_timeout"},
                ): _flat_then_growing(9 * s3_errors),
                series(
                    catalog.S3_ERRORS_TOTAL,
                    {**TRAINING_SERVICE_POD, "operation": "get_object", "error_type": "connect_timeout"},
                ): _flat_then_growing(9 * s3_errors),
            },
            (
                *silent(840),
                fires(855, Firing({"namespace": "foxhunt", "service": "ml-training-service"}, 1.2 * s3_errors)),
            ),
        ),
        Case(
            "S3ConnectionErrors",
            f"exactly {s3_errors:g} error/s stays silent",
            {
                series(
                    catalog.S3_ERRORS_TOTAL,
                    {**TRAINING_SERVICE_POD, "operation": "put_object", "error_type": "connect_timeout"},
                ): _flat_then_growing(15 * s3_errors)
            },
            silent(855, 960),
        ),
        Case(
            "CheckpointSaveFailures",
            "a failure fires at the first evaluation that sees it",
            _checkpoint_failures(values((0, 3), (1, 20))),
            (
                *silent(30),
                fires(
                    45,
                    CHECKPOINT_FAILURE,
                ),
            ),
        ),
        Case(
            "CheckpointSaveFailures",
            "a job's first failure (new series) fires",
            _checkpoint_failures(values((None, 3), (1, 20))),
            (
                *silent(30),
                fires(
                    45,
                    CHECKPOINT_FAILURE,
                ),
            ),
        ),
        Case(
            "CheckpointSaveFailures",
            "resolves 10m after the last failure",
            _checkpoint_failures(values((0, 2), (1, 60))),
            (
                fires(
                    615,
                    CHECKPOINT_FAILURE,
                ),
                *silent(630),
            ),
        ),
        Case(
            "ModelStorageUsageHigh",
            f"{storage + 0.01:.0%} full for 10m fires",
            {
                series(catalog.MODEL_STORAGE_USED_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                    ((storage + 0.01) * 100, 50)
                ),
                series(catalog.MODEL_STORAGE_CAPACITY_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                    (100, 50)
                ),
            },
            (
                *silent(585),
                fires(
                    600,
                    Firing(
                        {"namespace": "foxhunt", "service": "ml-training-service", "volume": "models"}, storage + 0.01
                    ),
                ),
            ),
        ),
        Case(
            "ModelStorageUsageHigh",
            f"exactly {storage:.0%} full stays silent",
            {
                series(catalog.MODEL_STORAGE_USED_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                    (storage * 100, 50)
                ),
                series(catalog.MODEL_STORAGE_CAPACITY_BYTES, {**TRAINING_SERVICE_POD, "volume": "models"}): values(
                    (100, 50)
                ),
            },
            silent(600, 720),
        ),
        # --- ml_monitoring_health (and the lost-at-first-pass GPU): tests/rules/health_cases.py -------
        *HEALTH_CASES,
        *threshold_health_cases(th),
        *ha_cases(th),
        *recovery_cases(th),
        *efficiency_alert_cases(th),
        *distributed_cases(th),
        *shared_gpu_alert_cases(),
    )


CASES: tuple[Case, ...] = alert_cases()


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


# --- ml_training_job_gpus.recording: one fleet of 4 GPUs, every per-job record at 10m ----------
# GPU0 (node 1) and GPU(node 2, 0) are job-1's, GPU1 (node 2) is no job's, an A100 (node 2, 2) is
# job-2's. Energy counters grow by power x 15 s per scrape, so each GPU's rate is its power.
A100 = {**gpu_labels("2", node="gpu-node-2"), "gpu_name": "NVIDIA A100-SXM4-80GB"}
JOB_2 = {"model_type": "ppo", "job_id": "job-2"}
POLLER_NODE_2 = poller_target(node="gpu-node-2", pod="gpu-poller-zyxwv")
_FLEET_GPUS = (  # (labels, poller target, utilization, memory used, watts, celsius, joules at start)
    (GPU0, TARGET, 20, 40e9, 300, 60, 1000),
    (GPU_OTHER_NODE, POLLER_NODE_2, 40, 60e9, 200, 70, 2000),
    (GPU1, POLLER_NODE_2, 0, 1e9, 50, 40, 0),
    (A100, POLLER_NODE_2, 90, 20e9, 400, 80, 0),
)
_SCRAPES = 41  # 0s..600s
# GPM figures (SM active, tensor active): the H100s only; the A100 (job-2's) reports none.
_FLEET_GPM = (
    (GPU0, TARGET, 15, 10),
    (GPU_OTHER_NODE, POLLER_NODE_2, 35, 30),
    (GPU1, POLLER_NODE_2, 5, 0),
)


def _fleet_input(energy_grows: bool = True) -> dict[str, str]:
    out: dict[str, str] = {}
    for gpu, target, util, used, watts, celsius, joules in _FLEET_GPUS:
        out |= _gpu(catalog.GPU_UTILIZATION_PERCENT, gpu, values((util, _SCRAPES)), target)
        out |= _gpu(catalog.GPU_MEMORY_USED_BYTES, gpu, values((used, _SCRAPES)), target)
        out |= _gpu(catalog.GPU_MEMORY_TOTAL_BYTES, gpu, values((H100_BYTES, _SCRAPES)), target)
        out |= _gpu(catalog.GPU_POWER_WATTS, gpu, values((watts, _SCRAPES)), target)
        out |= _gpu(catalog.GPU_TEMPERATURE_CELSIUS, gpu, values((celsius, _SCRAPES)), target)
        step = watts * S if energy_grows else 0
        out |= _gpu(catalog.GPU_ENERGY_JOULES_TOTAL, gpu, join(counter(joules, step, _SCRAPES)), target)
    for gpu, target, sm_active, tensor_active in _FLEET_GPM:
        out |= _gpu(catalog.GPU_SM_ACTIVE_PERCENT, gpu, values((sm_active, _SCRAPES)), target)
        out |= _gpu(catalog.GPU_TENSOR_ACTIVE_PERCENT, gpu, values((tensor_active, _SCRAPES)), target)
    out[series(catalog.GPU_POLLER_DEVICES, {**TARGET, "node": "gpu-node-1"})] = values((1, _SCRAPES))
    out[series(catalog.GPU_POLLER_DEVICES, {**POLLER_NODE_2, "node": "gpu-node-2"})] = values((3, _SCRAPES))
    out |= _holds(JOB_1, GPU0, GPU_OTHER_NODE, samples=values((1, _SCRAPES)))
    out |= _holds(JOB_2, A100, samples=values((1, _SCRAPES)))
    return out


def _held(gpu: dict[str, str], job: dict[str, str], value: float) -> tuple[dict[str, str], float]:
    return ({**gpu, **job}, value)


_T = 600  # seconds at the check
_JOB1_JOULES = (1000 + 300 * S * 40) + (2000 + 200 * S * 40)
_JOB2_JOULES = 400 * S * 40
_JOB1_KWH = (_JOB1_JOULES - 3000) / 3_600_000
_JOB2_KWH = (_JOB2_JOULES - 0) / 3_600_000
_PRICE = dict(CFG.gpu_hourly_cost)
_JOB1_HOURLY = _PRICE["NVIDIA H100 80GB HBM3"] + _PRICE["NVIDIA H100 80GB HBM3"]
_JOB2_HOURLY = CFG.gpu_hourly_cost_default
_PER_RECORD: dict[str, tuple[tuple[dict[str, str], float], ...]] = {
    jobs.GPU_HOLDERS.record: tuple(({"uuid": gpu["uuid"]}, 1) for gpu in (GPU0, GPU_OTHER_NODE, A100)),
    jobs.HELD.record: (_held(GPU0, JOB_1, 1), _held(GPU_OTHER_NODE, JOB_1, 1), _held(A100, JOB_2, 1)),
    jobs.HELD_SM_SHARE.record: (_held(GPU0, JOB_1, 1), _held(GPU_OTHER_NODE, JOB_1, 1), _held(A100, JOB_2, 1)),
    jobs.FLEET_MIG_HELD.record: (({}, 0),),
    jobs.FLEET_SHARED.record: (({}, 0),),
    jobs.JOB_SHARED_GPUS.record: ((JOB_1, 0), (JOB_2, 0)),
    jobs.HELD_UTILIZATION.record: (_held(GPU0, JOB_1, 20), _held(GPU_OTHER_NODE, JOB_1, 40), _held(A100, JOB_2, 90)),
    jobs.HELD_MEMORY_RATIO.record: (
        _held(GPU0, JOB_1, 0.5),
        _held(GPU_OTHER_NODE, JOB_1, 0.75),
        _held(A100, JOB_2, 0.25),
    ),
    jobs.HELD_POWER.record: (_held(GPU0, JOB_1, 300), _held(GPU_OTHER_NODE, JOB_1, 200), _held(A100, JOB_2, 400)),
    jobs.HELD_TEMPERATURE.record: (_held(GPU0, JOB_1, 60), _held(GPU_OTHER_NODE, JOB_1, 70), _held(A100, JOB_2, 80)),
    jobs.JOB_GPUS.record: ((JOB_1, 2), (JOB_2, 1)),
    jobs.JOB_UTILIZATION_AVG.record: ((JOB_1, 30), (JOB_2, 90)),
    jobs.JOB_UTILIZATION_MIN.record: ((JOB_1, 20), (JOB_2, 90)),
    jobs.JOB_SM_ACTIVE_AVG.record: ((JOB_1, 25),),  # job-2's A100 has no GPM: no series
    jobs.JOB_TENSOR_ACTIVE_AVG.record: ((JOB_1, 20),),
    jobs.JOB_MEMORY_RATIO_MAX.record: ((JOB_1, 0.75), (JOB_2, 0.25)),
    jobs.JOB_POWER.record: ((JOB_1, 500), (JOB_2, 400)),
    jobs.JOB_ENERGY_RATE.record: ((JOB_1, 500), (JOB_2, 400)),
    jobs.JOB_TEMPERATURE_MAX.record: ((JOB_1, 70), (JOB_2, 80)),
    jobs.FLEET_HELD.record: (({}, 3),),
    jobs.FLEET_UNHELD.record: (({}, 1),),
    jobs.FLEET_HELD_IDLE: (({}, 1),),
    jobs.JOB_FIRST_SEEN.record: ((JOB_1, 0), (JOB_2, 0)),  # both first recorded at 0s
    jobs.JOB_ENERGY.record: ((JOB_1, _JOB1_JOULES), (JOB_2, _JOB2_JOULES)),
    jobs.JOB_ENERGY_FIRST_SEEN.record: ((JOB_1, 3000), (JOB_2, 0)),
    jobs.JOB_GPU_HOURS.record: ((JOB_1, 2 * (_T - 0) / 3600), (JOB_2, 1 * (_T - 0) / 3600)),
    jobs.JOB_KWH.record: ((JOB_1, _JOB1_KWH), (JOB_2, _JOB2_KWH)),
    jobs.JOB_HOURLY_COST: ((JOB_1, _JOB1_HOURLY), (JOB_2, _JOB2_HOURLY)),
    jobs.JOB_COST: (
        (JOB_1, _JOB1_HOURLY * (_T - 0) / 3600 + _JOB1_KWH * CFG.energy_price_per_kwh),
        (JOB_2, _JOB2_HOURLY * (_T - 0) / 3600 + _JOB2_KWH * CFG.energy_price_per_kwh),
    ),
    jobs.MODEL_GPUS: (({"model_type": "dqn"}, 2), ({"model_type": "ppo"}, 1)),
    jobs.MODEL_HOURLY_COST: (({"model_type": "dqn"}, _JOB1_HOURLY), ({"model_type": "ppo"}, _JOB2_HOURLY)),
    jobs.MODEL_ENERGY_RATE: (({"model_type": "dqn"}, 500), ({"model_type": "ppo"}, 400)),
}
# Over 24 h, with flat energy counters (rate 0 at every evaluation, with no extrapolation to
# predict): 41 evaluations of 2 and 1 GPUs.
_PER_RECORD_FLAT_ENERGY: dict[str, tuple[tuple[dict[str, str], float], ...]] = {
    jobs.MODEL_GPU_HOURS_24H: (({"model_type": "dqn"}, 82 * S / 3600), ({"model_type": "ppo"}, 41 * S / 3600)),
    jobs.MODEL_KWH_24H: (({"model_type": "dqn"}, 0), ({"model_type": "ppo"}, 0)),
    jobs.MODEL_COST_24H: (
        ({"model_type": "dqn"}, 41 * _JOB1_HOURLY * S / 3600 + 0 * CFG.energy_price_per_kwh),
        ({"model_type": "ppo"}, 41 * _JOB2_HOURLY * S / 3600 + 0 * CFG.energy_price_per_kwh),
    ),
}

JOB_RECORD_CASES: tuple[RecordCase, ...] = (
    *(
        RecordCase(record, "two jobs, an unheld GPU, at 10m", _fleet_input(), "10m", samples)
        for record, samples in _PER_RECORD.items()
    ),
    *(
        RecordCase(record, "24 h of two jobs (flat energy)", _fleet_input(energy_grows=False), "10m", samples)
        for record, samples in _PER_RECORD_FLAT_ENERGY.items()
    ),
    RecordCase(
        jobs.HELD_UTILIZATION.record,
        "a finished job's GPU counts for no job once its info series is gone",
        {**_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((10, 60))), **_holds(JOB_1, GPU0, samples="1 1 1 1 1")},
        "10m",
        (),
    ),
    RecordCase(
        jobs.FLEET_UNHELD.record,
        "the finished job's GPU is free again",
        {
            **_gpu(catalog.GPU_UTILIZATION_PERCENT, GPU0, values((10, 60))),
            series(catalog.GPU_POLLER_DEVICES, {**TARGET, "node": "gpu-node-1"}): values((1, 60)),
            **_holds(JOB_1, GPU0, samples="1 1 1 1 1"),
        },
        "10m",
        (({}, 1),),
    ),
)
# --- ml_gpu_resources: the per-GPU inputs recorded at the head of the group ------------------------
# Values far from the thresholds: these cases also run against thresholds moved by -10% and +5%.
_RESTARTED_POLLER = poller_target(pod="gpu-poller-fghij")
GPU_INPUT_RECORD_CASES: tuple[RecordCase, ...] = (
    RecordCase(
        gpu_rules.MEMORY_RATIO_WATCHED,
        "above the lowest memory threshold: one series per GPU whichever poller pod reports it; 40% is not recorded",
        {
            **_memory(values((0.91 * H100_BYTES, 10))),
            **_gpu(catalog.GPU_MEMORY_USED_BYTES, GPU0, values((0.91 * H100_BYTES, 10)), _RESTARTED_POLLER),
            **_gpu(catalog.GPU_MEMORY_TOTAL_BYTES, GPU0, values((H100_BYTES, 10)), _RESTARTED_POLLER),
            **_memory(values((0.4 * H100_BYTES, 10)), gpu=GPU1, samples=10),
        },
        "1m",
        ((GPU0, 0.91),),
    ),
    RecordCase(
        gpu_rules.MEMORY_RATIO_HIGH,
        "above the lower memory alert threshold only: 97% is recorded, 60% (watched, for the trend) is not",
        {
            **_memory(values((0.97 * H100_BYTES, 10))),
            **_memory(values((0.6 * H100_BYTES, 10)), gpu=GPU1, samples=10),
        },
        "1m",
        ((GPU0, 0.97),),
    ),
    RecordCase(
        gpu_rules.TEMPERATURE_TOO_HOT,
        "a hot GPU only (the edges are the alert's cases)",
        {
            **_gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU0, values((95, 10))),
            **_gpu(catalog.GPU_TEMPERATURE_CELSIUS, GPU1, values((60, 10))),
        },
        "1m",
        ((GPU0, 95),),
    ),
    RecordCase(
        gpu_rules.ERRORS_NONZERO,
        "counters above zero per GPU and error type, one series whichever poller pod counts them",
        {
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((2, 10))),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((2, 10)), _RESTARTED_POLLER),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "gpu_lost"}, values((0, 10))),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU1, "error_type": "ecc_uncorrected"}, values((1, 10))),
        },
        "1m",
        (({**GPU0, "error_type": "xid"}, 2), ({**GPU1, "error_type": "ecc_uncorrected"}, 1)),
    ),
    # The steady climb of GPUMemoryExhaustionPredicted's cases: 85% in use at 900s, on course for the total.
    RecordCase(
        gpu_rules.EXHAUSTION_PREDICTED,
        "a steady climb is recorded with the ratio now; flat usage at 90% is not",
        {
            **_memory(join(_ratios(0.55, 0.005, 80)), samples=80),
            **_memory(values((0.9 * H100_BYTES, 80)), gpu=GPU1, samples=80),
        },
        "15m",
        ((GPU0, _ratios(0.55, 0.005, 80)[60] / H100_BYTES),),
    ),
    RecordCase(
        gpu_rules.ERRORS_INCREASED,
        "a first XID within the window; an old count that has not grown is not recorded",
        {
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU0, "error_type": "xid"}, values((0, 56), (1, 10))),
            **_gpu(catalog.GPU_ERRORS_TOTAL, {**GPU1, "error_type": "ecc_uncorrected"}, values((2, 66))),
        },
        "15m",
        ((GPU0, 1),),
    ),
)
_STATIC_RECORD_CASES = (
    *RECORD_CASES,
    *JOB_RECORD_CASES,
    *GPU_INPUT_RECORD_CASES,
    *DISTRIBUTED_RECORD_CASES,
    *SHARED_GPU_RECORD_CASES,
    *HA_RECORD_CASES,
)


def record_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[RecordCase, ...]:
    """Every recording rule's cases; those at the edges of a threshold take it from `th`."""
    return (*_STATIC_RECORD_CASES, *goodput_record_cases(th))


RECORD_CASES = record_cases()
