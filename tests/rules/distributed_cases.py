"""Firing and silent cases of the `ml_training_distributed` alerts, at the edges of their
thresholds (default config: scrape and evaluation every 15 s, rate windows of 1m).

A job of four ranks on two pods. Each 15-second sample, a rank spends 15 seconds in its phases
(compute and collective here) and makes 15 steps; counters start high so that `rate()`
extrapolates every series alike and ratios of rates are exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from foxhunt_trainer.contract import catalog
from observability.promql import duration
from observability.rules import distributed
from observability.thresholds import Thresholds
from tests.rules.promtool_harness import Case, Check, Firing, RecordCase, counter, join, series, values

S = 15  # scrape interval of the default config
SAMPLES = 34  # 8m30s of samples (the communication cases: 45, for their 10m `for`)
BASE = 10_000.0  # counters' start
JOB = {"model_type": "llm", "job_id": "ddp-7"}
JOB_LABELS = {"namespace": "training", **JOB}
RANKS = range(4)
STEPS_PER_SAMPLE = 15
COMMUNICATION_SAMPLES = 45
COMPUTE = 7.5  # seconds of compute per sample of a normal rank (0.5 s per step)


def uuid(rank: int) -> str:
    return f"GPU-0000000{rank}-aaaa-bbbb-cccc-dddddddddddd"


def node(rank: int) -> str:
    return f"gpu-node-{rank // 2}"


def pod(rank: int) -> dict[str, str]:
    return {
        "namespace": "training",
        "pod": f"ddp-7-{rank // 2}-x7k2p",
        "service": "training-job",
        "instance": f"10.0.{rank // 2}.9:{9094 + rank % 2}",
        "job": "pods",
    }


def placed(rank: int) -> dict[str, str]:
    return {**JOB_LABELS, "rank": str(rank), "node": node(rank), "uuid": uuid(rank)}


def _end(samples: str, until: int | None, back: int | None = None) -> str:
    """`samples` cut after sample `until` and marked stale there (the target stopped answering),
    resumed at sample `back` when given (it answers again)."""
    if until is None:
        return samples
    cut = samples.split()
    if back is None:
        return " ".join([*cut[: until + 1], "stale"])
    return " ".join([*cut[: until + 1], "stale", *["_"] * (back - until - 2), *cut[back:]])


def rank_series(
    rank: int,
    phases: Mapping[str, float],
    *,
    steps_until: int | None = None,
    answers_until: int | None = None,
    answers_again: int | None = None,
    phases_after: Mapping[str, float] | None = None,
    samples: int = SAMPLES,
) -> dict[str, str]:
    """One rank's series: seconds per sample in each phase (`phases`, switching to `phases_after`
    once steps stop at sample `steps_until`), steps and the last step's time, and its info series;
    all of them end at sample `answers_until` when given, and resume at sample `answers_again`."""
    labels = {**pod(rank), **JOB, "rank": str(rank)}
    stop = samples if steps_until is None else steps_until
    after = phases if phases_after is None else phases_after
    out: dict[str, str] = {}
    for phase in sorted({*phases, *after}):
        per = [phases.get(phase, 0.0)] * stop + [after.get(phase, 0.0)] * (samples - stop)
        totals = [BASE + sum(per[:i]) for i in range(samples)]
        out[series(catalog.TRAINING_PHASE_SECONDS_TOTAL, {**labels, "phase": phase})] = _end(
            join(totals), answers_until, answers_again
        )
    steps = [BASE + STEPS_PER_SAMPLE * min(i, stop) for i in range(samples)]
    last = [float(S * min(i, stop)) for i in range(samples)]
    out[series(catalog.TRAINING_STEPS_TOTAL, labels)] = _end(join(steps), answers_until, answers_again)
    out[series(catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS, labels)] = _end(join(last), answers_until, answers_again)
    info = {**labels, "local_rank": str(rank % 2), "node_rank": str(rank // 2), "world_size": "4"}
    out[series(catalog.TRAINING_RANK_INFO, info)] = _end(values((1, samples)), answers_until, answers_again)
    place = {**labels, "node": node(rank), "uuid": uuid(rank)}
    out[series(catalog.TRAINING_RANK_PLACEMENT_INFO, place)] = _end(values((1, samples)), answers_until, answers_again)
    return out


def job(*ranks: dict[str, str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for r in ranks:
        merged.update(r)
    return merged


def balanced(rank: int, compute: float = COMPUTE, samples: int = SAMPLES) -> dict[str, str]:
    return rank_series(rank, {"compute": compute, "collective": S - compute}, samples=samples)


def silent(*times: int) -> tuple[Check, ...]:
    return tuple(Check(duration(t)) for t in times)


def fires(at: int, *firing: Firing) -> Check:
    return Check(duration(at), tuple(firing))


def straggler_cases(th: Thresholds) -> Sequence[Case]:
    share = th.training_straggler_compute_excess_ratio.value
    above, below = share + 0.02, share - 0.02
    slow_above, slow_below = COMPUTE * (1 + above), COMPUTE * (1 + below)
    # the first rate is at 15s (two samples in the window); `for` is 30s: firing at 45s
    return (
        Case(
            "TrainingRankStraggler",
            f"rank 3 computing {above:.0%} more than the median rank fires for it alone",
            job(*(balanced(r) for r in RANKS if r != 3), balanced(3, slow_above)),
            (*silent(30), fires(45, Firing(placed(3), above)), fires(300, Firing(placed(3), above))),
        ),
        Case(
            "TrainingRankStraggler",
            f"rank 3 computing {below:.0%} more than the median rank stays silent",
            job(*(balanced(r) for r in RANKS if r != 3), balanced(3, slow_below)),
            silent(45, 300),
        ),
        Case(
            "TrainingRankStraggler",
            "a job of one rank has no straggler",
            balanced(0, slow_above),
            silent(45, 300),
        ),
    )


def hang_cases(th: Thresholds) -> Sequence[Case]:
    hang = int(th.training_rank_hang_seconds.value)
    waiting = {"collective": float(S)}
    stop = 4  # the last step at sample 4 (60s); the job's freshest step is that old from then on
    # fires at the first evaluation where 60s + hang is passed: hang seconds after 60s is silent
    first = (60 + hang) // S * S + S
    at_edge = (60 + hang) // S * S
    age = float(first - 60)

    def stopped_job(culprit: dict[str, str]) -> dict[str, str]:
        others = [rank_series(r, {"compute": COMPUTE, "collective": S - COMPUTE}, steps_until=stop,
                              phases_after=waiting) for r in (0, 2, 3)]  # fmt: skip
        return job(*others, culprit)

    normal = {"compute": COMPUTE, "collective": S - COMPUTE}
    # rank 1 stops answering with the last step, is named, then answers again (resumed) without a
    # step: one sample back (no rate over the window yet), then two (computing its step)
    back = first // S + 2
    back_age = float(back * S - 60)
    paused = rank_series(
        1, normal, steps_until=stop, answers_until=stop, answers_again=back, phases_after={"compute": float(S)}
    )
    return (
        Case(
            "TrainingJobHung",
            f"rank 1 stops answering: no step for more than {hang}s names it",
            stopped_job(rank_series(1, normal, steps_until=stop, answers_until=stop)),
            (*silent(at_edge), fires(first, Firing(placed(1), age))),
        ),
        Case(
            "TrainingJobHung",
            "rank 1 answers but is stuck loading data while the others wait: named",
            stopped_job(rank_series(1, normal, steps_until=stop, phases_after={"data_wait": float(S)})),
            (*silent(at_edge), fires(first, Firing(placed(1), age))),
        ),
        Case(
            "TrainingJobHungInCollective",
            "every rank waits in a collective: the job is named",
            job(*(rank_series(r, normal, steps_until=stop, phases_after=waiting) for r in RANKS)),
            (*silent(at_edge), fires(first, Firing(JOB_LABELS, age))),
        ),
        Case(
            "TrainingJobHungInCollective",
            "a rank stopped answering: TrainingJobHung names it instead",
            stopped_job(rank_series(1, normal, steps_until=stop, answers_until=stop)),
            silent(first, first + 60),
        ),
        Case(
            "TrainingJobHung",
            "rank 1 answers again after a pause, its phases not measured yet: still named",
            stopped_job(paused),
            (fires(back * S, Firing(placed(1), back_age)), fires(back * S + S, Firing(placed(1), back_age + S))),
        ),
        Case(
            "TrainingJobHungInCollective",
            "rank 1 answers again after a pause, its phases not measured yet: TrainingJobHung names it instead",
            stopped_job(paused),
            silent(back * S, back * S + S),
        ),
        Case(
            "TrainingJobHung",
            "every rank waits in a collective: no rank is blamed",
            job(*(rank_series(r, normal, steps_until=stop, phases_after=waiting) for r in RANKS)),
            silent(first, first + 60),
        ),
        Case(
            "TrainingJobHung",
            "a long checkpoint (rank 0 saving, the others waiting) is not a hang",
            job(
                rank_series(0, normal, steps_until=stop, phases_after={"checkpoint": float(S)}),
                *(rank_series(r, normal, steps_until=stop, phases_after=waiting) for r in (1, 2, 3)),
            ),
            silent(first, first + 60),
        ),
        Case(
            "TrainingJobHung",
            "a finished job (clocks stopped, still served) is not a hang",
            job(*(rank_series(r, normal, steps_until=stop, phases_after={}) for r in RANKS)),
            silent(first, first + 60),
        ),
    )


def communication_cases(th: Thresholds) -> Sequence[Case]:
    share = th.training_communication_share_ratio.value
    above, below = share + 0.02, share - 0.02
    # the first rate at 15s, `for` 10m: firing at 615s
    normal = {"compute": COMPUTE, "collective": S - COMPUTE}
    hung_samples = 60  # steps stop at sample 4 (60 s); the share is 1 for the 10m `for` from 75 s on
    waiting = {"collective": float(S)}
    return (
        Case(
            "TrainingCommunicationBound",
            f"{above:.0%} of the step waiting in collectives for 10m fires",
            job(*(balanced(r, S * (1 - above), COMMUNICATION_SAMPLES) for r in RANKS)),
            (*silent(600), fires(615, Firing(JOB_LABELS, above))),
        ),
        Case(
            "TrainingCommunicationBound",
            f"{below:.0%} of the step waiting in collectives stays silent",
            job(*(balanced(r, S * (1 - below), COMMUNICATION_SAMPLES) for r in RANKS)),
            silent(615, 645),
        ),
        Case(
            "TrainingCommunicationBound",
            "a hung job, every rank waiting in a collective for more than 10m, is left to the hang alerts",
            job(*(rank_series(r, normal, steps_until=4, phases_after=waiting, samples=hung_samples) for r in RANKS)),
            silent(705, 810),
        ),
    )


def distributed_cases(th: Thresholds) -> tuple[Case, ...]:
    return (*straggler_cases(th), *hang_cases(th), *communication_cases(th))


GRADIENT_BYTES = 4e8  # per step


def _bandwidth_job() -> dict[str, str]:
    """Four ranks doing one all_reduce of 400 MB a step, 15 steps per sample; busy 6s per sample
    on rank 0 (the rank that arrives last), 12s on the others."""
    out: dict[str, str] = {}
    for rank in RANKS:
        labels = {**pod(rank), **JOB, "rank": str(rank), "collective": "all_reduce"}
        busy = 6.0 if rank == 0 else 12.0
        out[series(catalog.TRAINING_COLLECTIVE_BYTES_TOTAL, labels)] = join(
            counter(BASE * GRADIENT_BYTES, STEPS_PER_SAMPLE * GRADIENT_BYTES, 10)
        )
        out[series(catalog.TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL, labels)] = join(counter(BASE, busy, 10))
        out.update(balanced(rank))
    return out


_ALGBW = STEPS_PER_SAMPLE * GRADIENT_BYTES / 6.0  # 1 GB/s: bytes over the least-waiting rank's busy time


def _ranked(rank: int, **extra: str) -> dict[str, str]:
    return {**JOB_LABELS, "rank": str(rank), **extra}


# Rank 2 computes on two GPUs (their UUIDs comma-separated), rank 3 on none (its `uuid` empty).
_PLACEMENT_GPUS = {0: uuid(0), 1: uuid(1), 2: f"{uuid(2)},{uuid(3)}", 3: ""}


def _placement_job() -> dict[str, str]:
    return {
        series(
            catalog.TRAINING_RANK_PLACEMENT_INFO,
            {**pod(r), **JOB, "rank": str(r), "node": node(r), "uuid": gpus},
        ): values((1, 10))
        for r, gpus in _PLACEMENT_GPUS.items()
    }


DISTRIBUTED_RECORD_CASES: tuple[RecordCase, ...] = (
    RecordCase(
        distributed.RANK_PLACEMENT,
        "each rank's node and GPUs in one series, the GPUs a label of the rank (none for a rank without a GPU)",
        _placement_job(),
        "2m",
        tuple(
            (_ranked(r, node=node(r), **({distributed.GPUS_LABEL: gpus} if gpus else {})), 1.0)
            for r, gpus in _PLACEMENT_GPUS.items()
        ),
    ),
    RecordCase(
        distributed.RANK_PHASE_RATE,
        "seconds per second in each phase, per rank",
        job(*(balanced(r) for r in RANKS)),
        "2m",
        tuple((_ranked(r, phase=p), 0.5) for r in RANKS for p in ("collective", "compute")),
    ),
    RecordCase(
        distributed.RANK_COMPUTE_PER_STEP,
        "compute seconds over steps, per rank",
        job(*(balanced(r) for r in (0, 1, 2)), balanced(3, 9.0)),
        "2m",
        (*((_ranked(r), 0.5) for r in (0, 1, 2)), (_ranked(3), 0.6)),
    ),
    RecordCase(
        distributed.JOB_MEDIAN_COMPUTE_PER_STEP,
        "one slow rank does not move the median",
        job(*(balanced(r) for r in (0, 1, 2)), balanced(3, 9.0)),
        "2m",
        ((JOB_LABELS, 0.5),),
    ),
    RecordCase(
        distributed.JOB_LAST_STEP_AGE,
        "the freshest rank's last step, 60s after the steps stopped",
        job(*(rank_series(r, {"compute": COMPUTE}, steps_until=4) for r in RANKS)),
        "2m",
        ((JOB_LABELS, 60.0),),
    ),
    RecordCase(
        distributed.JOB_RANKS,
        "the ranks that answer",
        job(*(balanced(r) for r in RANKS)),
        "2m",
        ((JOB_LABELS, 4.0),),
    ),
    RecordCase(
        distributed.RANK_ALGBW,
        "bytes over busy seconds, per rank",
        _bandwidth_job(),
        "2m",
        tuple((_ranked(r, collective="all_reduce"), 1e9 if r == 0 else 5e8) for r in RANKS),
    ),
    RecordCase(
        distributed.JOB_ALGBW,
        "the least-waiting rank's bytes over busy seconds",
        _bandwidth_job(),
        "2m",
        (({**JOB_LABELS, "collective": "all_reduce"}, _ALGBW),),
    ),
    RecordCase(
        distributed.JOB_BUSBW,
        "all_reduce of 4 ranks: 2(n-1)/n = 1.5 times the algorithmic bandwidth",
        _bandwidth_job(),
        "2m",
        (({**JOB_LABELS, "collective": "all_reduce"}, _ALGBW * 1.5),),
    ),
    RecordCase(
        distributed.JOB_COMMUNICATION_SHARE,
        "collective seconds over step seconds",
        job(*(balanced(r, 11.25) for r in RANKS)),
        "2m",
        ((JOB_LABELS, 0.25),),
    ),
)
