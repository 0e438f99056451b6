"""Group `ml_training_efficiency`: a training job losing a large share of its time to a cause it can fix.

Read from the recorded time split (`goodput.PHASE_SHARE`, the share of each job's time per phase
over 5m). Info like the other waste alerts (GPUUtilizationLow): an optimisation opportunity,
routed to the low-priority receiver, never paged. Each description says what to change.
"""

from __future__ import annotations

from foxhunt_trainer.contract import catalog, verdicts
from observability.config import ObservabilityConfig
from observability.rules import goodput, jobs
from observability.rules.rule_types import AlertRule, RunbookQuery, Severity
from observability.thresholds import Threshold

GROUP = "ml_training_efficiency"
JOB_LABELS = jobs.JOB_LABELS
FOR_SECONDS = 1800
_JOB = "Job {{ $labels.job_id }} ({{ $labels.model_type }})"
_ONE_JOB = '{model_type="<model_type>", job_id="<job_id>"}'


def _share(phase: str, threshold: Threshold) -> str:
    return f'max by (model_type, job_id) ({goodput.PHASE_SHARE.record}{{phase="{phase}"}}) > {threshold.promql}'


def _queries(phase: str) -> tuple[RunbookQuery, ...]:
    one = f'{{model_type="<model_type>", job_id="<job_id>", phase="{phase}"}}'
    return (
        RunbookQuery(
            "The job's share of time in this phase over the last 6 hours", f"{goodput.PHASE_SHARE.record}{one}[6h]"
        ),
        RunbookQuery("Where the rest of the job's time goes", f"{goodput.PHASE_SHARE.record}{_ONE_JOB}"),
        RunbookQuery("The job's verdict", f"{goodput.VERDICT}{_ONE_JOB}"),
        RunbookQuery("How busy the job's GPUs are", f"{goodput.GPU_BUSY.record}{_ONE_JOB}"),
    )


def efficiency_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    data_wait, checkpoint = cfg.thresholds.training_data_wait_ratio, cfg.thresholds.training_checkpoint_ratio
    return (
        AlertRule(
            name="TrainingInputBound",
            group=GROUP,
            severity=Severity.INFO,
            expr=_share("data_wait", data_wait),
            for_seconds=FOR_SECONDS,
            summary=f"A training job has lost more than {data_wait.text} of its time waiting for data for 30 minutes.",
            description=(
                f"{_JOB} spent {{{{ $value | humanizePercentage }}}} of its time over the last 5m waiting for the "
                f"next batch, above {data_wait.short} for 30m: its GPUs wait for the input pipeline. "
                f"{verdicts.INPUT_BOUND.change}."
            ),
            impact="The job's GPUs are paid for while they wait for input; the run takes longer than its compute needs",
            action=(
                "Raise DataLoader num_workers towards the CPU cores the pod requests, with persistent_workers=True",
                "Raise prefetch_factor and set pin_memory=True so batches are ready before the step asks",
                "Check the pod's CPU throttling and the storage the data set is read from",
                "Cache decoded samples or preprocess the data set offline if decoding dominates",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                *_queries("data_wait"),
                RunbookQuery(
                    "Data loading p95 per model",
                    f"histogram_quantile(0.95, sum by (model_type, le) "
                    f"(rate({catalog.TRAINING_DATA_LOADING_SECONDS.bucket}[5m])))",
                ),
            ),
            rationale=(
                "Info: an optimisation opportunity, never paged. The trainer library times every wait for the next "
                "batch (phase data_wait) separately from the step itself, so this is the input pipeline's share of "
                "the job's time, not a guess from GPU utilization (which reads 100% for a job starved between "
                "bursts). 30 minutes keeps the first epoch's warm-up and a one-off slow shard from raising it."
            ),
        ),
        AlertRule(
            name="TrainingCheckpointBound",
            group=GROUP,
            severity=Severity.INFO,
            expr=_share("checkpoint", checkpoint),
            for_seconds=FOR_SECONDS,
            summary=(
                f"A training job has spent more than {checkpoint.text} of its time saving checkpoints for 30 minutes."
            ),
            description=(
                f"{_JOB} spent {{{{ $value | humanizePercentage }}}} of its time over the last 5m saving checkpoints, "
                f"above {checkpoint.short} for 30m: training stops while it saves. {verdicts.CHECKPOINT_BOUND.change}."
            ),
            impact="The job's GPUs idle while checkpoints are written; the run takes longer than its compute needs",
            action=(
                "Lengthen the checkpoint interval: a save costs its duration every interval, a failure loses at most "
                "one interval",
                "Save asynchronously (torch.distributed.checkpoint.async_save) so training continues during the write",
                "Write to fast local storage and upload in the background; check the storage's write throughput",
                "Save only the state a restart needs (model, optimizer, step), sharded across ranks",
            ),
            locating_labels=JOB_LABELS,
            queries=(
                *_queries("checkpoint"),
                RunbookQuery(
                    "Checkpoint save p95 per model",
                    f"histogram_quantile(0.95, sum by (model_type, le) "
                    f"(rate({catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket}[1h])))",
                ),
                RunbookQuery("Checkpoint bytes the job has written", f"{goodput.CHECKPOINT_BYTES.record}{_ONE_JOB}"),
            ),
            rationale=(
                "Info: an optimisation opportunity, never paged. The trainer library times every save (phase "
                "checkpoint); 30 minutes covers several checkpoint intervals, so one slow save does not raise it."
            ),
        ),
    )
