"""What holds a training job back: the bottleneck verdicts, their thresholds and what to change.

One definition read by both sides: the recording rules (`observability.rules.goodput`: the verdict
over 5 minutes, per job, in PromQL), the dashboards' verdict help, the efficiency alerts'
advice, and the trainer's own end-of-run summary (`foxhunt_trainer.summary`, the same judgement in
Python over the job's whole life). The thresholds are `observability/thresholds.yaml`'s records,
copied into `verdict_thresholds` by `make generate` (a test fails while the copy is stale), so the
trainer wheel needs no YAML.

The verdict, first match wins:
1. the bottleneck causes, each where its share of the time is above its threshold, the largest
   share winning: input-bound (data wait), checkpoint-bound (checkpoints), communication-bound
   (collectives);
2. compute-saturated: computing for more than its threshold share of the time, on GPUs busy above
   theirs; a job without GPU evidence is judged on its time split alone;
3. underutilized: every other job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from foxhunt_trainer.contract import verdict_thresholds

# The productive phase: goodput is its share of the time, badput every other phase's.
GOOD_PHASE = "compute"


@dataclass(frozen=True)
class Verdict:
    """One verdict: its name (the rules' `verdict` label), what it means, the short hint the
    dashboards show, and the one thing to change (the summary's advice, the alert's description).
    `meaning_without_gpus`: what it means for a job that holds no GPU (judged on its time split
    alone), where the meaning speaks of GPUs."""

    name: str
    meaning: str
    hint: str
    change: str
    meaning_without_gpus: str = ""

    def meaning_for(self, holds_gpus: bool) -> str:
        return self.meaning if holds_gpus or not self.meaning_without_gpus else self.meaning_without_gpus


INPUT_BOUND = Verdict(
    "input-bound",
    "the job waits for data",
    "more DataLoader workers, prefetch, pinned memory",
    "Give the DataLoader more worker processes (num_workers, up to the CPU cores the pod requests), keep them alive "
    "between epochs (persistent_workers=True), prefetch more batches per worker (prefetch_factor) with "
    "pin_memory=True, and move decoding and augmentation off the training process (or onto the GPU)",
)
CHECKPOINT_BOUND = Verdict(
    "checkpoint-bound",
    "saving checkpoints takes its time",
    "save less often or asynchronously",
    "Save less often (a longer checkpoint interval, in steps or minutes), save asynchronously "
    "(torch.distributed.checkpoint.async_save) or to fast local storage first, and save only what a restart needs",
)
COMMUNICATION_BOUND = Verdict(
    "communication-bound",
    "collectives take its time",
    "larger batches per GPU, overlap, interconnect",
    "Raise the per-rank batch (or gradient accumulation) so compute hides the all-reduce",
)
COMPUTE_SATURATED = Verdict(
    "compute-saturated",
    "the job computes nearly all the time and its GPUs are busy",
    "maxed out: only a better kernel, precision or more GPUs make it faster",
    "Nothing in the loop: the GPUs are maxed out; only faster kernels (torch.compile, fused operators), a lower "
    "precision (bf16, fp8) or more GPUs make it faster",
    "the job computes nearly all the time; it holds no GPU",
)
UNDERUTILIZED = Verdict(
    "underutilized",
    "its GPUs are mostly idle for another reason",
    "start-up, evaluation, redone work, small kernels, host overhead",
    "Cut the largest badput cause below (start-up, evaluation, redone work, host time between steps); if the time "
    "is compute on idle GPUs, give each step more work (a larger batch, torch.compile or CUDA graphs)",
    "much of its time is not computing, and no one cause is above its threshold; it holds no GPU",
)
VERDICTS: tuple[Verdict, ...] = (INPUT_BOUND, CHECKPOINT_BOUND, COMMUNICATION_BOUND, COMPUTE_SATURATED, UNDERUTILIZED)
BY_NAME: dict[str, Verdict] = {v.name: v for v in VERDICTS}


@dataclass(frozen=True)
class VerdictThresholds:
    """The verdict's thresholds: shares (0-1) of the time, and GPU busy in percent (0-100)."""

    data_wait_ratio: float = verdict_thresholds.TRAINING_DATA_WAIT_RATIO
    checkpoint_ratio: float = verdict_thresholds.TRAINING_CHECKPOINT_RATIO
    communication_share_ratio: float = verdict_thresholds.TRAINING_COMMUNICATION_SHARE_RATIO
    compute_saturated_ratio: float = verdict_thresholds.TRAINING_COMPUTE_SATURATED_RATIO
    compute_saturated_gpu_busy_percent: float = verdict_thresholds.TRAINING_COMPUTE_SATURATED_GPU_BUSY_PERCENT


DEFAULT_THRESHOLDS = VerdictThresholds()

# The causes of rule 1, each with the phase whose share it reads, in the rules' order.
CAUSE_PHASES: tuple[tuple[Verdict, str], ...] = (
    (INPUT_BOUND, "data_wait"),
    (CHECKPOINT_BOUND, "checkpoint"),
    (COMMUNICATION_BOUND, "collective"),
)


def cause_threshold(verdict: Verdict, thresholds: VerdictThresholds) -> float:
    return {
        INPUT_BOUND.name: thresholds.data_wait_ratio,
        CHECKPOINT_BOUND.name: thresholds.checkpoint_ratio,
        COMMUNICATION_BOUND.name: thresholds.communication_share_ratio,
    }[verdict.name]


def judge(
    shares: Mapping[str, float] | None,
    gpu_busy_percent: float | None = None,
    thresholds: VerdictThresholds = DEFAULT_THRESHOLDS,
) -> Verdict | None:
    """The verdict of a job whose time split is `shares` (phase -> share of its time, 0-1; None:
    no time split) and whose GPUs are `gpu_busy_percent` busy (None: no GPU evidence); None when
    there is neither (nothing to judge)."""
    if shares is not None:
        over = [
            (shares.get(phase, 0.0), verdict)
            for verdict, phase in CAUSE_PHASES
            if shares.get(phase, 0.0) > cause_threshold(verdict, thresholds)
        ]
        if over:
            return max(over, key=lambda pair: pair[0])[1]
    computing = shares is not None and shares.get(GOOD_PHASE, 0.0) > thresholds.compute_saturated_ratio
    busy = gpu_busy_percent is not None and gpu_busy_percent > thresholds.compute_saturated_gpu_busy_percent
    if (computing and (busy or gpu_busy_percent is None)) or (busy and shares is None):
        return COMPUTE_SATURATED
    if shares is not None or gpu_busy_percent is not None:
        return UNDERUTILIZED
    return None
