"""Group `ml_training_distributed`: the ranks of a distributed job compared with each other.

Inputs, recorded at the head of the group (its alerts read them in the same evaluation), over a
window of four scrape intervals (one minute at a 15 s scrape):
- per rank: seconds per second in each phase (`ml_training_phase_seconds_total`), compute seconds
  per step, and the algorithmic bandwidth of each kind of collective (message bytes over busy
  seconds, NCCL's `algbw`);
- per job: the median rank's compute per step, the freshest step's age, the ranks, the
  communication share of the step, and the algorithmic and bus bandwidth (NCCL's `busbw`:
  all_reduce `algbw * 2(n-1)/n`, all_gather and reduce_scatter `algbw * (n-1)/n`, broadcast `algbw`).

Alerts: a straggling rank (compute per step above the median rank's), a hung job (no rank
completed a step for the hang threshold): naming the rank that stopped answering or does not wait
in a collective, or, when every answering rank waits in one, the job alone; and a job whose step
is mostly communication.
"""

from __future__ import annotations

from foxhunt_trainer.contract import catalog, verdicts
from observability.config import ObservabilityConfig
from observability.promql import by, duration, on
from observability.rules.rule_types import AlertRule, RecordingRule, RunbookQuery, Severity

GROUP = "ml_training_distributed"

JOB: tuple[str, ...] = ("namespace", "model_type", "job_id")
RANK: tuple[str, ...] = (*JOB, "rank")
PLACED: tuple[str, ...] = (*RANK, "node", "uuid")
# A rank's GPUs as one label of the rank (the NVML UUIDs, comma-separated for a rank on several):
# not a GPU's `uuid`, so the per-rank placement is one series per rank, which the global tier of a
# sharded stack receives even with `remoteWrite: aggregates`; the alerts name it `uuid` again.
GPUS_LABEL = "gpus"
RANK_PLACED: tuple[str, ...] = (*RANK, "node", GPUS_LABEL)
COLLECTIVE: tuple[str, ...] = (*RANK, "collective")
JOB_COLLECTIVE: tuple[str, ...] = (*JOB, "collective")

# The phases of a step: everything but start-up, checkpoints and evaluation (which happen between steps).
STEP_PHASES: tuple[str, ...] = ("data_wait", "compute", "collective", "lost_work", "idle")
# A job whose ranks spend their time here is busy, not hung.
BETWEEN_STEP_PHASES: tuple[str, ...] = ("checkpoint", "evaluation")
# How long a rank that stopped answering is still named by the hang alert (its series are gone):
# until PyTorch's collective watchdog (30 minutes by default) has killed the job.
VANISHED_LOOKBACK_SECONDS = 1800
# Bus bandwidth over algorithmic bandwidth, per collective, with n ranks (NCCL's tests' factors).
BUS_FACTORS: tuple[tuple[str, str], ...] = (
    ("all_reduce", "2 * ({n} - 1) / {n}"),
    ("all_gather", "({n} - 1) / {n}"),
    ("reduce_scatter", "({n} - 1) / {n}"),
    ("broadcast", "1"),
)
COMMUNICATION_FOR_SECONDS = 600

_PHASE = catalog.TRAINING_PHASE_SECONDS_TOTAL.name
_STEPS = catalog.TRAINING_STEPS_TOTAL.name
_COMPUTE = _PHASE + '{phase="compute"}'
_LAST_STEP = catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS.name
_RANK_INFO = catalog.TRAINING_RANK_INFO.name
_PLACEMENT = catalog.TRAINING_RANK_PLACEMENT_INFO.name
_BYTES = catalog.TRAINING_COLLECTIVE_BYTES_TOTAL.name
_BUSY = catalog.TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL.name

RANK_PHASE_RATE = "rank_phase:ml_training_phase_seconds:rate"
RANK_COMPUTE_PER_STEP = "rank:ml_training_compute_seconds_per_step:ratio_rate"
JOB_MEDIAN_COMPUTE_PER_STEP = "job:ml_training_compute_seconds_per_step:median"
JOB_LAST_STEP_AGE = "job:ml_training_last_step_age_seconds:min"
JOB_RANKS = "job:ml_training_ranks:count"
JOB_COMMUNICATION_SHARE = "job:ml_training_communication_share:ratio"
RANK_ALGBW = "rank_collective:ml_training_collective_algbw_bytes_per_second:ratio_rate"
JOB_ALGBW = "job_collective:ml_training_collective_algbw_bytes_per_second:max"
JOB_BUSBW = "job_collective:ml_training_collective_busbw_bytes_per_second:max"
RANK_PLACEMENT = "rank:ml_training_rank_placement:info"

_JOB_TEXT = "{{ $labels.model_type }} job {{ $labels.job_id }} (namespace {{ $labels.namespace }})"
_ONE_JOB = '{job_id="<job_id>"}'


def window_seconds(cfg: ObservabilityConfig) -> int:
    """The rate window of the group: four scrape intervals (a missed scrape leaves three)."""
    return 4 * cfg.scrape_interval_seconds


def straggler_for_seconds(cfg: ObservabilityConfig) -> int:
    """`for` of the straggler alert: two scrape intervals (30 s at a 15 s scrape), so a slowdown
    of a third is named within two minutes (docs: BENCHMARKS.md, distributed detection)."""
    return 2 * cfg.scrape_interval_seconds


def _in(phases: tuple[str, ...]) -> str:
    return f'phase=~"{"|".join(phases)}"'


def _rate(series: str, seconds: int) -> str:
    return f"rate({series}[{duration(seconds)}])"


def input_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    w = window_seconds(cfg)
    n = JOB_RANKS
    busbw = "\nor\n".join(
        f'{JOB_ALGBW}{{collective="{kind}"}} * {on(JOB)} group_left () ({factor.format(n=n)})'
        if factor != "1"
        else f'{JOB_ALGBW}{{collective="{kind}"}}'
        for kind, factor in BUS_FACTORS
    )
    return (
        RecordingRule(
            RANK_PLACEMENT,
            f'max {by(RANK_PLACED)} (label_replace({_PLACEMENT}, "{GPUS_LABEL}", "$1", "uuid", "(.*)"))',
            f"1 for each rank: the node it runs on and its GPUs (`{GPUS_LABEL}`: the NVML UUIDs, comma-separated for "
            "a rank on several; absent without one), one series per rank.",
        ),
        RecordingRule(
            RANK_PHASE_RATE,
            f"sum {by((*RANK, 'phase'))} ({_rate(_PHASE, w)})",
            "Seconds per second each rank spends in each phase (the phases of a running rank sum to 1).",
        ),
        RecordingRule(
            RANK_COMPUTE_PER_STEP,
            f"sum {by(RANK)} ({_rate(_COMPUTE, w)})\n/\n(sum {by(RANK)} ({_rate(_STEPS, w)}) > 0)",
            "Compute seconds per optimizer step of each rank (its own work, before it waits for the others).",
        ),
        RecordingRule(
            JOB_MEDIAN_COMPUTE_PER_STEP,
            f"quantile {by(JOB)} (0.5, {RANK_COMPUTE_PER_STEP})",
            "Compute seconds per step of the job's median rank.",
        ),
        RecordingRule(
            JOB_LAST_STEP_AGE,
            f"time() - max {by(JOB)} ({_LAST_STEP})",
            "Seconds since the job's freshest step: how long no rank has completed one.",
        ),
        RecordingRule(
            JOB_RANKS,
            f"count {by(JOB)} (group {by(RANK)} ({_RANK_INFO}))",
            "Ranks of each job that answer (the n of the bus bandwidth).",
        ),
        RecordingRule(
            JOB_COMMUNICATION_SHARE,
            f'sum {by(JOB)} ({RANK_PHASE_RATE}{{phase="collective"}})\n'
            f"/\n"
            f"(sum {by(JOB)} ({RANK_PHASE_RATE}{{{_in(STEP_PHASES)}}}) > 0)",
            "Share (0-1) of the ranks' step time (data wait, compute, collective, lost work, idle) spent "
            "waiting in collectives: the communication that compute did not hide.",
        ),
        RecordingRule(
            RANK_ALGBW,
            f"sum {by(COLLECTIVE)} ({_rate(_BYTES, w)})\n/\n(sum {by(COLLECTIVE)} ({_rate(_BUSY, w)}) > 0)",
            "Algorithmic bandwidth of each rank and kind of collective: message bytes over the time one "
            "was in flight (bytes per second).",
        ),
        RecordingRule(
            JOB_ALGBW,
            f"max {by(JOB_COLLECTIVE)} ({RANK_ALGBW})",
            "Algorithmic bandwidth of the job per kind of collective: the best rank's, since the rank that "
            "arrives last at a collective waits least and its time is closest to the transfer itself.",
        ),
        RecordingRule(
            JOB_BUSBW,
            busbw,
            "Bus bandwidth of the job per kind of collective (NCCL's busbw: the algorithmic bandwidth times "
            "2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter, 1 for broadcast).",
        ),
    )


def recorded_inputs() -> tuple[str, ...]:
    return tuple(rule.record for rule in input_rules(ObservabilityConfig()))


def _placed(expr: str, lookback: str | None = None) -> str:
    """`expr` (per rank) with the node and GPU (`uuid`: the rank's GPUs) of each rank, "unknown"
    where the rank published no placement (a trainer without `track_rank`)."""
    placement = f"last_over_time({RANK_PLACEMENT}[{lookback}])" if lookback else RANK_PLACEMENT
    joined = f"({expr})\n* {on(RANK)} group_left (node, {GPUS_LABEL})\nmax {by(RANK_PLACED)} ({placement})"
    named = (
        f'label_replace(label_replace(\n{joined},\n"uuid", "$1", "{GPUS_LABEL}", "(.*)"), "{GPUS_LABEL}", "", "", "")'
    )
    unknown = f'label_replace(label_replace(\n({expr}),\n"node", "unknown", "", ""), "uuid", "unknown", "", "")'
    return f"(\n{named}\n)\nor {on(RANK)}\n{unknown}"


def straggler_expr(cfg: ObservabilityConfig) -> str:
    share = cfg.thresholds.training_straggler_compute_excess_ratio
    w = window_seconds(cfg)
    excess = f"{RANK_COMPUTE_PER_STEP}\n/ {on(JOB)} group_left ()\n({JOB_MEDIAN_COMPUTE_PER_STEP} > 0)\n- 1"
    # A job that stalled within the window (a hang, one long pause of a rank) has per-step figures
    # made of the stall: judge it again once the window holds steps only. The freshest step's age
    # reaches one scrape interval plus a step in a healthy job; two intervals mean a stall.
    stalled = f"max_over_time({JOB_LAST_STEP_AGE}[{duration(w)}]) > {2 * cfg.scrape_interval_seconds}"
    judged = f"({excess}) > {share.promql}\nand {on(JOB)} ({JOB_RANKS} > 1)\nunless {on(JOB)} ({stalled})"
    return _placed(judged)


def _stalled(cfg: ObservabilityConfig) -> str:
    """The jobs that made no step for the hang threshold while their ranks' clocks run (not
    finished) and none of them checkpoints or evaluates; value: the freshest step's age."""
    hang = cfg.thresholds.training_rank_hang_seconds
    running = f"sum {by(JOB)} ({RANK_PHASE_RATE}) > 0.5"
    busy_between_steps = f"sum {by(JOB)} ({RANK_PHASE_RATE}{{{_in(BETWEEN_STEP_PHASES)}}}) > 0.5"
    return f"({JOB_LAST_STEP_AGE} > {hang.promql})\nand {on(JOB)} ({running})\nunless {on(JOB)} ({busy_between_steps})"


def _blamed(cfg: ObservabilityConfig) -> str:
    """The ranks of stalled jobs that stopped answering, answer again but have no phase rate yet
    (back from a pause or a restart: fewer than two samples in the window), or answer but spend
    most of their time outside a collective while the others wait; value: the job's freshest
    step's age."""
    lookback = duration(VANISHED_LOOKBACK_SECONDS)
    vanished = f"group {by(RANK)} (last_over_time({_RANK_INFO}[{lookback}]))\nunless {on(RANK)} {_RANK_INFO}"
    unmeasured = f"group {by(RANK)} ({_RANK_INFO})\nunless {on(RANK)} {RANK_PHASE_RATE}"
    # a share of the rank's measured time, not seconds per second: a rank back for two samples has
    # a rate extrapolated over a fraction of the window
    not_waiting = (
        f'sum {by(RANK)} ({RANK_PHASE_RATE}{{phase!="collective"}})\n/\nsum {by(RANK)} ({RANK_PHASE_RATE}) > 0.5'
    )
    blamed = f"({vanished})\nor\n({unmeasured})\nor\n({not_waiting})"
    return f"(\ngroup {by(RANK)} (\n{blamed}\n)\n* {on(JOB)} group_left ()\n({_stalled(cfg)})\n)"


def hang_expr(cfg: ObservabilityConfig) -> str:
    return _placed(_blamed(cfg), duration(VANISHED_LOOKBACK_SECONDS))


def hang_in_collective_expr(cfg: ObservabilityConfig) -> str:
    """Stalled jobs where no rank stands out: every answering rank waits in a collective."""
    return f"({_stalled(cfg)})\nunless {on(JOB)}\n{_blamed(cfg)}"


def communication_expr(cfg: ObservabilityConfig) -> str:
    """Jobs whose ranks wait in collectives for more than the threshold's share of their step time,
    unless no rank has completed a step for the hang threshold: the ranks of a hung job wait in a
    collective for the rank at fault, which the hang alerts name (the network is not the cause)."""
    share = cfg.thresholds.training_communication_share_ratio
    hang = cfg.thresholds.training_rank_hang_seconds
    return f"{JOB_COMMUNICATION_SHARE} > {share.promql}\nunless {on(JOB)}\n({JOB_LAST_STEP_AGE} > {hang.promql})"


def alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    t = cfg.thresholds
    straggle, hang = t.training_straggler_compute_excess_ratio, t.training_rank_hang_seconds
    comm = t.training_communication_share_ratio
    w = window_seconds(cfg)
    if hang.value < 2 * w:
        raise ValueError(
            f"trainingRankHangSeconds = {hang.value:g}: expected at least two rate windows ({2 * w}s, four scrape "
            "intervals each): the hang alert tells a waiting rank from a stuck one by its phase over one window"
        )
    for_straggler = straggler_for_seconds(cfg)
    return (
        AlertRule(
            name="TrainingRankStraggler",
            group=GROUP,
            severity=Severity.WARNING,
            expr=straggler_expr(cfg),
            for_seconds=for_straggler,
            summary=(
                f"A rank of a distributed job computes more than {straggle.text} slower than the job's median rank."
            ),
            description=(
                f"Rank {{{{ $labels.rank }}}} of {_JOB_TEXT} on node {{{{ $labels.node }}}} (GPU "
                f"{{{{ $labels.uuid }}}}) takes {{{{ $value | humanizePercentage }}}} more compute per step than the "
                f"job's median rank (above {straggle.short} for {duration(for_straggler)}); every other rank waits "
                "for it in each collective."
            ),
            impact="The whole job runs at the straggler's speed: every rank waits for it at each step",
            action=(
                "Check the node's GPU for throttling (temperature, power, clocks) and ECC errors",
                "Check what else runs on the node (CPU, memory, PCIe or NIC contention)",
                "Compare the rank's data wait and batch sizes with the other ranks'",
                "Cordon the node and restart the job from its last checkpoint if the GPU is degraded",
            ),
            locating_labels=PLACED,
            queries=(
                RunbookQuery("Compute seconds per step of every rank of the job", f"{RANK_COMPUTE_PER_STEP}{_ONE_JOB}"),
                RunbookQuery("Time per phase of every rank", f"{RANK_PHASE_RATE}{_ONE_JOB}"),
                RunbookQuery("Where each rank runs", f"{RANK_PLACEMENT}{_ONE_JOB}"),
            ),
            rationale=(
                "In synchronous data parallelism every rank reports the same step time, so step time cannot "
                "name the straggler; its own compute per step can (the others spend the difference waiting "
                "in the all-reduce). The median rank is the yardstick, so one slow rank cannot drag it. "
                f"Windows of {duration(w)} (four scrapes); a job that made no step for two scrape intervals within "
                "the window is judged again once the window holds steps only (the hang alert covers stalls). "
                "Jobs whose steps take longer than a scrape interval are not judged."
            ),
        ),
        AlertRule(
            name="TrainingJobHung",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=hang_expr(cfg),
            for_seconds=0,
            summary=f"No rank of a running distributed job has completed a step for {hang.text}.",
            description=(
                f"{_JOB_TEXT} has made no step for {{{{ $value | humanizeDuration }}}}. Rank {{{{ $labels.rank }}}} "
                "on node {{ $labels.node }} (GPU {{ $labels.uuid }}) stopped answering or does not wait in a "
                "collective like the others: the job waits for it."
            ),
            impact=(
                "Every GPU of the job idles until the collective watchdog kills it (30 minutes by default); the "
                "work since the last checkpoint is at risk"
            ),
            action=(
                "Look at the named rank: is its pod running, is its process alive (a stopped, swapping or "
                "D-state process), what does py-spy dump show",
                "Check its node and GPU (XID errors, NIC link, NVLink)",
                "Kill the job and restart it from its last checkpoint, excluding the node if it is at fault",
            ),
            locating_labels=PLACED,
            queries=(
                RunbookQuery("Seconds since each rank's last step", f"time() - {_LAST_STEP}{_ONE_JOB}"),
                RunbookQuery("What each rank is doing (phase shares)", f"{RANK_PHASE_RATE}{_ONE_JOB}"),
                RunbookQuery("Targets of the job that do not answer", 'up{service="training-job"} == 0'),
            ),
            rationale=(
                f"Far below PyTorch's 30-minute collective timeout. A rank that is stopped or killed stops "
                f"answering scrapes (named for {duration(VANISHED_LOOKBACK_SECONDS)} from its last answer); a rank "
                "that answers but is stuck elsewhere (data loading, a different collective) is the one not in the "
                "collective phase while the others are; a rank that answers again after a pause is named until "
                "its phases have two samples in the window. A job whose ranks are checkpointing or evaluating, or "
                "whose clocks stopped (finished), is not hung."
            ),
        ),
        AlertRule(
            name="TrainingJobHungInCollective",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=hang_in_collective_expr(cfg),
            for_seconds=0,
            summary=(
                f"No rank of a running distributed job has completed a step for {hang.text}, and every rank that "
                "answers waits in a collective."
            ),
            description=(
                f"{_JOB_TEXT} has made no step for {{{{ $value | humanizeDuration }}}} and no rank stands out: every "
                "rank that answers waits in a collective."
            ),
            impact=(
                "Every GPU of the job idles until the collective watchdog kills it (30 minutes by default); the "
                "work since the last checkpoint is at risk"
            ),
            action=(
                "Dump the ranks' stacks (py-spy dump, or TORCH_NCCL_DUMP_ON_TIMEOUT / the flight recorder): a rank "
                "that entered a different collective (or the same one with other shapes) is the cause",
                "Check the network between the job's nodes (NIC link, switch, NCCL_DEBUG=INFO logs)",
                "Kill the job and restart it from its last checkpoint",
            ),
            locating_labels=JOB,
            queries=(
                RunbookQuery("Seconds since each rank's last step", f"time() - {_LAST_STEP}{_ONE_JOB}"),
                RunbookQuery("Collectives in flight per rank (busy time growing)", f"rate({_BUSY}{_ONE_JOB}[5m])"),
            ),
            rationale=(
                "The other side of TrainingJobHung: when no rank stopped answering and every rank is measured in "
                "the collective phase, the rank at fault cannot be told from the metrics; the job still is hung."
            ),
        ),
        AlertRule(
            name="TrainingCommunicationBound",
            group=GROUP,
            severity=Severity.WARNING,
            expr=communication_expr(cfg),
            for_seconds=COMMUNICATION_FOR_SECONDS,
            summary=(
                f"A distributed job spends more than {comm.text} of its step time waiting for communication, "
                f"for {duration(COMMUNICATION_FOR_SECONDS)}."
            ),
            description=(
                f"{_JOB_TEXT} waits in collectives for {{{{ $value | humanizePercentage }}}} of its step time "
                f"(above {comm.short} for {duration(COMMUNICATION_FOR_SECONDS)})."
            ),
            impact="GPUs idle while gradients move: the job pays for compute it does not use",
            action=(
                "Compare the job's bus bandwidth with what its interconnect should give",
                verdicts.COMMUNICATION_BOUND.change,
                "Check the DDP bucket size and gradient compression, or place the ranks on fewer, closer nodes",
            ),
            locating_labels=JOB,
            queries=(
                RunbookQuery("Communication share of the job", f"{JOB_COMMUNICATION_SHARE}{_ONE_JOB}"),
                RunbookQuery("Bus bandwidth per collective", f"{JOB_BUSBW}{_ONE_JOB}"),
                RunbookQuery("Time per phase of every rank", f"{RANK_PHASE_RATE}{_ONE_JOB}"),
            ),
            rationale=(
                "Counts only the exposed wait (the `collective` phase): communication that overlaps compute "
                "costs nothing and is not counted. A straggler also raises it (the others wait for it): check "
                "TrainingRankStraggler first. A job that made no step for the hang threshold is not judged: its "
                "ranks wait for the one at fault, which TrainingJobHung names, so the alert's `for` starts again."
            ),
        ),
    )
