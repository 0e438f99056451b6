"""Distributed-training panels: the ranks of a job side by side (compute per step, collective
wait, where each runs), its straggler and hang status, its bandwidth and communication share, and
the fleet's straggling ranks. `job` is the dashboard's matchers of one job; `model` of the model
type. Every figure is one of `observability.rules.distributed`'s recorded series."""

from __future__ import annotations

from dashboards.panels import GREEN, RED, YELLOW, ColourSteps, Common, PanelBuilder, Query, prometheus_table, stat
from dashboards.panels import timeseries as _timeseries
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig
from observability.rules import distributed as d
from observability.thresholds import Threshold

RANK_LEGEND = "rank {{rank}}"


def _with_placement(expr: str) -> str:
    """A per-rank expression with each rank's node and GPUs."""
    placement = f"max {promql.by(d.RANK_PLACED)} ({d.RANK_PLACEMENT})"
    return f"({expr})\n* {promql.on(d.RANK)} group_left (node, {d.GPUS_LABEL})\n{placement}"


def _placement_table(c: Common, expr: str, legend: str) -> PanelBuilder:
    """A table of ranks now, each with its node and GPU beside the value of `expr`."""
    return prometheus_table(
        c, [Query(_with_placement(expr), legend, instant=True, format="table")], hidden_columns=("__name__",)
    )


def _compute_excess(matchers: tuple[str, ...]) -> str:
    """How much more compute per step each rank takes than its job's median rank (0.25: 25% more)."""
    median = promql.selector(d.JOB_MEDIAN_COMPUTE_PER_STEP, matchers)
    return f"({promql.selector(d.RANK_COMPUTE_PER_STEP, matchers)}\n/ {promql.on(d.JOB)} group_left () {median}) - 1"


def _red_from(threshold: Threshold) -> ColourSteps:
    """Green below an alert's threshold, red from it: the panel shows where the alert starts."""
    return ColourSteps(GREEN, ((threshold.value, RED),))


def compute_per_step(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _timeseries(
        Common(
            "Compute per Step by Rank",
            "Seconds of each rank's own compute per optimizer step, before it waits for the others: in synchronous "
            "data parallelism every rank has the same step time, and the straggler is the rank whose compute is "
            "longest.",
            "s",
            w=w,
            min=0,
        ),
        [Query(promql.selector(d.RANK_COMPUTE_PER_STEP, job), RANK_LEGEND)],
    )


def collective_wait(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _timeseries(
        Common(
            "Collective Wait by Rank",
            "Share of each rank's wall time spent waiting in collectives (the exposed part, not hidden by compute): "
            "the ranks that wait most are the ones waiting for a straggler.",
            "percentunit",
            w=w,
            min=0,
            max=1,
        ),
        [Query(promql.selector(d.RANK_PHASE_RATE, (*job, promql.matcher("phase", "collective"))), RANK_LEGEND)],
    )


def straggler_excess(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    share = cfg.thresholds.training_straggler_compute_excess_ratio
    return _timeseries(
        Common(
            "Straggler Status: Compute above the Median Rank",
            f"How much more compute per step each rank takes than the job's median rank; above {share.short} "
            "(red) for two scrape intervals, TrainingRankStraggler names the rank.",
            "percentunit",
            w=w,
            thresholds=_red_from(share),
        ),
        [Query(_compute_excess(job), RANK_LEGEND)],
    )


def hang_status(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    hang = cfg.thresholds.training_rank_hang_seconds
    return stat(
        Common(
            "Hang Status: Seconds since the Job's Last Step",
            f"How long no rank of the job has completed a step; at {hang.short} (red) TrainingJobHung fires and "
            "names the rank that stopped answering or does not wait in a collective.",
            "s",
            w=w,
            thresholds=ColourSteps(GREEN, ((hang.value / 2, YELLOW), (hang.value, RED))),
        ),
        [Query(promql.selector(d.JOB_LAST_STEP_AGE, job), "{{job_id}}")],
    )


def ranks_table(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _placement_table(
        Common(
            "Ranks and Where They Run",
            "Each rank of the job with its node and GPU, and its compute per step now (the value).",
            "s",
            w=w,
        ),
        promql.selector(d.RANK_COMPUTE_PER_STEP, job),
        RANK_LEGEND,
    )


def bandwidth(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _timeseries(
        Common(
            "Collective Bandwidth",
            "Algorithmic bandwidth (message bytes over the time a collective was in flight, the least-waiting "
            "rank's) and bus bandwidth (NCCL's busbw: all_reduce 2(n-1)/n of it), per kind of collective. For DDP's "
            "gradient all-reduce timed per step (the default) the time runs from its first bucket's launch to the "
            "end of its reduction: a lower bound of the bandwidth, exact when communication is the bottleneck.",
            "Bps",
            w=w,
            min=0,
        ),
        [
            Query(promql.selector(d.JOB_ALGBW, job), "algbw {{collective}}"),
            Query(promql.selector(d.JOB_BUSBW, job), "busbw {{collective}}"),
        ],
    )


def collectives_per_second(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    ops = promql.rate(catalog.TRAINING_COLLECTIVE_OPERATIONS_TOTAL, job)
    return _timeseries(
        Common(
            "Collectives per Second",
            "Collectives the job's ranks complete per second, all ranks together, by kind (a DDP gradient bucket "
            "is one all_reduce).",
            "ops",
            w=w,
            min=0,
        ),
        [Query(promql.aggregate("sum", ("collective",), ops), "{{collective}}")],
    )


def communication_share(cfg: ObservabilityConfig, job: tuple[str, ...], *, w: int) -> PanelBuilder:
    share = cfg.thresholds.training_communication_share_ratio
    return _timeseries(
        Common(
            "Communication Share of the Step",
            f"Share of the ranks' step time spent waiting for communication; above {share.short} (red) for 10 "
            "minutes, TrainingCommunicationBound warns.",
            "percentunit",
            w=w,
            min=0,
            max=1,
            thresholds=_red_from(share),
        ),
        [Query(promql.selector(d.JOB_COMMUNICATION_SHARE, job), "{{job_id}}")],
    )


def fleet_stragglers(cfg: ObservabilityConfig, model: tuple[str, ...], *, w: int) -> PanelBuilder:
    share = cfg.thresholds.training_straggler_compute_excess_ratio
    return _placement_table(
        Common(
            "Jobs with Stragglers",
            f"Every rank of any job whose compute per step is more than {share.short} above its job's median rank "
            "now, with its node and GPU (the value: how much more).",
            "percentunit",
            w=w,
        ),
        f"({_compute_excess(model)}) > {share.promql}",
        "{{job_id}} rank {{rank}}",
    )
