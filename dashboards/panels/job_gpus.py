"""One job's GPUs: each GPU the job holds (from the recorded held-GPU series, so two 1-GPU jobs on
one node are two different views), and what the job has used and cost so far. `job` is the
dashboard's matchers of one job."""

from __future__ import annotations

from typing import Any

from dashboards.panels import Common, PanelBuilder, Query, currency_unit, stat, timeseries
from dashboards.panels.gpu import GPU_LEGEND
from dashboards.threshold_steps import gpu_memory_ratio_steps, gpu_utilization_steps, temperature_steps
from observability import promql
from observability.config import ObservabilityConfig
from observability.rules import goodput, jobs
from observability.rules.rule_types import RecordingRule
from observability.thresholds import Thresholds

# GPUs of one job a panel draws at most (a job of up to two 8-GPU nodes is drawn whole).
JOB_GPUS = 16
ESTIMATE = (
    "An estimate, counted from when Prometheus first recorded the job: the stack's prices "
    "(gpuHourlyCost by GPU model, energyPricePerKWh), not an invoice."
)


def _held(
    title: str, description: str, unit: str, rule: RecordingRule, job: tuple[str, ...], w: int, **extra: Any
) -> PanelBuilder:
    return timeseries(
        Common(title, f"{description} Each GPU job $job_id holds (up to {JOB_GPUS}).", unit, w=w, **extra),
        [Query(f"topk({JOB_GPUS}, {promql.selector(rule.record, job)})", GPU_LEGEND)],
    )


def _so_far(title: str, description: str, unit: str, record: str, job: tuple[str, ...], w: int) -> PanelBuilder:
    return stat(
        Common(title, description, unit, w=w, min=0),
        [Query(promql.aggregate("sum", ("job_id",), promql.selector(record, job)), "{{job_id}}", instant=True)],
    )


def utilization(th: Thresholds, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    low, high = th.gpu_utilization_low_percent.short, th.gpu_utilization_high_percent.short
    return _held(
        "Job GPU Utilization",
        f"Share of time a kernel ran, per GPU; red below {low} or above {high}, the thresholds the job's "
        "mean is alerted at (GPUUtilizationLow, GPUUtilizationCritical).",
        "percent",
        jobs.HELD_UTILIZATION,
        job,
        w,
        min=0,
        max=100,
        thresholds=gpu_utilization_steps(th),
    )


def memory_used(th: Thresholds, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _held(
        "Job GPU Memory Used",
        f"Share of device memory in use, per GPU; yellow from {th.gpu_memory_high_ratio.short} "
        f"(GPUMemoryUsageHigh), red from {th.gpu_memory_exhausted_ratio.short} (GPUMemoryExhausted).",
        "percentunit",
        jobs.HELD_MEMORY_RATIO,
        job,
        w,
        min=0,
        max=1,
        thresholds=gpu_memory_ratio_steps(th),
    )


def power(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _held("Job GPU Power", "Power draw.", "watt", jobs.HELD_POWER, job, w, min=0)


def temperature(th: Thresholds, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _held(
        "Job GPU Temperature",
        f"Core temperature; throttling risk above {th.gpu_temperature_high_celsius.short}.",
        "celsius",
        jobs.HELD_TEMPERATURE,
        job,
        w,
        thresholds=temperature_steps(th),
    )


def gpus_held(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far("GPUs Held", "GPUs the job holds now.", "short", jobs.JOB_GPUS.record, job, w)


def gpu_hours(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        "GPU-Hours So Far",
        "GPUs held times the time held, since the job was first recorded.",
        "h",
        jobs.JOB_GPU_HOURS.record,
        job,
        w,
    )


def energy(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        "Energy So Far",
        "Energy the job's GPUs consumed (NVML energy counters) since the job was first recorded.",
        "kwatth",
        jobs.JOB_KWH.record,
        job,
        w,
    )


def cost(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        f"Estimated Cost So Far ({cfg.currency})",
        f"GPU-hours at their price plus energy. {ESTIMATE}",
        currency_unit(cfg),
        jobs.JOB_COST,
        job,
        w,
    )


def badput_cost(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        f"Badput Cost So Far ({cfg.currency})",
        "The share of the estimated cost spent outside productive training steps (waiting for data, "
        f"checkpoints, collectives, evaluation, start-up, redone work, idle). {ESTIMATE}",
        currency_unit(cfg),
        goodput.BADPUT_COST,
        job,
        w,
    )


def checkpoint_storage_cost(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        f"Checkpoint Storage Cost ({cfg.currency})",
        f"Checkpoint bytes the job has saved, each kept {cfg.checkpoint_retention_days:g} days at "
        f"{cfg.checkpoint_storage_price_per_gb_month:g} {cfg.currency} per GB-month (stack settings "
        "checkpointStoragePricePerGBMonth, checkpointRetentionDays): an estimate, not an invoice.",
        currency_unit(cfg),
        goodput.CHECKPOINT_STORAGE_COST,
        job,
        w,
    )
