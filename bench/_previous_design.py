"""The GPU alert group as it was before jobs owned their GPUs, for the fleet benchmark's comparison.

Not deployed anywhere: the benchmark evaluates it on the same synthetic fleet, in the same run, next
to the current `ml_gpu_resources`, to show what judging utilization per job instead of per GPU
changes (active alerts at steady state, and the group's cost). The utilization alerts fired per GPU
(every idle or saturated GPU, held by a job or not); the hardware alerts were the current ones
without the job join. Annotations are the current ones (five per alert), so both groups pay the
same template cost per active alert.
"""

from __future__ import annotations

from typing import Any

from observability import catalog
from observability.config import ObservabilityConfig
from observability.promql import by
from observability.rules import alert_rules, gpu, jobs

GROUP = "ml_gpu_resources (previous design, not deployed)"
_PER_GPU_UTILIZATION = f"max {by(gpu.GPU_LABELS)} ({catalog.GPU_UTILIZATION_PERCENT.name})"
_GPU = "GPU {{ $labels.gpu_id }} ({{ $labels.gpu_name }}, {{ $labels.uuid }}) on node {{ $labels.node }}"


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
            per_gpu = jobs.unattributed(alert.expr)
            if per_gpu is None:
                raise ValueError(f"{alert.name} is not a job-attributed per-GPU expression")
            rule["expr"] = per_gpu
        rules.append(rule)
    return {"name": GROUP, "interval": f"{cfg.evaluation_interval_seconds}s", "rules": rules}
