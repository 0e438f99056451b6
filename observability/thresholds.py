"""Alert thresholds as data: `observability/thresholds.yaml` holds each number once.

Every generator reads a threshold through `ObservabilityConfig.thresholds`: the alert's expression
(`Threshold.promql`), its summary and description (`Threshold.text`, `Threshold.short`), the
dashboard threshold steps that show it (`Threshold.value`, `Threshold.percent`), and the rule tests'
boundary cases. Changing a value in the YAML file changes all of them; nothing else is edited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import yaml

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.yaml")

Unit = Literal["percent", "ratio", "celsius", "seconds", "per_second", "epochs_per_second", "score", "factor"]

# Inclusive lower, inclusive upper bound per unit (a ratio or factor is a fraction, a percent 0-100).
_RANGES: dict[str, tuple[float, float]] = {
    "percent": (0.0, 100.0),
    "ratio": (0.0, 1.0),
    "celsius": (1.0, 150.0),
    "seconds": (0.001, 30 * 86400.0),
    "per_second": (0.0001, 1e6),
    "epochs_per_second": (0.0001, 1e6),
    "score": (0.0, 1e6),
    "factor": (0.0, 1.0),
}


def _number(value: float) -> str:
    """The shortest faithful spelling of a value: 85, 0.9, 93.5, 0.099 (never 0.9900000000000001)."""
    return f"{round(value, 9):.9g}"


@dataclass(frozen=True)
class Threshold:
    """One alert threshold: its value and unit, spelled for PromQL and for people."""

    value: float
    unit: Unit

    @property
    def promql(self) -> str:
        """The number as an alert expression compares with it."""
        return _number(self.value)

    @property
    def percent(self) -> float:
        """The value in percent (ratios and factors), as dashboards in percent units show it."""
        return round(self.value * 100, 9) if self.unit in ("ratio", "factor") else self.value

    @property
    def short(self) -> str:
        """Compact form for descriptions: 90%, 85 °C, 100ms, 5s, 24h, 0.1/s."""
        match self.unit:
            case "percent":
                return f"{_number(self.value)}%"
            case "ratio" | "factor":
                return f"{_number(self.value * 100)}%"
            case "celsius":
                return f"{_number(self.value)} °C"
            case "seconds":
                return _short_duration(self.value)
            case "per_second":
                return f"{_number(self.value)}/s"
            case _:
                return _number(self.value)

    @property
    def text(self) -> str:
        """Words for a summary: 90%, 85 °C, 100 ms, 5 seconds, 24 hours, 0.1 epochs per second."""
        match self.unit:
            case "seconds":
                return _long_duration(self.value)
            case "per_second":
                return "once per second" if self.value == 1 else f"{_number(self.value)} times per second"
            case "epochs_per_second":
                return f"{_number(self.value)} epochs per second"
            case _:
                return self.short


def _short_duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and not (unit == "m" and seconds < 120):
            return f"{_number(seconds / size)}{unit}"
    return f"{_number(seconds * 1000)}ms"


def _long_duration(seconds: float) -> str:
    for unit, size in (("hours", 3600), ("minutes", 60), ("seconds", 1)):
        if seconds >= size and not (unit == "minutes" and seconds < 120):
            amount = seconds / size
            return f"{_number(amount)} {unit[:-1] if amount == 1 else unit}"
    return f"{_number(seconds * 1000)} ms"


@dataclass(frozen=True)
class Thresholds:
    """Every alert threshold (names as in thresholds.yaml, snake_case here; units in `UNITS`)."""

    gpu_utilization_low_percent: Threshold
    gpu_utilization_high_percent: Threshold
    gpu_memory_high_ratio: Threshold
    gpu_memory_exhausted_ratio: Threshold
    gpu_temperature_high_celsius: Threshold
    gpu_memory_prediction_floor_ratio: Threshold
    training_slowdown_epochs_per_second: Threshold
    inference_p99_seconds: Threshold
    model_loading_failures_per_second: Threshold
    model_cache_miss_ratio: Threshold
    model_drift_score: Threshold
    feature_distribution_distance: Threshold
    prediction_confidence_median: Threshold
    model_accuracy_drop_factor: Threshold
    training_data_stale_seconds: Threshold
    feature_engineering_errors_per_second: Threshold
    feature_extraction_p95_seconds: Threshold
    s3_errors_per_second: Threshold
    model_storage_used_ratio: Threshold
    gpu_poller_collection_slow_seconds: Threshold
    rule_group_slow_interval_ratio: Threshold
    training_data_wait_ratio: Threshold
    training_checkpoint_ratio: Threshold
    training_communication_ratio: Threshold
    training_compute_saturated_ratio: Threshold
    training_compute_saturated_gpu_busy_percent: Threshold

    def scaled(self, factor: float) -> Thresholds:
        """Every threshold times `factor` (what-if tests); a value that leaves its unit's range is an error."""
        return parse_thresholds(
            {key: round(value * factor, 6) for key, value in dump_thresholds(self).items()}, f"thresholds x {factor:g}"
        )


UNITS: dict[str, Unit] = {
    "gpu_utilization_low_percent": "percent",
    "gpu_utilization_high_percent": "percent",
    "gpu_memory_high_ratio": "ratio",
    "gpu_memory_exhausted_ratio": "ratio",
    "gpu_temperature_high_celsius": "celsius",
    "gpu_memory_prediction_floor_ratio": "ratio",
    "training_slowdown_epochs_per_second": "epochs_per_second",
    "inference_p99_seconds": "seconds",
    "model_loading_failures_per_second": "per_second",
    "model_cache_miss_ratio": "ratio",
    "model_drift_score": "score",
    "feature_distribution_distance": "score",
    "prediction_confidence_median": "ratio",
    "model_accuracy_drop_factor": "factor",
    "training_data_stale_seconds": "seconds",
    "feature_engineering_errors_per_second": "per_second",
    "feature_extraction_p95_seconds": "seconds",
    "s3_errors_per_second": "per_second",
    "model_storage_used_ratio": "ratio",
    "gpu_poller_collection_slow_seconds": "seconds",
    "rule_group_slow_interval_ratio": "ratio",
    "training_data_wait_ratio": "ratio",
    "training_checkpoint_ratio": "ratio",
    "training_communication_ratio": "ratio",
    "training_compute_saturated_ratio": "ratio",
    "training_compute_saturated_gpu_busy_percent": "percent",
}


# The alert each threshold belongs to (its expression compares with it).
ALERTS: dict[str, str] = {
    "gpu_utilization_low_percent": "GPUUtilizationLow",
    "gpu_utilization_high_percent": "GPUUtilizationCritical",
    "gpu_memory_high_ratio": "GPUMemoryUsageHigh",
    "gpu_memory_exhausted_ratio": "GPUMemoryExhausted",
    "gpu_temperature_high_celsius": "GPUTemperatureHigh",
    "gpu_memory_prediction_floor_ratio": "GPUMemoryExhaustionPredicted",
    "training_slowdown_epochs_per_second": "TrainingSlowdown",
    "inference_p99_seconds": "MLInferenceLatencyHigh",
    "model_loading_failures_per_second": "ModelLoadingFailures",
    "model_cache_miss_ratio": "ModelCacheMissesHigh",
    "model_drift_score": "ModelDriftDetected",
    "feature_distribution_distance": "FeatureDistributionShift",
    "prediction_confidence_median": "PredictionConfidenceLow",
    "model_accuracy_drop_factor": "MLModelAccuracyDegraded",
    "training_data_stale_seconds": "TrainingDataStale",
    "feature_engineering_errors_per_second": "FeatureEngineeringErrors",
    "feature_extraction_p95_seconds": "FeatureExtractionLatencyHigh",
    "s3_errors_per_second": "S3ConnectionErrors",
    "model_storage_used_ratio": "ModelStorageUsageHigh",
    "gpu_poller_collection_slow_seconds": "GPUPollerCollectionSlow",
    "rule_group_slow_interval_ratio": "RuleGroupSlow",
    "training_data_wait_ratio": "TrainingInputBound",
    "training_checkpoint_ratio": "TrainingCheckpointBound",
}

# The recording rule each threshold without an alert belongs to (its expression compares with it).
RECORDS: dict[str, str] = {
    "training_communication_ratio": "model_type_job_id_verdict:ml_training_bottleneck:share",
    "training_compute_saturated_ratio": "model_type_job_id_verdict:ml_training_bottleneck:info",
    "training_compute_saturated_gpu_busy_percent": "model_type_job_id_verdict:ml_training_bottleneck:info",
}


def yaml_key(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class ThresholdsError(ValueError):
    """thresholds.yaml is malformed: every problem, one per line, naming the key and the value."""


def parse_thresholds(document: Any, source: str = THRESHOLDS_FILE.name) -> Thresholds:
    if not isinstance(document, dict):
        raise ThresholdsError(f"{source}: expected a mapping of threshold name to number")
    problems: list[str] = []
    known = {yaml_key(f.name): f for f in fields(Thresholds)}
    for extra in sorted(set(map(str, document)) - set(known)):
        problems.append(f"{source}: {extra} is not a known threshold: expected one of {', '.join(sorted(known))}")
    values: dict[str, Threshold] = {}
    for key, f in known.items():
        unit = UNITS[f.name]
        low, high = _RANGES[unit]
        raw = document.get(key)
        number = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else math.nan
        if raw is None:
            problems.append(f"{source}: {key} is missing: expected a number from {low:g} to {high:g} ({unit})")
        elif not low < number <= high:
            problems.append(f"{source}: {key} = {raw!r}: expected a number above {low:g} and at most {high:g}")
        values[f.name] = Threshold(number, unit)
    if problems:
        raise ThresholdsError("\n".join(problems))
    return Thresholds(**values)


def load_thresholds(path: Path = THRESHOLDS_FILE) -> Thresholds:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ThresholdsError(f"{path.name} is not valid YAML: {exc}") from exc
    return parse_thresholds(document, path.name)


def dump_thresholds(thresholds: Thresholds) -> dict[str, float]:
    return {yaml_key(f.name): getattr(thresholds, f.name).value for f in fields(thresholds)}


DEFAULT_THRESHOLDS = load_thresholds()
