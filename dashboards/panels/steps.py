"""Step panels: how fast each rank of a job steps, whether it still does, how long an iteration
takes and where a step's time goes. `job` is the dashboard's matchers of one job; `model` its
model-type matcher."""

from __future__ import annotations

from dashboards.panels import JOB_LEGEND, Common, PanelBuilder, Query, duration_heatmap, stat, timeseries
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec

PER_RANK = ("model_type", "job_id", "rank")
RANK_LEGEND = "{{job_id}} rank {{rank}}"


def steps_per_second_by_rank(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Steps per Second by Rank",
            "Optimizer steps each rank of $job_id completes per second.",
            "short",
            w=w,
            min=0,
        ),
        [Query(promql.aggregate("sum", PER_RANK, promql.rate(catalog.TRAINING_STEPS_TOTAL, job)), RANK_LEGEND)],
    )


def seconds_since_last_step_by_rank(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Seconds Since Last Step by Rank",
            "How long ago each rank of $job_id completed its latest step: a rank that stops advancing climbs.",
            "s",
            w=w,
            min=0,
        ),
        [Query(f"time() - {promql.gauge(catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS, job)}", RANK_LEGEND)],
    )


def ranks_reporting(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return stat(
        Common("Ranks Reporting", "Processes of $job_id that report, out of the job's world size.", "short", w=w),
        [
            Query(
                promql.aggregate("count", ("job_id", "world_size"), promql.gauge(catalog.TRAINING_RANK_INFO, job)),
                "{{job_id}} of {{world_size}}",
            )
        ],
    )


def throughput(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Throughput",
            "Samples and tokens per second of $job_id, all ranks together.",
            "short",
            w=w,
            min=0,
        ),
        [
            Query(
                promql.aggregate("sum", ("job_id",), promql.rate(catalog.TRAINING_SAMPLES_TOTAL, job)),
                "{{job_id}} samples/s",
            ),
            Query(
                promql.aggregate("sum", ("job_id",), promql.rate(catalog.TRAINING_TOKENS_TOTAL, job)),
                "{{job_id}} tokens/s",
            ),
        ],
    )


def time_per_step(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    """Data wait and compute per optimizer step, as the PyTorch integration times them."""
    per_job = ("model_type", "job_id")
    step_phases = (*job, 'phase=~"data_wait|compute"')
    phase_seconds = promql.rate(catalog.TRAINING_PHASE_SECONDS_TOTAL, step_phases)
    per_step = (
        f"{promql.aggregate('sum', (*per_job, 'phase'), phase_seconds)}\n/ ignoring(phase) group_left\n"
        f"{promql.aggregate('sum', per_job, promql.rate(catalog.TRAINING_STEPS_TOTAL, job))}"
    )
    return timeseries(
        Common(
            "Time per Step: Data Wait and Compute",
            "Seconds each optimizer step of $job_id waited for data (the loader's next()) and computed, "
            "per rank on average: a data wait near the compute time means the input pipeline is the "
            "bottleneck.",
            "s",
            w=w,
            min=0,
        ),
        [Query(per_step, "{{job_id}} {{phase}}")],
        stacked=True,
    )


# The recorded iteration-duration percentiles.
ITERATION_PERCENTILES = {50: rec.ITERATION_SECONDS_P50, 95: rec.ITERATION_SECONDS_P95}


def _iteration_percentiles(
    title: str, description: str, percentiles: tuple[int, ...], matchers: tuple[str, ...], w: int
) -> PanelBuilder:
    return timeseries(
        Common(title, description, "s", w=w),
        [Query(promql.selector(ITERATION_PERCENTILES[q].record, matchers), f"p{q} {JOB_LEGEND}") for q in percentiles],
    )


def iteration_seconds(model: str, *, w: int) -> PanelBuilder:
    return _iteration_percentiles(
        "Iteration Seconds", "Median and 95th percentile duration of one training iteration.", (50, 95), (model,), w
    )


def iteration_duration_p95(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _iteration_percentiles(
        "Training Iteration Duration", "95th percentile duration of a training iteration.", (95,), job, w
    )


def iteration_seconds_histogram(model: str, *, w: int) -> PanelBuilder:
    return duration_heatmap(
        "Iteration Seconds Histogram",
        "Distribution of training iteration durations over time; an exemplar opens the trace of "
        "the iteration it was recorded in.",
        catalog.TRAINING_ITERATION_SECONDS,
        (model,),
        w=w,
        exemplar=True,
    )
