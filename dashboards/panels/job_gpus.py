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
        f"Share of time a kernel ran, per GPU the job holds alone (a MIG device: its SM activity); red below {low} "
        f"or above {high}, the thresholds the job's mean is alerted at (GPUUtilizationLow, GPUUtilizationCritical). "
        "A GPU other jobs share is not drawn: its figure is no one job's (see Shared GPUs).",
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
        "Share of device memory in use, per GPU (a GPU other jobs share: what this job's own processes hold); "
        f"yellow from {th.gpu_memory_high_ratio.short} "
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
    return _held(
        "Job GPU Power",
        "Power draw (a GPU other jobs share: split evenly between them; a MIG device has none, its GPU's is "
        "the whole GPU's).",
        "watt",
        jobs.HELD_POWER,
        job,
        w,
        min=0,
    )


def own_memory(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Job's Own GPU Memory",
            "Device memory the job's own processes hold on each GPU, as their allocator reports it "
            "(ml_training_gpu_memory_reserved_bytes, PyTorch's reserved memory): on a GPU other jobs share, "
            "this job's part of the device's memory.",
            "bytes",
            w=w,
            min=0,
        ),
        [Query(f"topk({JOB_GPUS}, {promql.selector(jobs.JOB_GPU_RESERVED.record, job)})", "{{uuid}}")],
    )


def shared_gpus(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _so_far(
        "Shared GPUs (Time-Sliced)",
        "GPUs the job holds that other jobs hold at the same time. On these the device's utilization is no one "
        "job's: the job's utilization and verdict come from its own time split, its memory from its own "
        "processes, and the GPU's price and power are split between the jobs.",
        "short",
        jobs.JOB_SHARED_GPUS.record,
        job,
        w,
    )


def sm_share(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _held(
        "Job GPU Share of SMs",
        "Each GPU's share of a whole GPU's SMs: 1 for a whole GPU, a MIG device's compute slices over 7 "
        "(ml_gpu_mig_sm_share_ratio); its peak FLOPs (MFU) and, with migCost compute_share, its price scale by it.",
        "percentunit",
        jobs.HELD_SM_SHARE,
        job,
        w,
        min=0,
        max=1,
    )


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
    return _so_far(
        "GPUs Held", "GPUs (whole GPUs and MIG devices) the job holds now.", "short", jobs.JOB_GPUS.record, job, w
    )


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
