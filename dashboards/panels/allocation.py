"""GPU allocation panels: the fleet's GPUs held by training jobs (the jobs' GPU info joined on the
GPU's uuid), free, and held while idle."""

from __future__ import annotations

from dashboards.panels import GREEN, YELLOW, ColourSteps, Common, PanelBuilder, Query, ThresholdStyle, timeseries
from observability.rules import jobs
from observability.thresholds import Thresholds


def held_and_free(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Held vs Free GPUs",
            "GPUs of the fleet held by a training job (ml_training_job_gpu_info joined on uuid) and GPUs "
            "no job holds (free capacity), as the pollers report them.",
            "short",
            w=w,
            min=0,
        ),
        [Query(jobs.FLEET_HELD.record, "held by a job"), Query(jobs.FLEET_UNHELD.record, "free")],
        stacked=True,
        fill_opacity=40,
    )


def mig_and_shared(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "MIG Devices Held and Shared GPUs",
            "MIG devices a training job holds (ml_gpu_mig_device_info joined on uuid), and GPUs held by more than "
            "one job at once (time-sliced: their device figures are split by job, never copied to each).",
            "short",
            w=w,
            min=0,
        ),
        [Query(jobs.FLEET_MIG_HELD.record, "MIG devices held"), Query(jobs.FLEET_SHARED.record, "shared GPUs")],
    )


def held_but_idle(th: Thresholds, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Held but Idle GPUs",
            f"GPUs a training job holds while they run below {th.gpu_utilization_low_percent.short} utilization: "
            "paid for and idle (GPUUtilizationLow names the jobs).",
            "short",
            w=w,
            min=0,
            thresholds=ColourSteps(GREEN, ((1, YELLOW),)),
        ),
        [Query(jobs.FLEET_HELD_IDLE, "held, idle")],
        threshold_style=ThresholdStyle.AREA,
    )
