"""Group `ml_training_goodput.recording`: where each training job's time goes, its model FLOPs
utilization, and one verdict on what holds it back.

Inputs: the trainer's time split (`ml_training_phase_seconds_total{model_type, job_id, rank,
phase}`, every second of each rank's life in one phase), its model FLOPs
(`ml_training_model_flops_total{..., precision}`), the GPUs it holds and their own evidence
(`jobs.py`: GPM SM activity where the GPU has GPM, NVML utilization elsewhere, joined on `uuid`),
the peak-FLOPs table (`foxhunt_trainer/contract/peak_flops.json`) and the verdict thresholds
(`observability/thresholds.yaml`).

What is recorded, per job:
- the share of its time in each phase over the last 5m (summed over ranks), goodput (the compute
  share) and badput (every other phase: start-up, data wait, checkpoint, evaluation, collectives,
  lost work, idle), and the same shares over the job's whole life (the counters' totals);
- MFU: achieved model FLOP/s over the summed dense peak of the GPUs held, at the precision the
  model runs in. Only where every GPU the job holds has a peak for every precision the job
  reports: an unknown GPU model (or a precision its table entry lacks) leaves MFU absent, never
  computed against part of the job's GPUs; the unknown models are recorded for a panel;
- the verdict (value 1, label `verdict`), first match wins:
  1. the bottleneck causes, each where its share is above its threshold, the largest share
     winning: `input-bound` (waiting for data), `checkpoint-bound` (saving checkpoints),
     `communication-bound` (collectives: the communication share the distributed group records,
     else the job's `collective` phase);
  2. `compute-saturated`: computing for more than its threshold share of the time, and its GPUs
     busy above their threshold (GPM SM activity, else NVML utilization); a job without GPUs is
     judged on its time split alone, a job without a time split on its GPUs alone;
  3. `underutilized`: every other job with a time split or GPUs (held GPUs mostly idle, or a job
     that spends its time neither computing nor on one of the causes above: start-up, idle,
     evaluation, lost work).
- waste: GPU-hours and cost of badput so far, GPU-hours by verdict over 24 h; checkpoint bytes
  written and their storage cost at the stack's price per GB-month for the retention period.
"""

from __future__ import annotations

import re
from typing import Any

from foxhunt_trainer.contract import catalog, records, verdicts
from observability.config import ObservabilityConfig
from observability.promql import by, duration, matcher, regex_matcher
from observability.rules import distributed, jobs
from observability.rules.rule_types import RecordingRule

GROUP = "ml_training_goodput.recording"
JOB_LABELS = jobs.JOB_LABELS  # model_type, job_id
WINDOW_SECONDS = 300
WINDOW = duration(WINDOW_SECONDS)
if WINDOW != records.WINDOW:
    raise ValueError(f"the report reads the records of a {records.WINDOW} window, the rules use {WINDOW}")
SECONDS_PER_MONTH = 365.25 / 12 * 86400
BYTES_PER_GB = 1e9

# The trainer's time split: the phases and the one that is productive.
PHASE_SECONDS = catalog.TRAINING_PHASE_SECONDS_TOTAL.name
GOOD_PHASE = verdicts.GOOD_PHASE

# The verdicts (names, meaning, advice) are shared with the trainer's end-of-run summary.
VERDICT_INPUT = verdicts.INPUT_BOUND.name
VERDICT_CHECKPOINT = verdicts.CHECKPOINT_BOUND.name
VERDICT_COMMUNICATION = verdicts.COMMUNICATION_BOUND.name
VERDICT_COMPUTE = verdicts.COMPUTE_SATURATED.name
VERDICT_UNDERUTILIZED = verdicts.UNDERUTILIZED.name
VERDICTS: tuple[str, ...] = (
    VERDICT_INPUT,
    VERDICT_CHECKPOINT,
    VERDICT_COMMUNICATION,
    VERDICT_COMPUTE,
    VERDICT_UNDERUTILIZED,
)

_J = by(JOB_LABELS)
_JP = by((*JOB_LABELS, "phase"))
_ON_J = "on (model_type, job_id)"
_FLOPS = catalog.TRAINING_MODEL_FLOPS_TOTAL.name
_WRITTEN = catalog.CHECKPOINT_WRITTEN_BYTES_TOTAL.name


def _with_label(expr: str, label: str, value: str) -> str:
    return f'label_replace(\n{expr},\n"{label}", "{value}", "", ""\n)'


# --- the time split --------------------------------------------------------------------------------
PHASE_RATE = RecordingRule(
    f"model_type_job_id_phase:ml_training_phase_seconds:rate{WINDOW}",
    f"sum {_JP} (rate({PHASE_SECONDS}[{WINDOW}]))",
    f"Seconds per second each training job spent in each phase over {WINDOW}, summed over its ranks.",
)
JOB_TIME = RecordingRule(
    f"model_type_job_id:ml_training_phase_seconds:rate{WINDOW}",
    f"sum {_J} ({PHASE_RATE.record}) > 0",
    f"Seconds per second each training job accounted for over {WINDOW} (its ranks running); jobs that "
    "accounted for none are not recorded.",
)
PHASE_SHARE = RecordingRule(
    records.PHASE_SHARE,
    f"{PHASE_RATE.record}\n/ {_ON_J} group_left ()\n{JOB_TIME.record}",
    f"Share (0-1) of each training job's time in each phase over {WINDOW}; the phases other than compute "
    "are its badput by cause.",
)
GOODPUT = RecordingRule(
    records.GOODPUT,
    f'sum {_J} ({PHASE_SHARE.record}{{phase="{GOOD_PHASE}"}})\nor {_ON_J}\n{JOB_TIME.record} * 0',
    f"Goodput (0-1): the share of each training job's time in productive training steps over {WINDOW}.",
)
PHASE_SHARE_SO_FAR = RecordingRule(
    records.PHASE_SHARE_SO_FAR,
    f"sum {_JP} ({PHASE_SECONDS})\n/ {_ON_J} group_left ()\n(sum {_J} ({PHASE_SECONDS}) > 0)",
    "Share (0-1) of each training job's life so far in each phase (its ranks' totals).",
)
GOODPUT_SO_FAR = RecordingRule(
    records.GOODPUT_SO_FAR,
    f'sum {_J} ({PHASE_SHARE_SO_FAR.record}{{phase="{GOOD_PHASE}"}})\n'
    f"or {_ON_J}\nsum {_J} ({PHASE_SHARE_SO_FAR.record}) * 0",
    "Goodput (0-1) of each training job over its life so far.",
)

# --- the GPUs' own evidence -------------------------------------------------------------------------
GPU_BUSY = RecordingRule(
    records.GPU_BUSY,
    _with_label(jobs.JOB_SM_ACTIVE_AVG.record, "source", "gpm_sm_active")
    + f"\nor {_ON_J}\n"
    + _with_label(
        f"{jobs.JOB_UTILIZATION_AVG.record}\nand {_ON_J}\n{jobs.JOB_SHARED_GPUS.record} > 0", "source", "job_time_split"
    )
    + f"\nor {_ON_J}\n"
    + _with_label(jobs.JOB_UTILIZATION_AVG.record, "source", "nvml_utilization"),
    "How busy (0-100) the GPUs each training job holds are: their mean SM activity where they have GPM "
    "(source gpm_sm_active), else, for a job on a GPU other jobs share, its own share of its time in compute "
    "(source job_time_split: the device's figures are no one job's), else NVML's utilization (source "
    "nvml_utilization, which only says a kernel ran).",
)

# --- model FLOPs utilization ------------------------------------------------------------------------
ACHIEVED_FLOPS = RecordingRule(
    f"model_type_job_id_precision:ml_training_model_flops:rate{WINDOW}",
    f"sum by (model_type, job_id, precision) (rate({_FLOPS}[{WINDOW}]))",
    f"Model FLOP/s each training job achieved over {WINDOW}, summed over its ranks, by precision.",
)
HELD_MODELS = RecordingRule(
    "model_type_job_id_gpu_name:ml_training_job_gpu_info:count",
    f"count by (model_type, job_id, gpu_name) ({jobs.HELD.record})",
    "GPUs (whole GPUs and MIG devices) each training job holds, by GPU model (gpu_name, a MIG device's parent's).",
)
HELD_CAPACITY = RecordingRule(
    "model_type_job_id_gpu_name:ml_gpu_mig_sm_share:sum",
    f"sum by (model_type, job_id, gpu_name) ({jobs.HELD_SM_SHARE.record})",
    "Whole GPUs' worth of SMs each training job holds, by GPU model: 1 per whole GPU, a MIG device's share "
    "of its GPU's SMs.",
)
HELD_PEAK = "model_type_job_id_gpu_name_precision:ml_gpu_peak_flops:max"
JOB_PEAK = RecordingRule(
    "model_type_job_id_precision:ml_gpu_peak_flops:sum",
    f"sum by (model_type, job_id, precision) (\n"
    f"  {HELD_PEAK}\n  * on (model_type, job_id, gpu_name) group_left ()\n  {HELD_CAPACITY.record}\n)\n"
    f"and on (model_type, job_id, precision)\n"
    f"(\n  sum by (model_type, job_id, precision) (\n"
    f"    {HELD_PEAK} * 0\n    + on (model_type, job_id, gpu_name) group_left ()\n    {HELD_MODELS.record}\n  )\n"
    f"  == {_ON_J} group_left ()\n  {jobs.JOB_GPUS.record}\n)",
    "Summed dense peak FLOP/s of the GPUs each training job holds, by precision (a MIG device's scaled by "
    "its share of its GPU's SMs); only where every GPU it holds has a peak at that precision.",
)
MFU = RecordingRule(
    records.MFU,
    f"sum {_J} (\n  {ACHIEVED_FLOPS.record}\n  / on (model_type, job_id, precision)\n  {JOB_PEAK.record}\n)\n"
    f"unless {_ON_J}\n"
    f"(\n  {ACHIEVED_FLOPS.record}\n  unless on (model_type, job_id, precision)\n  {JOB_PEAK.record}\n)",
    f"Model FLOPs utilization (0-1) of each training job over {WINDOW}: achieved model FLOP/s over the dense "
    "peak of the GPUs it holds (PaLM's MFU); absent where a GPU it holds has no known peak at its precision.",
)
UNKNOWN_GPU_MODELS = RecordingRule(
    "gpu_name:ml_gpu_peak_flops:unknown",
    f"sum by (gpu_name) (\n  {HELD_MODELS.record}\n  unless on (gpu_name)\n  {HELD_PEAK}\n)",
    "GPUs held by a training job whose model (gpu_name) the peak-FLOPs table does not know, by model: "
    "their jobs have no MFU.",
)


def held_peak(cfg: ObservabilityConfig) -> RecordingRule:
    """The dense peak FLOP/s of one GPU of each model a training job holds, by precision: per
    precision, one branch per peak value, selecting the held models that have it."""
    per_precision = []
    for precision in catalog.MODEL_FLOPS_PRECISIONS:
        by_value: dict[float, list[str]] = {}
        for name, value in cfg.peak_flops.by_precision(precision):
            by_value.setdefault(value, []).append(name)
        branches = [
            f"  {HELD_MODELS.record}{{{_models_matcher(names)}}} * 0 + {value:.17g}"
            for value, names in by_value.items()
        ]
        if branches:
            per_precision.append(_with_label("(\n" + "\nor\n".join(branches) + "\n)", "precision", precision))
    return RecordingRule(
        HELD_PEAK,
        "\nor\n".join(per_precision),
        "Dense peak FLOP/s of one GPU of each model a training job holds, by precision "
        "(foxhunt_trainer/contract/peak_flops.json); models the table does not know are not recorded.",
    )


_RE2_SPECIAL = re.compile(r"[.+*?()|\[\]{}^$]")


def _models_matcher(names: list[str]) -> str:
    if len(names) == 1:
        return matcher("gpu_name", names[0])
    # RE2 metacharacters escaped (a backslash doubled inside the PromQL string).
    return regex_matcher("gpu_name", "|".join(_RE2_SPECIAL.sub(r"\\\\\g<0>", name) for name in names))


# --- the verdict ------------------------------------------------------------------------------------
CAUSES = "model_type_job_id_verdict:ml_training_bottleneck:share"
VERDICT = records.VERDICT


def _phase(phase: str) -> str:
    return f'sum {_J} ({PHASE_SHARE.record}{{phase="{phase}"}})'


def causes(cfg: ObservabilityConfig) -> RecordingRule:
    th = cfg.thresholds
    # The distributed group's communication share (the collective phase over the step), else the phase.
    communication = f"max {_J} ({distributed.JOB_COMMUNICATION_SHARE})\nor {_ON_J}\n{_phase('collective')}"
    branches = (
        (VERDICT_INPUT, _phase("data_wait"), th.training_data_wait_ratio),
        (VERDICT_CHECKPOINT, _phase("checkpoint"), th.training_checkpoint_ratio),
        (VERDICT_COMMUNICATION, f"(\n{communication}\n)", th.training_communication_share_ratio),
    )
    return RecordingRule(
        CAUSES,
        "\nor\n".join(_with_label(f"{share} > {t.promql}", "verdict", verdict) for verdict, share, t in branches),
        f"Each bottleneck cause of each training job whose share of its time is above its threshold (data wait "
        f"above {th.training_data_wait_ratio.short}: input-bound; checkpoints above "
        f"{th.training_checkpoint_ratio.short}: checkpoint-bound; communication above "
        f"{th.training_communication_share_ratio.short}: communication-bound), with that share.",
    )


def verdict(cfg: ObservabilityConfig) -> RecordingRule:
    th = cfg.thresholds
    computing = f"{GOODPUT.record} > {th.training_compute_saturated_ratio.promql}"
    busy = f"max {_J} ({GPU_BUSY.record}) > {th.training_compute_saturated_gpu_busy_percent.promql}"
    saturated = (
        f"(\n  {computing}\n  and {_ON_J}\n  {busy}\n)\n"
        f"or {_ON_J}\n(\n  {computing}\n  unless {_ON_J}\n  {GPU_BUSY.record}\n)\n"
        f"or {_ON_J}\n(\n  {busy}\n  unless {_ON_J}\n  {GOODPUT.record}\n)"
    )
    judged = f"{GOODPUT.record}\nor {_ON_J}\nmax {_J} ({GPU_BUSY.record})"
    return RecordingRule(
        VERDICT,
        f"topk {_J} (1, {CAUSES}) * 0 + 1\n"
        f"or {_ON_J}\n"
        + _with_label(f"(\n{saturated}\n) * 0 + 1", "verdict", VERDICT_COMPUTE)
        + f"\nor {_ON_J}\n"
        + _with_label(f"(\n{judged}\n) * 0 + 1", "verdict", VERDICT_UNDERUTILIZED),
        "What holds each training job back (value 1, label verdict): input-bound, checkpoint-bound or "
        "communication-bound where that cause's share of its time is above its threshold (the largest wins), "
        f"else compute-saturated where it computes more than {th.training_compute_saturated_ratio.short} of "
        f"the time on GPUs busier than {th.training_compute_saturated_gpu_busy_percent.short}, else underutilized.",
    )


# --- waste and its cost -----------------------------------------------------------------------------
BADPUT_GPU_HOURS = RecordingRule(
    "model_type_job_id:ml_training_badput:gpu_hours",
    f"{jobs.JOB_GPU_HOURS.record}\n* {_ON_J}\n(1 - {GOODPUT_SO_FAR.record})",
    "GPU-hours each training job has held so far outside productive training steps (its badput).",
)
BADPUT_COST = "model_type_job_id:ml_training_badput:cost"
BADPUT_COST_BY_PHASE = "model_type_job_id_phase:ml_training_badput:cost"
VERDICT_GPUS = "verdict:ml_training_job_gpu_info:count"
VERDICT_GPU_HOURS_24H = "verdict:ml_training_job_gpu_info:gpu_hours_24h"
CHECKPOINT_BYTES = RecordingRule(
    records.CHECKPOINT_BYTES,
    f"sum {_J} ({_WRITTEN})",
    "Bytes of checkpoints each training job has saved so far, summed over its ranks.",
)
CHECKPOINT_STORAGE_COST = "model_type_job_id:ml_checkpoint_storage:cost"
MODEL_CHECKPOINT_STORAGE_COST_24H = "model_type:ml_checkpoint_storage:cost_24h"


def cost_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The rules that carry the stack's prices and the evaluation interval."""
    interval = cfg.evaluation_interval_seconds
    months = cfg.checkpoint_retention_days * 86400 / SECONDS_PER_MONTH
    per_byte = f"{cfg.checkpoint_storage_price_per_gb_month / BYTES_PER_GB * months:.17g}"
    retention = f"{cfg.checkpoint_retention_days:g} days"
    price = f"{cfg.checkpoint_storage_price_per_gb_month:g} {cfg.currency} per GB-month"
    return (
        RecordingRule(
            BADPUT_COST,
            f"{jobs.JOB_COST}\n* {_ON_J}\n(1 - {GOODPUT_SO_FAR.record})",
            f"Estimated cost ({cfg.currency}) of each training job's badput so far: its cost times the share of "
            "its life outside productive training steps.",
        ),
        RecordingRule(
            BADPUT_COST_BY_PHASE,
            f'{jobs.JOB_COST}\n* {_ON_J} group_right ()\n{PHASE_SHARE_SO_FAR.record}{{phase!="{GOOD_PHASE}"}}',
            f"Estimated cost ({cfg.currency}) of each training job's badput so far, by cause (phase).",
        ),
        RecordingRule(
            VERDICT_GPUS,
            f"sum by (verdict) (\n  {jobs.JOB_GPUS.record}\n  * {_ON_J} group_right ()\n  {VERDICT}\n)",
            "GPUs held by training jobs, by the jobs' verdict.",
        ),
        RecordingRule(
            VERDICT_GPU_HOURS_24H,
            f"sum_over_time({VERDICT_GPUS}[1d]) * {interval} / 3600",
            "GPU-hours held by training jobs over the last 24 hours, by the jobs' verdict at the time.",
        ),
        RecordingRule(
            CHECKPOINT_STORAGE_COST,
            f"{CHECKPOINT_BYTES.record} * {per_byte}",
            f"Estimated storage cost ({cfg.currency}) of the checkpoints each training job has saved so far, each "
            f"kept {retention} at {price}.",
        ),
        RecordingRule(
            MODEL_CHECKPOINT_STORAGE_COST_24H,
            f"sum by (model_type) (increase({_WRITTEN}[1d])) * {per_byte}",
            f"Estimated storage cost ({cfg.currency}) of the checkpoints saved per model type over the last 24 "
            f"hours, each kept {retention} at {price}.",
        ),
    )


# The verdict's thresholds (thresholds.yaml records) as the trainer wheel reads them.
VERDICT_THRESHOLDS_MODULE = "foxhunt_trainer/contract/verdict_thresholds.py"
_VERDICT_THRESHOLD_NAMES = (
    "training_data_wait_ratio",
    "training_checkpoint_ratio",
    "training_communication_share_ratio",
    "training_compute_saturated_ratio",
    "training_compute_saturated_gpu_busy_percent",
)


def render_verdict_thresholds(cfg: ObservabilityConfig) -> str:
    """The text of `VERDICT_THRESHOLDS_MODULE`: the verdict's thresholds of `cfg` as constants."""
    lines = [
        '"""The bottleneck verdict\'s thresholds (`foxhunt_trainer.contract.verdicts`), copied from',
        "observability/thresholds.yaml by `make generate`: edit that file, never this one (a test fails while",
        'this copy is stale)."""',
        "",
    ]
    for name in _VERDICT_THRESHOLD_NAMES:
        record = getattr(cfg.thresholds, name)
        lines.append(f"{name.upper()} = {record.value!r}  # {record.name} ({record.unit})")
    return "\n".join(lines) + "\n"


def goodput_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """Every rule of the group, in order (a rule reads only records written before it)."""
    return (
        PHASE_RATE,
        JOB_TIME,
        PHASE_SHARE,
        GOODPUT,
        PHASE_SHARE_SO_FAR,
        GOODPUT_SO_FAR,
        GPU_BUSY,
        ACHIEVED_FLOPS,
        HELD_MODELS,
        HELD_CAPACITY,
        held_peak(cfg),
        JOB_PEAK,
        MFU,
        UNKNOWN_GPU_MODELS,
        causes(cfg),
        verdict(cfg),
        BADPUT_GPU_HOURS,
        CHECKPOINT_BYTES,
        *cost_rules(cfg),
    )


def goodput_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    return [
        {
            "name": GROUP,
            "interval": duration(cfg.evaluation_interval_seconds),
            "rules": [r.to_rule() for r in goodput_rules(cfg)],
        }
    ]
