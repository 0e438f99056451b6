"""Training-efficiency panels: the bottleneck verdict, MFU, goodput and badput of a job; the fleet's
GPU-hours by verdict and its biggest wasters; the cost of GPUs, of badput and of checkpoint storage,
and the energy the jobs used.
`job` is the dashboard's matchers selecting one job; `model` its model-type matcher."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import (
    JOB_LEGEND,
    Common,
    PanelBuilder,
    Query,
    bar_gauge,
    currency_unit,
    prometheus_table,
    stat,
    timeseries,
    worst_now,
)
from foxhunt_trainer.contract import verdicts
from observability import promql
from observability.config import ObservabilityConfig
from observability.rules import goodput, jobs
from observability.thresholds import Thresholds

# Each verdict's meaning and hint, as the trainer's end-of-run summary reads them too.
VERDICT_HELP = "; ".join(f"{v.name}: {v.meaning} ({v.hint})" for v in verdicts.VERDICTS) + "."


def _one(record: str, job: Sequence[str]) -> str:
    return promql.selector(record, tuple(job))


def _now(c: Common, queries: Sequence[tuple[str, str]], job: Sequence[str], *, name_only: bool = False) -> PanelBuilder:
    """A headline of the job now: each (recorded series, legend) as one instant value."""
    return stat(c, [Query(_one(record, job), legend, instant=True) for record, legend in queries], name_only=name_only)


def verdict(th: Thresholds, job: Sequence[str]) -> PanelBuilder:
    """The job's verdict in words (the `verdict` label of its one series)."""
    return _now(
        Common(
            "Verdict",
            "What holds $job_id back, judged over the last 5 minutes from where its time goes and how busy its GPUs "
            f"are (GPM SM activity, else NVML utilization). {VERDICT_HELP} Thresholds: data wait above "
            f"{th.training_data_wait_ratio.short}, checkpoints above {th.training_checkpoint_ratio.short}, "
            f"collectives above {th.training_communication_share_ratio.short}; compute-saturated above "
            f"{th.training_compute_saturated_ratio.short} computing on GPUs busier than "
            f"{th.training_compute_saturated_gpu_busy_percent.short}.",
            "none",
            w=8,
            h=5,
        ),
        [(goodput.VERDICT, "{{verdict}}")],
        job,
        name_only=True,
    )


def mfu(job: Sequence[str]) -> PanelBuilder:
    return _now(
        Common(
            "MFU",
            "Model FLOPs utilization over the last 5 minutes: the model FLOP/s $job_id achieves over the dense peak of "
            "the GPUs it holds at its precision (foxhunt_trainer/contract/peak_flops.json). Empty when the job reports "
            "no model FLOPs or holds a GPU model the peak table does not know.",
            "percentunit",
            w=4,
            h=5,
            min=0,
            max=1,
            decimals=1,
        ),
        [(goodput.MFU.record, "MFU")],
        job,
    )


def goodput_now_and_so_far(job: Sequence[str]) -> PanelBuilder:
    return _now(
        Common(
            "Goodput",
            "Share of $job_id's time (all ranks) in productive training steps: over the last 5 minutes, and over its "
            "life so far.",
            "percentunit",
            w=6,
            h=5,
            min=0,
            max=1,
            decimals=1,
        ),
        [(goodput.GOODPUT.record, "last 5m"), (goodput.GOODPUT_SO_FAR.record, "so far")],
        job,
    )


def gpu_busy(job: Sequence[str]) -> PanelBuilder:
    return _now(
        Common(
            "GPU Busy",
            "How busy $job_id's GPUs are: mean SM activity where they have GPM, else NVML utilization (which only "
            "says a kernel ran).",
            "percent",
            w=6,
            h=5,
            min=0,
            max=100,
        ),
        [(goodput.GPU_BUSY.record, "{{source}}")],
        job,
    )


def time_by_phase(job: Sequence[str]) -> PanelBuilder:
    """The badput breakdown over time: every phase's share, compute (goodput) among them."""
    return timeseries(
        Common(
            "Time by Phase",
            "Share of $job_id's wall time (all ranks) in each phase over 5 minutes: compute is goodput, every other "
            "phase is badput by cause (waiting for data, collectives, checkpoints, evaluation, redone work, start-up, "
            "idle).",
            "percentunit",
            w=12,
            min=0,
            max=1,
        ),
        [Query(_one(goodput.PHASE_SHARE.record, job), "{{phase}}")],
        stacked=True,
        fill_opacity=60,
    )


def mfu_and_goodput(job: Sequence[str]) -> PanelBuilder:
    return timeseries(
        Common(
            "MFU and Goodput",
            "Model FLOPs utilization and goodput of $job_id over time (5-minute windows).",
            "percentunit",
            w=12,
            min=0,
            max=1,
        ),
        [Query(_one(goodput.MFU.record, job), "MFU"), Query(_one(goodput.GOODPUT.record, job), "goodput")],
    )


# --- the fleet ---------------------------------------------------------------------------------------
def gpu_hours_by_verdict() -> PanelBuilder:
    return bar_gauge(
        Common(
            "GPU-Hours by Verdict (24 h)",
            "GPU-hours training jobs held over the last 24 hours, by the jobs' bottleneck verdict at the time: "
            f"{goodput.VERDICT_COMPUTE} hours are the GPUs doing the model's work, every other verdict is capacity "
            "lost to the cause it names.",
            "h",
            w=8,
            min=0,
        ),
        [Query(goodput.VERDICT_GPU_HOURS_24H, "{{verdict}}", instant=True)],
    )


def jobs_wasting_gpu_hours(worst: int) -> PanelBuilder:
    return worst_now(
        "Jobs Wasting the Most GPU-Hours",
        f"The {worst} jobs with the most GPU-hours held outside productive training steps so far (GPU-hours held "
        "times the share of the job's life in badput).",
        "h",
        goodput.BADPUT_GPU_HOURS.record,
        worst,
        w=10,
    )


def unknown_gpu_models() -> PanelBuilder:
    return prometheus_table(
        Common(
            "GPU Models Without a Peak",
            "GPU models (as NVML names them) held by training jobs that the peak-FLOPs table "
            "(foxhunt_trainer/contract/peak_flops.json) does not know, with how many are held: their jobs have no MFU "
            "until the model is added with its source.",
            "short",
            w=6,
        ),
        [Query(goodput.UNKNOWN_GPU_MODELS.record, instant=True, format="table")],
    )


def gpus_by_verdict() -> PanelBuilder:
    return timeseries(
        Common(
            "GPUs Held by Verdict", "GPUs held by training jobs, by the jobs' bottleneck verdict.", "short", w=24, min=0
        ),
        [Query(goodput.VERDICT_GPUS, "{{verdict}}")],
        stacked=True,
        fill_opacity=40,
    )


# --- cost -------------------------------------------------------------------------------------------
def _cost(cfg: ObservabilityConfig, title: str, description: str, query: Query) -> PanelBuilder:
    """Estimated cost in the stack's currency, one bar per series."""
    return bar_gauge(Common(title, description, currency_unit(cfg), w=12, min=0), [query])


def badput_cost_per_job(cfg: ObservabilityConfig, model: str) -> PanelBuilder:
    return _cost(
        cfg,
        "Badput cost per job",
        f"Estimated cost ({cfg.currency}) each job has spent so far outside productive training steps (waiting "
        "for data, checkpoints, collectives, evaluation, start-up, redone work, idle): its cost times its badput "
        "share. An estimate from the stack's prices, not an invoice.",
        Query(promql.selector(goodput.BADPUT_COST, (model,)), JOB_LEGEND, instant=True),
    )


def model_cost_24h(cfg: ObservabilityConfig, model: str) -> PanelBuilder:
    return _cost(
        cfg,
        "GPU cost per model type (24 h)",
        f"Estimated cost ({cfg.currency}) of the GPUs each model type's jobs held over the last 24 hours: "
        "GPU-hours at the stack's price per GPU model (gpuHourlyCost) plus their energy at "
        "energyPricePerKWh. An estimate from the stack's prices, not an invoice.",
        Query(promql.selector(jobs.MODEL_COST_24H, (model,)), "{{model_type}}", instant=True),
    )


def energy_per_job(model: str) -> PanelBuilder:
    return bar_gauge(
        Common(
            "Energy per job",
            "Energy (kWh) each job's GPUs have consumed since Prometheus first recorded the job (NVML energy "
            "counters; GPUs that cannot report energy are missing).",
            "kwatth",
            w=12,
            min=0,
        ),
        [Query(promql.selector(jobs.JOB_KWH.record, (model,)), JOB_LEGEND, instant=True)],
    )


def checkpoint_storage_cost_24h(cfg: ObservabilityConfig, model: str) -> PanelBuilder:
    return _cost(
        cfg,
        "Checkpoint storage cost per model type (24 h)",
        f"Estimated storage cost ({cfg.currency}) of the checkpoints each model type's jobs saved over the last "
        f"24 hours, each kept {cfg.checkpoint_retention_days:g} days at "
        f"{cfg.checkpoint_storage_price_per_gb_month:g} {cfg.currency} per GB-month (checkpointRetentionDays, "
        "checkpointStoragePricePerGBMonth). An estimate, not an invoice.",
        Query(promql.selector(goodput.MODEL_CHECKPOINT_STORAGE_COST_24H, (model,)), "{{model_type}}", instant=True),
    )
