"""Dashboard threshold steps that show an alert's threshold, derived from it (thresholds.yaml).

A panel that colours a value by an alert's threshold takes its steps from here, so changing the
threshold moves the alert, its text and the colours together. Values only dashboards use (what is
"good") are constants here, kept in order with the alert thresholds around them.
"""

from __future__ import annotations

from dashboards.panels import GREEN, RED, YELLOW, ColourSteps
from observability.thresholds import Thresholds

GOOD_TRAINING_SPEED = 0.5  # epochs per second shown green
GOOD_GPU_UTILIZATION = 60  # percent from which utilization is shown green
TEMPERATURE_WARNING_MARGIN = 10  # °C below the GPUTemperatureHigh threshold that is shown yellow


def training_speed_steps(th: Thresholds) -> ColourSteps:
    """Red below the TrainingSlowdown threshold, yellow to 0.5 epochs/s, green above."""
    slow = th.training_slowdown_epochs_per_second.value
    return ColourSteps(RED, ((slow, YELLOW), (max(GOOD_TRAINING_SPEED, slow), GREEN)))


def gpu_utilization_steps(th: Thresholds) -> ColourSteps:
    """Red below GPUUtilizationLow's threshold (waste) and above GPUUtilizationCritical's, green from 60%."""
    low, high = th.gpu_utilization_low_percent.value, th.gpu_utilization_high_percent.value
    return ColourSteps(RED, ((low, YELLOW), (min(max(GOOD_GPU_UTILIZATION, low), high), GREEN), (high, RED)))


def gpu_memory_steps(th: Thresholds) -> ColourSteps:
    """Yellow from GPUMemoryUsageHigh's threshold, red from GPUMemoryExhausted's (in percent)."""
    return ColourSteps(
        GREEN, ((th.gpu_memory_high_ratio.percent, YELLOW), (th.gpu_memory_exhausted_ratio.percent, RED))
    )


def gpu_memory_ratio_steps(th: Thresholds) -> ColourSteps:
    """The memory steps for a panel that shows the fraction (0-1) rather than percent."""
    return ColourSteps(GREEN, ((th.gpu_memory_high_ratio.value, YELLOW), (th.gpu_memory_exhausted_ratio.value, RED)))


def temperature_steps(th: Thresholds) -> ColourSteps:
    """Red above GPUTemperatureHigh's threshold, yellow in the 10 °C below it."""
    hot = th.gpu_temperature_high_celsius.value
    return ColourSteps(GREEN, ((hot - TEMPERATURE_WARNING_MARGIN, YELLOW), (hot, RED)))
