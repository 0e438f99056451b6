"""The GPU alert group as it was before jobs owned their GPUs, for the fleet benchmark's comparison.

Not deployed anywhere: the benchmark evaluates it on the same synthetic fleet, in the same run, next
to the current `ml_gpu_resources`, to show what judging utilization per job instead of per GPU
changes (active alerts at steady state, and the group's cost). The utilization alerts fired per GPU
(every idle or saturated GPU, held by a job or not); the hardware alerts read the poller's series
themselves, with no job join and no recorded inputs. Annotations are the current ones (five per
alert), so both groups pay the same template cost per active alert.
"""

from __future__ import annotations

from typing import Any

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import by, counter_increased
from observability.rules import alert_rules, gpu
from observability.rules.detection import event_window_seconds

GROUP = "ml_gpu_resources (previous design, not deployed)"
_PER_GPU_UTILIZATION = f"max {by(gpu.GPU_LABELS)} ({catalog.GPU_UTILIZATION_PERCENT.name})"
_GPU = "GPU {{ $labels.gpu_id }} ({{ $labels.gpu_name }}, {{ $labels.uuid }}) on node {{ $labels.node }}"


def _memory_ratio_above(ratio: str) -> str:
    used, total = catalog.GPU_MEMORY_USED_BYTES.name, catalog.GPU_MEMORY_TOTAL_BYTES.name
    return f"max {by(gpu.GPU_LABELS)} ({used} / {total} > {ratio})"


def _hardware_expr(cfg: ObservabilityConfig, name: str) -> str:
    """The per-GPU hardware alerts as they were: each reads the poller's series itself."""
    th = cfg.thresholds
    exprs = {
        "GPUMemoryUsageHigh": _memory_ratio_above(th.gpu_memory_high_ratio.promql),
        "GPUMemoryExhausted": _memory_ratio_above(th.gpu_memory_exhausted_ratio.promql),
        "GPUTemperatureHigh": (
            f"max {by(gpu.GPU_LABELS)} "
            f"({catalog.GPU_TEMPERATURE_CELSIUS.name} > {th.gpu_temperature_high_celsius.promql})"
        ),
        "GPUErrorsDetected": counter_increased(catalog.GPU_ERRORS_TOTAL, event_window_seconds(cfg), gpu.GPU_LABELS),
    }
    if name not in exprs:
        raise ValueError(f"{name} has no previous-design expression")
    return exprs[name]


def previous_gpu_group(cfg: ObservabilityConfig) -> dict[str, Any]:
    """`ml_gpu_resources` with per-GPU utilization alerts and no job join (the six alerts as first written)."""
    low = cfg.thresholds.gpu_utilization_low_percent
    high = cfg.thresholds.gpu_utilization_high_percent
    rules = []
    for alert in alert_rules(cfg):
        if alert.group != gpu.GROUP or alert.name == "GPUMemoryExhaustionPredicted":
            continue
        rule = alert.to_rule(cfg)
        if alert.name == "GPUUtilizationLow":
            rule["expr"] = f"{_PER_GPU_UTILIZATION} < {low.promql}"
            rule["annotations"]["description"] = (
                f'{_GPU} has been {{{{ printf "%.1f" $value }}}}% busy, below {low.short} for 10m.'
            )
        elif alert.name == "GPUUtilizationCritical":
            rule["expr"] = f"max {by(gpu.GPU_LABELS)} ({catalog.GPU_UTILIZATION_PERCENT.name} > {high.promql})"
            rule["annotations"]["description"] = (
                f'{_GPU} has been {{{{ printf "%.1f" $value }}}}% busy, above {high.short} for 5m.'
            )
        else:
            rule["expr"] = _hardware_expr(cfg, alert.name)
        rules.append(rule)
    return {"name": GROUP, "interval": f"{cfg.evaluation_interval_seconds}s", "rules": rules}
