"""Plausible, deterministic sample values for the synthetic fleet, and their OpenMetrics text.

A pattern (`"gpu:temperature_celsius"`, `"rate:5"`, `"job:ml_training_loss"`, ...) has a few
dozen variants; a series picks one with its stable key. Values are computed once per variant
for the whole hour and kept as a text body with a placeholder where the series name and labels
go, so writing a series is one `str.replace` (C speed) instead of a Python loop per sample.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from foxhunt_trainer.contract import catalog

VARIANTS = 32
PLACEHOLDER = "\x00"
GPU_MEMORY_BYTES = 85_899_345_920  # 80 GiB

Values = list[float]


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _walk(rng: random.Random, n: int, low: float, high: float, step: float) -> Values:
    x = rng.uniform(low, high)
    out = []
    for _ in range(n):
        x = min(high, max(low, x + rng.gauss(0.0, step)))
        out.append(x)
    return out


def _const(value: float) -> Callable[[random.Random, int, int], Values]:
    return lambda rng, n, variant: [value] * n


def _counter(rng: random.Random, n: int, per_second: float, interval: int) -> Values:
    total = float(rng.randint(0, 1000)) if per_second else 0.0
    out = []
    for _ in range(n):
        total += max(0.0, per_second * interval * rng.uniform(0.7, 1.3))
        out.append(float(math.floor(total)))
    return out


# Seconds per second a running job spends in each phase (they sum to 1: the phases split wall time).
PHASE_SHARES: dict[str, float] = {
    "startup": 0.0,
    "data_wait": 0.08,
    "compute": 0.8,
    "collective": 0.05,
    "checkpoint": 0.03,
    "evaluation": 0.02,
    "lost_work": 0.0,
    "idle": 0.02,
}

# The GPUs (1 in VARIANTS) whose `rare_errors` series step from 0 to 1 once within the hour.
RARE_ERROR_VARIANT = 11


def has_rare_error(key: int) -> bool:
    """Whether the series of this key step once (`rare_errors`), so an error series should exist."""
    return key % VARIANTS == RARE_ERROR_VARIANT


def _step_once(rng: random.Random, n: int) -> Values:
    at = rng.randrange(n)
    return [0.0 if i < at else 1.0 for i in range(n)]


class Patterns:
    """Value strings per (pattern, variant) for `samples` points `interval` seconds apart."""

    def __init__(self, samples: int, interval: int, start: int) -> None:
        self.samples = samples
        self.interval = interval
        self.start = start
        self._values: dict[tuple[str, int], list[str]] = {}
        self._histograms: dict[tuple[str, int, tuple[float, ...]], dict[str, list[str]]] = {}

    def values(self, pattern: str, key: int) -> list[str]:
        variant = key % VARIANTS
        cached = self._values.get((pattern, variant))
        if cached is None:
            rng = random.Random(f"{pattern}/{variant}")
            cached = [_fmt(v) for v in self._generate(pattern, rng, variant)]
            self._values[(pattern, variant)] = cached
        return cached

    def _generate(self, pattern: str, rng: random.Random, variant: int) -> Values:
        n, interval = self.samples, self.interval
        kind, _, arg = pattern.partition(":")
        if kind == "const":
            return [float(arg)] * n
        if kind == "rate":
            return _counter(rng, n, float(arg), interval)
        if pattern == "data_updated":
            return [float(self.start - 6 * 3600)] * n  # refreshed six hours before the hour began
        if kind == "status":
            return [1.0 if arg == "running" else 0.0] * n
        if pattern == "just_now":  # a timestamp that keeps up with the samples (a job still stepping)
            return [float(self.start + i * interval) for i in range(n)]
        if pattern == "started":  # a job's start time: some hours before the hour began
            return [float(self.start - rng.randint(600, 12 * 3600))] * n
        if kind == "phase":
            return _counter(rng, n, PHASE_SHARES[arg], interval)
        simple = _SIMPLE.get(pattern)
        if simple is not None:
            return simple(rng, n, variant)
        if kind == "job":
            return _job_values(arg, rng, n, variant, interval)
        raise KeyError(f"no value pattern {pattern!r}")

    def histogram(self, pattern: str, key: int, buckets: Sequence[float]) -> dict[str, list[str]]:
        """Value strings for every `le` bucket (by le text), `sum` and `count` of one histogram child."""
        variant = key % VARIANTS
        cache_key = (pattern, variant, tuple(buckets))
        cached = self._histograms.get(cache_key)
        if cached is None:
            rng = random.Random(f"{pattern}/{variant}/histogram")
            per_second, median, sigma = _HISTOGRAMS[pattern]
            median *= rng.uniform(0.6, 1.6)
            counts = _counter(rng, self.samples, per_second, self.interval)
            cached = {}
            for le in (*buckets, math.inf):
                share = 1.0 if math.isinf(le) else 0.5 * (1 + math.erf(math.log(le / median) / (sigma * math.sqrt(2))))
                cached[le_text(le)] = [_fmt(math.floor(c * share)) for c in counts]
            mean = median * math.exp(sigma * sigma / 2)
            cached["sum"] = [_fmt(round(c * mean, 3)) for c in counts]
            cached["count"] = [_fmt(c) for c in counts]
            self._histograms[cache_key] = cached
        return cached


def le_text(le: float) -> str:
    """`le` as prometheus-client writes it (`0.005`, `1.0`, `+Inf`)."""
    return "+Inf" if math.isinf(le) else repr(float(le))


def _gpu_utilization(rng: random.Random, n: int, variant: int) -> Values:
    if variant % 8 == 0:
        return _walk(rng, n, 0.0, 5.0, 1.0)  # idle GPU
    if variant % 8 == 1:
        return _walk(rng, n, 30.0, 80.0, 5.0)
    return _walk(rng, n, 85.0, 100.0, 2.0)


def _temperature(rng: random.Random, n: int, variant: int) -> Values:
    if variant == 3:
        return _walk(rng, n, 84.0, 90.0, 0.5)  # a hot GPU: GPUTemperatureHigh
    return _walk(rng, n, 38.0, 80.0, 1.0)


def _memory_used(rng: random.Random, n: int, variant: int) -> Values:
    high = 0.97 if variant == 5 else 0.9
    return [round(v * GPU_MEMORY_BYTES) for v in _walk(rng, n, 0.3, high, 0.01)]


def _throttle(reason: str) -> Callable[[random.Random, int, int], Values]:
    def values(rng: random.Random, n: int, variant: int) -> Values:
        if reason == "gpu_idle":
            return [1.0 if variant % 8 == 0 else 0.0] * n
        if reason == "sw_power_cap" and variant % 4 == 2:
            return [float(rng.random() < 0.3) for _ in range(n)]
        if reason == "sw_thermal_slowdown" and variant == 3:
            return [float(rng.random() < 0.5) for _ in range(n)]
        return [0.0] * n

    return values


_SIMPLE: dict[str, Callable[[random.Random, int, int], Values]] = {
    "up": _const(1.0),
    "one": _const(1.0),
    "zero": _const(0.0),
    "poll_seconds": lambda rng, n, v: [round(x, 4) for x in _walk(rng, n, 0.004, 0.03, 0.002)],
    "gpu:utilization_percent": lambda rng, n, v: [round(x, 1) for x in _gpu_utilization(rng, n, v)],
    # GPUs a training job holds: its GPUs idle together, or busy below saturation.
    "gpu:utilization_percent:held:idle": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 0.0, 5.0, 1.0)],
    "gpu:utilization_percent:held:busy": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 45.0, 85.0, 4.0)],
    # NVML's energy counter (J): 90-700 W, like the power gauge.
    "gpu:energy_joules_total": lambda rng, n, v: _counter(rng, n, rng.uniform(90.0, 700.0), 15),
    "gpu:memory_utilization_percent": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 10.0, 90.0, 4.0)],
    "gpu:memory_used_bytes": _memory_used,
    "gpu:memory_total_bytes": _const(GPU_MEMORY_BYTES),
    "gpu:temperature_celsius": lambda rng, n, v: [round(x) for x in _temperature(rng, n, v)],
    "gpu:power_watts": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 90.0, 700.0, 25.0)],
    "gpu:power_limit_watts": _const(700.0),
    "gpu:sm_clock_hertz": lambda rng, n, v: [round(x / 15e6) * 15e6 for x in _walk(rng, n, 1.2e9, 1.98e9, 4e7)],
    "gpu:memory_clock_hertz": _const(2.619e9),
    # GPM (the synthetic fleet is H100): SM activity below NVML's utilization, tensor cores lower.
    "gpu:sm_active_percent": lambda rng, n, v: [round(0.8 * x, 1) for x in _gpu_utilization(rng, n, v)],
    "gpu:sm_occupancy_percent": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 5.0, 60.0, 3.0)],
    "gpu:tensor_active_percent": lambda rng, n, v: [round(0.5 * x, 1) for x in _gpu_utilization(rng, n, v)],
    "gpu:dram_bandwidth_utilization_percent": lambda rng, n, v: [round(x, 1) for x in _walk(rng, n, 5.0, 80.0, 4.0)],
    "gpu:pcie_rx_bytes_total": lambda rng, n, v: _counter(rng, n, 2e9, 15),
    "gpu:pcie_tx_bytes_total": lambda rng, n, v: _counter(rng, n, 5e8, 15),
    "gpu:nvlink_rx_bytes_total": lambda rng, n, v: _counter(rng, n, 1e11, 15),
    "gpu:nvlink_tx_bytes_total": lambda rng, n, v: _counter(rng, n, 1e11, 15),
    "ecc:corrected": lambda rng, n, v: _counter(rng, n, 0.01 if v % 8 == 7 else 0.0, 15),
    "ecc:uncorrected": _const(0.0),
    "rare_errors": lambda rng, n, v: _step_once(rng, n) if v == RARE_ERROR_VARIANT else [0.0] * n,
    "drift": lambda rng, n, v: [round(x, 3) for x in _walk(rng, n, 0.0, 0.2, 0.01)],
    "storage_used": lambda rng, n, v: [round(x) for x in _walk(rng, n, 1.0e12, 1.8e12, 1e9)],
}
for _reason in (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
):
    _SIMPLE[f"throttle:{_reason}"] = _throttle(_reason)

# pattern -> (events per second, median seconds or value, log-normal sigma)
_HISTOGRAMS: dict[str, tuple[float, float, float]] = {
    f"job:{catalog.TRAINING_ITERATION_SECONDS.name}": (1.0, 1.0, 0.3),
    f"job:{catalog.CHECKPOINT_SAVE_DURATION_SECONDS.name}": (1 / 300, 5.0, 0.4),
    f"job:{catalog.TRAINING_DATA_LOADING_SECONDS.name}": (0.2, 0.3, 0.5),
    f"job:{catalog.TRAINING_JOB_DURATION_SECONDS.name}": (0.0, 3600.0, 0.5),
    "inference_latency": (50.0, 0.02, 0.6),
    "confidence": (50.0, 0.8, 0.1),
    "feature_seconds": (5.0, 0.5, 0.5),
    "span_latency": (5.0, 0.05, 0.8),
}


def _job_values(name: str, rng: random.Random, n: int, variant: int, interval: int) -> Values:
    c = catalog
    if name in (c.TRAINING_LOSS.name, c.TRAINING_VALIDATION_LOSS.name):
        start, floor = rng.uniform(1.0, 2.5), rng.uniform(0.05, 0.2)
        bias = 1.08 if name == c.TRAINING_VALIDATION_LOSS.name else 1.0
        curve = [floor + (start - floor) * math.exp(-i / 60) for i in range(n)]
        return [round(bias * x * rng.uniform(0.97, 1.03), 4) for x in curve]
    if name in (c.TRAINING_FOLD_LOSS.name, c.TRAINING_FOLD_VALIDATION_LOSS.name):
        return [round(rng.uniform(0.1, 0.5), 4)] * n
    if name == c.TRAINING_CURRENT_EPOCH.name:
        first = rng.randint(0, 500)
        return [float(first + i // 4) for i in range(n)]
    if name == c.TRAINING_PROGRESS_PERCENT.name:
        begun = rng.uniform(0, 60)
        return [round(min(100.0, begun + 40.0 * i / n), 2) for i in range(n)]
    if name == c.TRAINING_EPOCHS_PER_SECOND.name:
        low, high = (0.02, 0.08) if variant == 9 else (0.2, 1.5)  # one slow variant: TrainingSlowdown
        return [round(x, 3) for x in _walk(rng, n, low, high, 0.05)]
    if name == c.TRAINING_CONVERGENCE_RATE.name:
        return [round(x, 5) for x in _walk(rng, n, -0.02, 0.0, 0.002)]
    if name in (c.MODEL_ACCURACY.name, c.MODEL_F1_SCORE.name, c.MODEL_PRECISION.name, c.MODEL_RECALL.name):
        return [round(x, 4) for x in _walk(rng, n, 0.8, 0.97, 0.005)]
    if name in (c.MODEL_RMSE.name, c.MODEL_MAE.name):  # in the target's unit, falling as the model learns
        return [round(x, 4) for x in _walk(rng, n, 0.2, 0.6, 0.01)]
    if name == c.MODEL_R2_SCORE.name:
        return [round(x, 4) for x in _walk(rng, n, 0.7, 0.95, 0.005)]
    if name == c.TRAINING_MEMORY_USED_BYTES.name:
        return [round(x) for x in _walk(rng, n, 2e9, 16e9, 1e8)]
    if name == c.TRAINING_GPU_MEMORY_RESERVED_BYTES.name:  # an allocator's cache grows in steps, then holds
        return [float(round(x / 2**28) * 2**28) for x in _walk(rng, n, 4e9, 60e9, 5e8)]
    if name == c.TRAINING_CPU_USAGE_PERCENT.name:
        return [round(x, 1) for x in _walk(rng, n, 50.0, 800.0, 20.0)]
    if name == c.CHECKPOINT_SIZE_BYTES.name:
        return [float(rng.choice((2.5e8, 5e8, 1e9)))] * n
    if name == c.TRAINING_ACTIVE_WORKERS.name:
        return [4.0] * n
    if name == c.TRAINING_FOLD_EPOCH.name:
        return [20.0] * n
    if name == c.TRAINING_FOLD_DURATION_SECONDS.name:
        return [round(rng.uniform(300, 900), 1)] * n
    if name == c.TRAINING_FOLDS_PLANNED.name:
        return [5.0] * n
    if name == c.TRAINING_DATA_BATCHES_TOTAL.name:
        return _counter(rng, n, 10.0, interval)
    if name == c.CHECKPOINT_LAST_GOOD_STEP.name:  # a good save every 5 minutes at 2 steps per second
        return [float(600 * (i * interval // 300)) for i in range(n)]
    if name == c.TRAINING_STEPS_TOTAL.name:
        return _counter(rng, n, 2.0, interval)
    if name == c.TRAINING_MODEL_FLOPS_TOTAL.name:  # 2 steps per second of ~50 TFLOPs each
        return _counter(rng, n, 1e14, interval)
    if name == c.CHECKPOINT_WRITTEN_BYTES_TOTAL.name:  # a 500 MB checkpoint every 5 minutes
        return _counter(rng, n, 5e8 / 300, interval)
    if name == c.TRAINING_COLLECTIVE_OPERATIONS_TOTAL.name:  # a few gradient buckets per step
        return _counter(rng, n, 8.0, interval)
    if name == c.TRAINING_COLLECTIVE_BYTES_TOTAL.name:  # ~100 MB of gradients per step
        return _counter(rng, n, 2e8, interval)
    if name == c.TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL.name:
        return _counter(rng, n, 0.2, interval)
    if name == c.TRAINING_SAMPLES_TOTAL.name:
        return _counter(rng, n, 128.0, interval)
    if name == c.TRAINING_TOKENS_TOTAL.name:  # tabular and RL models read no tokens
        return [0.0] * n
    if name == c.CHECKPOINT_SAVES_TOTAL.name:
        return _counter(rng, n, 1 / 300, interval)
    if name == c.TRAINING_FOLDS_COMPLETED_TOTAL.name:
        return _counter(rng, n, 1 / 720, interval)
    if name == c.TRAINING_ROLLBACK_BUDGET.name:
        return [3.0] * n
    if name in (c.TRAINING_ROLLBACKS_TOTAL.name, c.TRAINING_RESUMED.name):
        return [0.0] * n
    if name == c.TRAINING_STEP_LOSS.name:
        return [round(x, 4) for x in _walk(rng, n, 0.1, 2.0, 0.02)]
    if name == c.TRAINING_GRADIENT_NORM.name:
        return [round(x, 3) for x in _walk(rng, n, 0.1, 10.0, 0.2)]
    if name == c.TRAINING_LEARNING_RATE.name:  # a cosine schedule's slow decay
        peak = rng.choice((1e-4, 3e-4, 1e-3))
        return [peak * (0.5 + 0.5 * math.cos(math.pi * i / (4 * n))) for i in range(n)]
    rl_walks = {
        c.RL_Q_VALUE.name: (0.0, 50.0, 1.0),
        c.RL_POLICY_ENTROPY.name: (0.2, 0.69, 0.01),
        c.RL_VALUE_LOSS.name: (1.0, 100.0, 2.0),
        c.RL_APPROX_KL.name: (0.0, 0.03, 0.002),
        c.RL_CLIP_FRACTION.name: (0.0, 0.3, 0.01),
        c.RL_EXPLAINED_VARIANCE.name: (-0.2, 0.95, 0.02),
        c.RL_EPISODE_REWARD.name: (10.0, 500.0, 5.0),
        c.RL_EPISODE_LENGTH.name: (10.0, 500.0, 5.0),
        c.HPO_BEST_VALUE.name: (0.1, 0.3, 0.0),
        c.HPO_OBJECTIVE_VALUE.name: (0.1, 0.6, 0.02),
        c.HPO_TRIAL_LOSS.name: (0.1, 2.0, 0.05),
    }
    if name in rl_walks:
        return [round(x, 4) for x in _walk(rng, n, *rl_walks[name])]
    if name == c.RL_EXPLORATION_RATE.name:
        return [round(max(0.05, 1.0 - i / n), 4) for i in range(n)]
    if name == c.HPO_TRIALS.name:
        return [float(rng.randint(0, 20))] * n
    if name == c.HPO_TRIAL_NUMBER.name:
        first = rng.randint(0, 100)
        return [float(first + i // 20) for i in range(n)]
    if name == c.HPO_TRIAL_EPOCH.name:
        return [float(i % 20) for i in range(n)]
    if name == c.RL_EPISODES_TOTAL.name:
        return _counter(rng, n, 0.5, interval)
    if name == c.HPO_TRIAL_EPOCHS_TOTAL.name:
        return _counter(rng, n, 1 / 30, interval)
    if name == c.TRAINING_NAN_COUNT.name:
        return _step_once(rng, n) if variant == 13 else [0.0] * n
    if name in (
        c.TRAINING_GRADIENT_EXPLOSION_TOTAL.name,
        c.TRAINING_FAILURES_TOTAL.name,
        c.CHECKPOINT_SAVE_FAILURES_TOTAL.name,
        c.FEATURE_ENGINEERING_ERRORS_TOTAL.name,
    ):
        return [0.0] * n
    if name in (c.TRAINING_RANK_INFO.name,):
        return [1.0] * n
    if name == c.TRAINING_STEPS_TOTAL.name:
        return _counter(rng, n, 1.0, interval)
    if name == c.TRAINING_SAMPLES_TOTAL.name:
        return _counter(rng, n, 32.0, interval)
    if name == c.TRAINING_TOKENS_TOTAL.name:
        return _counter(rng, n, 32.0 * 2048, interval)
    if name == c.TRAINING_PHASE_SECONDS_TOTAL.name:
        return _counter(rng, n, 0.25, interval)
    if name in (c.TRAINING_LAST_STEP_TIMESTAMP_SECONDS.name, c.CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS.name):
        start = 1.7e9 + rng.randint(0, 10_000)
        return [start + i * interval for i in range(n)]
    if name == c.CHECKPOINT_LAST_GOOD_STEP.name:
        first = rng.randint(0, 5000)
        return [float(first + 100 * (i // 20)) for i in range(n)]
    return _generic_job_values(name, rng, n, interval)


def _generic_job_values(name: str, rng: random.Random, n: int, interval: int) -> Values:
    """Values for a training-job metric without a pattern of its own, by its type: a counter grows
    slowly, a timestamp advances with the samples, any other gauge holds a value."""
    metric = catalog.by_name(name)
    if metric.type is catalog.MetricType.COUNTER:
        return _counter(rng, n, 0.5, interval)
    if name.endswith("_timestamp_seconds"):
        start = 1.7e9 + rng.randint(0, 10_000)
        return [start + i * interval for i in range(n)]
    if metric.type is catalog.MetricType.INFO:
        return [1.0] * n
    return [round(rng.uniform(0.5, 5.0), 3)] * n


def body(values: Sequence[str], timestamps: Sequence[str]) -> str:
    """`<PLACEHOLDER> value timestamp` lines; replace the placeholder with a series' name{labels}."""
    return "".join(f"{PLACEHOLDER} {v} {t}\n" for v, t in zip(values, timestamps, strict=True))
