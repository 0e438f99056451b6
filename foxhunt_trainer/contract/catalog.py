"""The metric catalog: the single source of truth for every metric the platform emits or queries.

Every other part of the project (poller, instrumentation, alert and recording rules, dashboards,
policies, tests) takes metric names, types and labels from here and never spells a name again.
This module imports nothing else from the project.

Names are the ones of the platform's monitoring report (`ml_*`) because the users' binaries
already emit them. Where such a name breaks the Prometheus naming conventions (base units,
`_total` on counters) the name is kept and its help text says so (`KEPT_NAME_NOTE`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class MetricType(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


class Producer(enum.Enum):
    GPU_POLLER = "gpu_poller"
    TRAINING_JOB = "training_job"
    ML_SERVICE = "ml_service"
    TEMPO_METRICS_GENERATOR = "tempo_metrics_generator"
    PROMETHEUS = "prometheus"
    KUBE_STATE_METRICS = "kube_state_metrics"


KEPT_NAME_NOTE = "(Name kept: users' binaries already emit it; {why}.)"

# Latency-style buckets in seconds, from 5 ms to 10 min: training iterations, checkpoints, loads.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
# Request latency buckets in seconds for online inference (p99 alert threshold at 100 ms).
INFERENCE_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    1.0,
    2.5,
)
# Whole training jobs: minutes to a day.
JOB_DURATION_BUCKETS: tuple[float, ...] = (
    60.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    86400.0,
)
# Prediction confidence is a ratio in [0, 1].
CONFIDENCE_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Metric:
    """One metric family as it appears on a `/metrics` page."""

    name: str
    type: MetricType
    unit: str
    help: str
    labels: tuple[str, ...]
    producer: Producer
    buckets: tuple[float, ...] = ()

    @property
    def series_names(self) -> tuple[str, ...]:
        """The sample names Prometheus stores for this family."""
        if self.type is MetricType.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)

    @property
    def bucket(self) -> str:
        """The `_bucket` series of a histogram (for `histogram_quantile`)."""
        if self.type is not MetricType.HISTOGRAM:
            raise TypeError(f"{self.name} is a {self.type.value}, not a histogram")
        return f"{self.name}_bucket"

    @property
    def count(self) -> str:
        if self.type is not MetricType.HISTOGRAM:
            raise TypeError(f"{self.name} is a {self.type.value}, not a histogram")
        return f"{self.name}_count"

    @property
    def sum(self) -> str:
        if self.type is not MetricType.HISTOGRAM:
            raise TypeError(f"{self.name} is a {self.type.value}, not a histogram")
        return f"{self.name}_sum"

    def __str__(self) -> str:
        return self.name


# Label sets shared by many families.
JOB = ("model_type", "job_id")
FOLD = ("model_type", "job_id", "fold")
GPU = ("node", "gpu_id", "uuid", "gpu_name")
# Per-rank series: one process of a (possibly distributed) job; `rank` is bounded by the world size.
RANK_JOB = ("model_type", "job_id", "rank")

_T = Producer.TRAINING_JOB
_G = Producer.GPU_POLLER
_S = Producer.ML_SERVICE
_M = Producer.TEMPO_METRICS_GENERATOR
_P = Producer.PROMETHEUS
_K = Producer.KUBE_STATE_METRICS
_GAUGE, _COUNTER, _HISTOGRAM, _INFO = MetricType.GAUGE, MetricType.COUNTER, MetricType.HISTOGRAM, MetricType.INFO


def _metric(
    name: str,
    type: MetricType,
    unit: str,
    labels: tuple[str, ...],
    producer: Producer,
    help: str,
    *,
    buckets: tuple[float, ...] = (),
) -> Metric:
    """One row of the table below: the identity columns first, the help text last, so the rows line up."""
    return Metric(name, type, unit, help, labels, producer, buckets)


# One metric per line: CONSTANT = _metric(name, type, unit, labels, producer, help[, buckets=...]).
# fmt: off
# --- A. Training progress (monitoring report) -------------------------------------------------------
TRAINING_LOSS = _metric("ml_training_loss", _GAUGE, "", JOB, _T, "Training loss of the latest epoch.")
TRAINING_VALIDATION_LOSS = _metric("ml_training_validation_loss", _GAUGE, "", JOB, _T, "Validation loss of the latest epoch.")
TRAINING_CURRENT_EPOCH = _metric("ml_training_current_epoch", _GAUGE, "", JOB, _T, "Current training epoch number.")
TRAINING_PROGRESS_PERCENT = _metric("ml_training_progress_percent", _GAUGE, "percent", JOB, _T, "Training progress from 0 to 100. " + KEPT_NAME_NOTE.format(why="a percentage, not the base-unit ratio 0-1"))
TRAINING_EPOCHS_PER_SECOND = _metric("ml_training_epochs_per_second", _GAUGE, "epochs/s", JOB, _T, "Training speed in epochs per second.")
TRAINING_ITERATION_SECONDS = _metric("ml_training_iteration_seconds", _HISTOGRAM, "seconds", JOB, _T, "Duration of one training iteration.", buckets=DURATION_BUCKETS)
TRAINING_CONVERGENCE_RATE = _metric("ml_training_convergence_rate", _GAUGE, "", JOB, _T, "Change of the training loss per epoch (negative means improving).")

# --- B. NaN detection and training errors ---------------------------------------------------
TRAINING_NAN_COUNT = _metric("ml_training_nan_count", _COUNTER, "", (*JOB, "tensor_type"), _T, "Non-finite values (NaN, infinity) detected, by tensor type (loss, validation_loss, gradient, activation, weights). " + KEPT_NAME_NOTE.format(why="a counter without the `_total` suffix"))
TRAINING_GRADIENT_EXPLOSION_TOTAL = _metric("ml_training_gradient_explosion_total", _COUNTER, "", JOB, _T, "Gradient explosion events.")
TRAINING_FAILURES_TOTAL = _metric("ml_training_failures_total", _COUNTER, "", (*JOB, "error_type"), _T, "Training jobs that ended with an error, by error type (nan, oom, timeout, config, io, exception).")

# --- C. GPU monitoring (report names; emitted by the NVML poller) -------------------------
GPU_UTILIZATION_PERCENT = _metric("ml_gpu_utilization_percent", _GAUGE, "percent", GPU, _G, "Percent of time over the last sample period during which a kernel ran on the GPU (0-100). " + KEPT_NAME_NOTE.format(why="a percentage, not a ratio"))
GPU_MEMORY_UTILIZATION_PERCENT = _metric("ml_gpu_memory_utilization_percent", _GAUGE, "percent", GPU, _G, "Percent of time over the last sample period during which device memory was read or written (0-100), as NVML reports it; named like its sibling ml_gpu_utilization_percent.")
GPU_MEMORY_USED_BYTES = _metric("ml_gpu_memory_used_bytes", _GAUGE, "bytes", GPU, _G, "GPU memory used.")
GPU_MEMORY_TOTAL_BYTES = _metric("ml_gpu_memory_total_bytes", _GAUGE, "bytes", GPU, _G, "Total GPU memory.")
GPU_TEMPERATURE_CELSIUS = _metric("ml_gpu_temperature_celsius", _GAUGE, "celsius", GPU, _G, "GPU core temperature.")
GPU_POWER_WATTS = _metric("ml_gpu_power_watts", _GAUGE, "watts", GPU, _G, "GPU power draw.")
GPU_POWER_LIMIT_WATTS = _metric("ml_gpu_power_limit_watts", _GAUGE, "watts", GPU, _G, "Enforced GPU power limit.")
GPU_SM_CLOCK_HERTZ = _metric("ml_gpu_sm_clock_hertz", _GAUGE, "hertz", GPU, _G, "Current SM clock.")
GPU_MEMORY_CLOCK_HERTZ = _metric("ml_gpu_memory_clock_hertz", _GAUGE, "hertz", GPU, _G, "Current memory clock.")
# GPU Performance Monitoring (GPM, NVML on Hopper and newer): what the GPU really does, where
# ml_gpu_utilization_percent only says that some kernel ran. Averaged over the interval between
# the poller's last two collection passes; absent on GPUs without GPM and on the first pass after
# the poller starts or a GPU returns. Percent like the other utilization figures of this catalog.
_GPM_NOTE = (
    " Averaged over the interval between the poller's last two collection passes (NVML GPM, Hopper "
    "and newer; absent elsewhere)."
)
GPU_SM_ACTIVE_PERCENT = _metric("ml_gpu_sm_active_percent", _GAUGE, "percent", GPU, _G, "Percent of SMs busy (at least one warp resident), the share of the GPU doing work (0-100; DCGM's PROF_SM_ACTIVE x 100)." + _GPM_NOTE)
GPU_SM_OCCUPANCY_PERCENT = _metric("ml_gpu_sm_occupancy_percent", _GAUGE, "percent", GPU, _G, "Resident warps as a percent of the SMs' maximum (0-100; DCGM's PROF_SM_OCCUPANCY x 100)." + _GPM_NOTE)
GPU_TENSOR_ACTIVE_PERCENT = _metric("ml_gpu_tensor_active_percent", _GAUGE, "percent", GPU, _G, "Percent of time the SMs ran tensor-core instructions of any type (0-100; DCGM's PROF_PIPE_TENSOR_ACTIVE x 100)." + _GPM_NOTE)
GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT = _metric("ml_gpu_dram_bandwidth_utilization_percent", _GAUGE, "percent", GPU, _G, "Device-memory bandwidth used as a percent of its theoretical maximum (0-100; DCGM's PROF_DRAM_ACTIVE x 100)." + _GPM_NOTE)
GPU_PCIE_BYTES_TOTAL = _metric("ml_gpu_pcie_bytes_total", _COUNTER, "bytes", (*GPU, "direction"), _G, "PCIe traffic counted by the poller from NVML GPM throughput, by direction rx (to the GPU) or tx (from the GPU); appears after the second pass, keeps counting across NVML re-initialisations.")
GPU_NVLINK_BYTES_TOTAL = _metric("ml_gpu_nvlink_bytes_total", _COUNTER, "bytes", (*GPU, "direction"), _G, "NVLink traffic over all links counted by the poller from NVML GPM throughput, by direction rx (read by the GPU) or tx (written); appears after the second pass, on GPUs with NVLink.")
GPU_CLOCK_THROTTLE_ACTIVE = _metric("ml_gpu_clock_throttle_active", _GAUGE, "", (*GPU, "reason"), _G, "1 while the named clock-throttle (event) reason is active, else 0.")
GPU_ECC_ERRORS_TOTAL = _metric("ml_gpu_ecc_errors_total", _COUNTER, "", (*GPU, "ecc_type"), _G, "ECC errors since the driver loaded (volatile), by ecc_type corrected or uncorrected.")
GPU_XID_ERRORS_TOTAL = _metric("ml_gpu_xid_errors_total", _COUNTER, "", (*GPU, "xid"), _G, "XID events since the poller started, by XID code; a code's series appears on its first occurrence.")
GPU_ERRORS_TOTAL = _metric("ml_gpu_errors_total", _COUNTER, "", (*GPU, "error_type"), _G, "GPU hardware errors by error type (xid, ecc_uncorrected, gpu_lost).")
GPU_ENERGY_JOULES_TOTAL = _metric("ml_gpu_energy_joules_total", _COUNTER, "joules", GPU, _G, "Energy the GPU consumed since the driver loaded (NVML total energy consumption); absent where the GPU or driver cannot report it.")
# MIG (Multi-Instance GPU): each MIG device is a GPU of its own in the series above (its `uuid` the
# `MIG-...` the device plugin hands the pod, `gpu_id` `<parent index>/<slot>`, `gpu_name` its parent's
# product name), reporting what NVML answers for a MIG device (memory, GPM); the parent keeps its
# device-level series (power, temperature, clocks, errors).
GPU_MIG_DEVICE_INFO = _metric("ml_gpu_mig_device_info", _INFO, "", (*GPU, "parent_gpu_id", "parent_uuid", "profile"), _G, "1 for each MIG device of a GPU in MIG mode: its parent GPU (parent_gpu_id, parent_uuid) and its MIG profile (e.g. 1g.10gb); gone when the instance is destroyed.")
# The compute slices of a whole GPU that MIG divides (A100, H100, H200, B200): a MIG device's share of
# its GPU's SMs is its profile's compute slices over these.
MIG_COMPUTE_SLICES = 7


def mig_profile_compute_slices(profile: str) -> int | None:
    """The compute slices of a MIG profile (`3g.40gb` -> 3; `1c.3g.40gb`, a compute instance, -> 1);
    None where the profile does not say."""
    head = profile.split(".", 1)[0]
    count = head[:-1] if head[-1:] in ("g", "c") else ""
    return int(count) if count.isdigit() and 0 < int(count) <= MIG_COMPUTE_SLICES else None


GPU_MIG_SM_SHARE_RATIO = _metric("ml_gpu_mig_sm_share_ratio", _GAUGE, "ratio", GPU, _G, "The MIG device's share (0-1) of its parent GPU's SMs: its profile's compute slices over the 7 of a whole GPU; scales the peak FLOPs (MFU) and the price of the instance.")
GPU_DRIVER_INFO = _metric("ml_gpu_driver_info", _INFO, "", ("node", "driver_version", "nvml_version", "cuda_driver_version"), _G, "NVML and driver versions on the node (value always 1).")
GPU_POLLER_NVML_UP = _metric("ml_gpu_poller_nvml_up", _GAUGE, "", ("node",), _G, "1 when the last collection reached NVML, 0 when NVML is missing or failing.")
GPU_POLLER_COLLECTION_DURATION_SECONDS = _metric("ml_gpu_poller_collection_duration_seconds", _GAUGE, "seconds", ("node",), _G, "Wall time of the last NVML collection pass.")
GPU_POLLER_COLLECTION_FAILURES_TOTAL = _metric("ml_gpu_poller_collection_failures_total", _COUNTER, "", ("node", "reason"), _G, "Failed NVML calls or passes by reason (init, gpu_lost, query, event).")
GPU_POLLER_DEVICES = _metric("ml_gpu_poller_devices", _GAUGE, "", ("node",), _G, "GPUs answering: read in the last collection (0 when NVML is down).")
GPU_POLLER_DEVICES_ENUMERATED = _metric("ml_gpu_poller_devices_enumerated", _GAUGE, "", ("node",), _G, "GPUs NVML enumerates on the node, answering or not (0 when NVML is down); more than ml_gpu_poller_devices means a GPU is present but cannot be queried (lost or failing).")

# --- D. Checkpoints ---------------------------------------------------------------------------
CHECKPOINT_SAVES_TOTAL = _metric("ml_checkpoint_saves_total", _COUNTER, "", JOB, _T, "Successful checkpoint saves.")
CHECKPOINT_SAVE_FAILURES_TOTAL = _metric("ml_checkpoint_save_failures_total", _COUNTER, "", (*JOB, "error_type"), _T, "Checkpoint save failures by error type (io_error, timeout, serialization, storage, other).")
CHECKPOINT_SAVE_DURATION_SECONDS = _metric("ml_checkpoint_save_duration_seconds", _HISTOGRAM, "seconds", JOB, _T, "Checkpoint save duration.", buckets=DURATION_BUCKETS)
CHECKPOINT_SIZE_BYTES = _metric("ml_checkpoint_size_bytes", _GAUGE, "bytes", JOB, _T, "Size of the latest checkpoint.")
CHECKPOINT_LAST_GOOD_STEP = _metric("ml_checkpoint_last_good_step", _GAUGE, "", JOB, _T, "Training step of the latest good checkpoint (saved without error, with finite weights): where a rollback resumes.")
TRAINING_ROLLBACKS_TOTAL = _metric("ml_training_rollbacks_total", _COUNTER, "", JOB, _T, "Rollbacks of non-finite training to the last good checkpoint (learning rate lowered, training continued).")
TRAINING_RESUMED = _metric("ml_training_resumed", _GAUGE, "", JOB, _T, "1 when this process resumed the job from its latest good checkpoint (a restarted pod), 0 when it started fresh.")
TRAINING_ROLLBACK_BUDGET = _metric("ml_training_rollback_budget", _GAUGE, "", JOB, _T, "Rollbacks the job may still make before non-finite training ends it (0 with remediation off).")
CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS = _metric("ml_checkpoint_last_good_timestamp_seconds", _GAUGE, "seconds", JOB, _T, "Unix time the latest good checkpoint was saved.")
CHECKPOINT_WRITTEN_BYTES_TOTAL = _metric("ml_checkpoint_written_bytes_total", _COUNTER, "bytes", RANK_JOB, _T, "Bytes of checkpoints this rank saved successfully (what checkpoint storage is billed for).")

# --- Training efficiency: model FLOPs (the numerator of model FLOPs utilization) ------------------
# The values of the model-FLOPs counter's `precision` label: fp32 on CUDA cores, the others on
# tensor cores (the peak-FLOPs table, foxhunt_trainer/contract/peak_flops.json, is keyed by them too).
MODEL_FLOPS_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")
TRAINING_MODEL_FLOPS_TOTAL = _metric("ml_training_model_flops_total", _COUNTER, "", (*RANK_JOB, "precision"), _T, "Model FLOPs (forward and backward, as torch.utils.flop_counter counts them, or as declared) of the training steps this rank completed, by the precision its matrix multiplies run in (fp32, tf32, bf16, fp16, fp8).")

# --- Device memory each process holds on its GPU (what splits a time-sliced GPU by job) ------------
TRAINING_GPU_MEMORY_RESERVED_BYTES = _metric("ml_training_gpu_memory_reserved_bytes", _GAUGE, "bytes", (*RANK_JOB, "uuid"), _T, "Device memory this rank's allocator holds on the GPU named by uuid (PyTorch: torch.cuda.memory_reserved): the job's own share of a GPU other jobs may share.")

# --- E. Model performance ---------------------------------------------------------------------
MODEL_ACCURACY = _metric("ml_model_accuracy", _GAUGE, "ratio", JOB, _T, "Model accuracy (0-1) on the validation set.")
MODEL_F1_SCORE = _metric("ml_model_f1_score", _GAUGE, "ratio", JOB, _T, "F1 score (0-1).")
MODEL_PRECISION = _metric("ml_model_precision", _GAUGE, "ratio", JOB, _T, "Precision (0-1).")
MODEL_RECALL = _metric("ml_model_recall", _GAUGE, "ratio", JOB, _T, "Recall (0-1).")
# Regression quality on the validation set (the classification ratios above are 0-1; these are not).
MODEL_RMSE = _metric("ml_model_rmse", _GAUGE, "", JOB, _T, "Root mean squared error of a regression model on the validation set, in the target's unit (0 = exact).")
MODEL_MAE = _metric("ml_model_mae", _GAUGE, "", JOB, _T, "Mean absolute error of a regression model on the validation set, in the target's unit (0 = exact).")
MODEL_R2_SCORE = _metric("ml_model_r2_score", _GAUGE, "", JOB, _T, "Coefficient of determination (R squared) of a regression model on the validation set: 1 = exact, 0 = no better than predicting the mean, negative = worse (averaged over the outputs of a multi-output model).")

# --- F. Resource usage ------------------------------------------------------------------------
TRAINING_MEMORY_USED_BYTES = _metric("ml_training_memory_used_bytes", _GAUGE, "bytes", JOB, _T, "System memory used by the training job.")
TRAINING_CPU_USAGE_PERCENT = _metric("ml_training_cpu_usage_percent", _GAUGE, "percent", JOB, _T, "CPU usage of the training job (100 = one core). " + KEPT_NAME_NOTE.format(why="a percentage, not CPU seconds"))
TRAINING_ACTIVE_WORKERS = _metric("ml_training_active_workers", _GAUGE, "", JOB, _T, "Active training workers.")

# --- G. Data pipeline -------------------------------------------------------------------------
TRAINING_DATA_BATCHES_TOTAL = _metric("ml_training_data_batches_total", _COUNTER, "", JOB, _T, "Data batches processed.")
TRAINING_DATA_LOADING_SECONDS = _metric("ml_training_data_loading_seconds", _HISTOGRAM, "seconds", JOB, _T, "Data loading duration.", buckets=DURATION_BUCKETS)
FEATURE_ENGINEERING_ERRORS_TOTAL = _metric("ml_feature_engineering_errors_total", _COUNTER, "", ("model_type", "error_type"), _T, "Feature engineering errors.")

# --- H. Job lifecycle -------------------------------------------------------------------------
TRAINING_JOBS_BY_STATUS = _metric("ml_training_jobs_by_status", _GAUGE, "", ("status",), _T, "Training jobs by status (pending, running, completed, failed, stopped, paused).")
TRAINING_JOB_GPU_INFO = _metric("ml_training_job_gpu_info", _INFO, "", (*JOB, "uuid"), _T, "1 for each GPU (by NVML UUID) the training job's container was given; joins the GPU poller's series to the job on `uuid`.")
TRAINING_JOB_START_TIMESTAMP_SECONDS = _metric("ml_training_job_start_timestamp_seconds", _GAUGE, "seconds", JOB, _T, "Unix time the training job started: with the end time, its duration while and after it runs.")
TRAINING_JOB_END_TIMESTAMP_SECONDS = _metric("ml_training_job_end_timestamp_seconds", _GAUGE, "seconds", JOB, _T, "Unix time the training job finished (absent while it runs).")
TRAINING_JOB_DURATION_SECONDS = _metric("ml_training_job_duration_seconds", _HISTOGRAM, "seconds", ("model_type", "status"), _T, "Total training job duration.", buckets=JOB_DURATION_BUCKETS)

# --- Per-fold view: one series per fold, label `fold` -----------------
TRAINING_FOLD_LOSS = _metric("ml_training_fold_loss", _GAUGE, "", FOLD, _T, "Best training loss reached in a fold.")
TRAINING_FOLD_VALIDATION_LOSS = _metric("ml_training_fold_validation_loss", _GAUGE, "", FOLD, _T, "Best validation loss reached in a fold.")
TRAINING_FOLD_EPOCH = _metric("ml_training_fold_epoch", _GAUGE, "", FOLD, _T, "Epochs completed within a fold.")
TRAINING_FOLD_DURATION_SECONDS = _metric("ml_training_fold_duration_seconds", _GAUGE, "seconds", FOLD, _T, "Wall time a fold took.")
TRAINING_FOLDS_PLANNED = _metric("ml_training_folds_planned", _GAUGE, "", JOB, _T, "Folds the job will run in total.")
TRAINING_FOLDS_COMPLETED_TOTAL = _metric("ml_training_folds_completed_total", _COUNTER, "", JOB, _T, "Folds completed by the job.")

# --- Steps and time accounting, per rank ---------------------------------------------------------
TRAINING_RANK_INFO = _metric("ml_training_rank_info", _INFO, "", (*RANK_JOB, "local_rank", "node_rank", "world_size"), _T, "1 for each process of a job: its rank, local rank, node rank and the job's world size.")
TRAINING_STEPS_TOTAL = _metric("ml_training_steps_total", _COUNTER, "", RANK_JOB, _T, "Optimizer steps completed by this rank.")
TRAINING_SAMPLES_TOTAL = _metric("ml_training_samples_total", _COUNTER, "", RANK_JOB, _T, "Training samples processed by this rank.")
TRAINING_TOKENS_TOTAL = _metric("ml_training_tokens_total", _COUNTER, "", RANK_JOB, _T, "Training tokens processed by this rank.")
TRAINING_LAST_STEP_TIMESTAMP_SECONDS = _metric("ml_training_last_step_timestamp_seconds", _GAUGE, "seconds", RANK_JOB, _T, "Unix time at which this rank completed its latest step.")
TRAINING_PHASE_SECONDS_TOTAL = _metric("ml_training_phase_seconds_total", _COUNTER, "seconds", (*RANK_JOB, "phase"), _T, "Wall time of this rank by phase (startup, data_wait, compute, collective, checkpoint, evaluation, lost_work, idle); the phases of a rank sum to its wall time since the job started.")

# --- Optimization, per job (the PyTorch integration; bounded labels: no step, no trial) ----------
# The hyperparameters a job's throughput and loss are compared across, one series per job.
HYPERPARAMETER_LABELS = ("batch_size", "optimizer", "precision", "lr_schedule")
TRAINING_STEP_LOSS = _metric("ml_training_step_loss", _GAUGE, "", JOB, _T, "Mean training loss over the optimizer steps since the previous check (every check interval).")
TRAINING_LEARNING_RATE = _metric("ml_training_learning_rate", _GAUGE, "", (*JOB, "param_group"), _T, "Learning rate of each optimizer parameter group (by its name, else its index).")
TRAINING_GRADIENT_NORM = _metric("ml_training_gradient_norm", _GAUGE, "", JOB, _T, "Global L2 norm of the gradients the optimizer stepped with, at the latest check.")
TRAINING_HYPERPARAMETERS_INFO = _metric("ml_training_hyperparameters_info", _INFO, "", (*JOB, *HYPERPARAMETER_LABELS), _T, "1 per job, labelled with its hyperparameters: batch size, optimizer, precision, learning-rate schedule.")

# --- Distributed training: where each rank runs, and its collectives -----------------------------
# `collective`: all_reduce, broadcast, all_gather, reduce_scatter (a DDP gradient bucket is an all_reduce).
RANK_COLLECTIVE = (*RANK_JOB, "collective")
TRAINING_RANK_PLACEMENT_INFO = _metric("ml_training_rank_placement_info", _INFO, "", (*RANK_JOB, "node", "uuid"), _T, "1 for each process of a job: the Kubernetes node it runs on and the GPU it computes on (NVML UUID, empty without one; comma-separated UUIDs for a rank on several GPUs); names the node and GPU of a straggling or stopped rank.")
TRAINING_COLLECTIVE_OPERATIONS_TOTAL = _metric("ml_training_collective_operations_total", _COUNTER, "", RANK_COLLECTIVE, _T, "Collectives this rank completed, by kind.")
TRAINING_COLLECTIVE_BYTES_TOTAL = _metric("ml_training_collective_bytes_total", _COUNTER, "bytes", RANK_COLLECTIVE, _T, "Message bytes of this rank's completed collectives, counted as NCCL's tests count a collective's size (all_reduce and broadcast: the buffer; all_gather: the gathered output; reduce_scatter: the input).")
TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL = _metric("ml_training_collective_busy_seconds_total", _COUNTER, "seconds", RANK_COLLECTIVE, _T, "Wall time during which at least one collective of this kind was in flight on this rank, overlapped with compute or not (the exposed part is the rank's `collective` phase; for DDP's gradient all-reduce timed per step, from its first bucket's launch to the end of its reduction, which is no shorter); bytes over this time is the rank's algorithmic bandwidth.")

# --- Model-specific: reinforcement learning (DQN, PPO), from the algorithm's own values ---------
RL_EXPLORATION_RATE = _metric("ml_rl_exploration_rate", _GAUGE, "ratio", JOB, _T, "Probability (0-1) that the epsilon-greedy policy takes a random action now (DQN).")
RL_Q_VALUE = _metric("ml_rl_q_value", _GAUGE, "", JOB, _T, "Predicted value of the greedy action (the largest Q-value), averaged over the latest observations (DQN).")
RL_POLICY_ENTROPY = _metric("ml_rl_policy_entropy", _GAUGE, "nats", JOB, _T, "Mean entropy of the policy's action distribution in the latest policy update (PPO).")
RL_VALUE_LOSS = _metric("ml_rl_value_loss", _GAUGE, "", JOB, _T, "Value-function loss (mean squared error against the returns) of the latest policy update (PPO).")
RL_APPROX_KL = _metric("ml_rl_approx_kl", _GAUGE, "nats", JOB, _T, "Approximate KL divergence between the policy before and after the latest update (PPO).")
RL_CLIP_FRACTION = _metric("ml_rl_clip_fraction", _GAUGE, "ratio", JOB, _T, "Share (0-1) of samples whose probability ratio was clipped in the latest policy update (PPO).")
RL_EXPLAINED_VARIANCE = _metric("ml_rl_explained_variance", _GAUGE, "", JOB, _T, "Share of the returns' variance the value function explains (1 is perfect, 0 or less predicts nothing).")
RL_EPISODE_REWARD = _metric("ml_rl_episode_reward", _GAUGE, "", JOB, _T, "Mean total reward of the latest episodes (the last 100 by default).")
RL_EPISODE_LENGTH = _metric("ml_rl_episode_length", _GAUGE, "steps", JOB, _T, "Mean length in environment steps of the latest episodes (the last 100 by default).")
RL_EPISODES_TOTAL = _metric("ml_rl_episodes_total", _COUNTER, "", JOB, _T, "Episodes completed.")

# --- Hyperparameter search: one series per study (and trial state), never one per trial ----------
STUDY = ("model_type", "job_id", "study")
HPO_TRIALS = _metric("ml_hpo_trials", _GAUGE, "", (*STUDY, "state"), _T, "Trials of the study by state (running, waiting, complete, pruned, failed), as the study's storage holds them.")
HPO_BEST_VALUE = _metric("ml_hpo_best_value", _GAUGE, "", STUDY, _T, "Best objective value of the study's completed trials so far.")
HPO_OBJECTIVE_VALUE = _metric("ml_hpo_objective_value", _GAUGE, "", STUDY, _T, "Objective value of the latest trial this job completed.")
HPO_TRIAL_NUMBER = _metric("ml_hpo_trial_number", _GAUGE, "", STUDY, _T, "Number of the trial this job runs now (or ran last).")
HPO_TRIAL_EPOCH = _metric("ml_hpo_trial_epoch", _GAUGE, "", STUDY, _T, "Latest epoch (reported step) of the trial this job runs now (or ran last).")
HPO_TRIAL_LOSS = _metric("ml_hpo_trial_loss", _GAUGE, "", STUDY, _T, "Latest loss (reported intermediate value) of the trial this job runs now (or ran last).")
HPO_TRIAL_EPOCHS_TOTAL = _metric("ml_hpo_trial_epochs_total", _COUNTER, "", (*STUDY, "state"), _T, "Epochs (reported steps) run by the trials this job finished, by the state they ended in.")

# --- ML services (the metrics the service alerts query) --------------------------------------
INFERENCE_LATENCY_SECONDS = _metric("ml_inference_latency_seconds", _HISTOGRAM, "seconds", ("service", "model_type"), _S, "Online inference request latency.", buckets=INFERENCE_BUCKETS)
MODEL_LOADING_FAILURES_TOTAL = _metric("ml_model_loading_failures_total", _COUNTER, "", ("service", "model_type", "error_type"), _S, "Model loading failures by error type.")
MODEL_CACHE_HITS_TOTAL = _metric("ml_model_cache_hits_total", _COUNTER, "", ("service", "model_type"), _S, "Model cache hits.")
MODEL_CACHE_MISSES_TOTAL = _metric("ml_model_cache_misses_total", _COUNTER, "", ("service", "model_type"), _S, "Model cache misses.")
MODEL_DRIFT_SCORE = _metric("ml_model_drift_score", _GAUGE, "", ("service", "model_type"), _S, "Model drift score (0 = no drift).")
FEATURE_DISTRIBUTION_DISTANCE = _metric("ml_feature_distribution_distance", _GAUGE, "", ("service", "model_type", "feature"), _S, "Distance between the live and the training distribution of a feature.")
PREDICTION_CONFIDENCE = _metric("ml_prediction_confidence", _HISTOGRAM, "ratio", ("service", "model_type"), _S, "Confidence (0-1) of served predictions.", buckets=CONFIDENCE_BUCKETS)
TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS = _metric("ml_training_data_last_update_timestamp_seconds", _GAUGE, "seconds", ("dataset",), _S, "Unix time of the latest update of a training data set.")
FEATURE_EXTRACTION_DURATION_SECONDS = _metric("ml_feature_extraction_duration_seconds", _HISTOGRAM, "seconds", ("service", "model_type"), _S, "Feature extraction latency.", buckets=DURATION_BUCKETS)
S3_ERRORS_TOTAL = _metric("ml_s3_errors_total", _COUNTER, "", ("service", "operation", "error_type"), _S, "S3 request errors by operation and error type.")
MODEL_STORAGE_USED_BYTES = _metric("ml_model_storage_used_bytes", _GAUGE, "bytes", ("service", "volume"), _S, "Bytes used on model storage.")
MODEL_STORAGE_CAPACITY_BYTES = _metric("ml_model_storage_capacity_bytes", _GAUGE, "bytes", ("service", "volume"), _S, "Capacity of model storage.")

# --- Scrape health (produced by Prometheus itself for every target) ---------------------------
UP = _metric("up", _GAUGE, "", ("job", "instance", "namespace", "pod", "service"), _P, "1 if the last scrape of the target succeeded, else 0.")
SCRAPE_DURATION_SECONDS = _metric("scrape_duration_seconds", _GAUGE, "seconds", ("job", "instance", "namespace", "pod", "service"), _P, "How long the last scrape of the target took.")

# --- Prometheus' own rule manager (Prometheus scraping itself; `rule_group` is "<file>;<group>") ---
PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL = _metric("prometheus_rule_evaluation_failures_total", _COUNTER, "", ("job", "instance", "rule_group"), _P, "Rule evaluations that failed, per rule group.")
PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS = _metric("prometheus_rule_group_last_duration_seconds", _GAUGE, "seconds", ("job", "instance", "rule_group"), _P, "How long the last evaluation of the rule group took.")
PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS = _metric("prometheus_rule_group_interval_seconds", _GAUGE, "seconds", ("job", "instance", "rule_group"), _P, "The rule group's evaluation interval.")

# --- Prometheus' remote write (a shard's queue to the global tier; `remote_name`, `url` per queue) ---
_QUEUE = ("job", "instance", "remote_name", "url")
PROMETHEUS_REMOTE_STORAGE_SAMPLES_PENDING = _metric("prometheus_remote_storage_samples_pending", _GAUGE, "", _QUEUE, _P, "Samples read from the WAL and waiting in the queue's shards to be sent.")
PROMETHEUS_REMOTE_STORAGE_SAMPLES_FAILED_TOTAL = _metric("prometheus_remote_storage_samples_failed_total", _COUNTER, "", _QUEUE, _P, "Samples the queue gave up on after a non-recoverable error (they never reach the receiver).")
PROMETHEUS_REMOTE_STORAGE_SAMPLES_RETRIED_TOTAL = _metric("prometheus_remote_storage_samples_retried_total", _COUNTER, "", _QUEUE, _P, "Samples sent again after a recoverable error (the receiver down or overloaded).")
PROMETHEUS_REMOTE_STORAGE_HIGHEST_TIMESTAMP_IN_SECONDS = _metric("prometheus_remote_storage_highest_timestamp_in_seconds", _GAUGE, "seconds", ("job", "instance"), _P, "The newest sample's timestamp this Prometheus has written to its WAL (Unix seconds).")
PROMETHEUS_REMOTE_STORAGE_QUEUE_HIGHEST_SENT_TIMESTAMP_SECONDS = _metric("prometheus_remote_storage_queue_highest_sent_timestamp_seconds", _GAUGE, "seconds", _QUEUE, _P, "The newest sample's timestamp the queue has sent successfully (Unix seconds).")

# --- kube-state-metrics (only where the stack says it runs: `kubeStateMetrics`) -------------------
KUBE_NODE_STATUS_CAPACITY = _metric("kube_node_status_capacity", _GAUGE, "", ("node", "resource", "unit"), _K, "A node's capacity per resource (GPUs: resource nvidia_com_gpu), from kube-state-metrics.")

# --- Tempo metrics generator (span metrics and service graphs) --------------------------------
SPANMETRICS_CALLS_TOTAL = _metric("traces_spanmetrics_calls_total", _COUNTER, "", ("service", "span_name", "span_kind", "status_code"), _M, "Spans received, by service and status.")
SPANMETRICS_LATENCY = _metric("traces_spanmetrics_latency", _HISTOGRAM, "seconds", ("service", "span_name", "span_kind", "status_code"), _M, "Span duration.", buckets=DURATION_BUCKETS)
SERVICE_GRAPH_REQUEST_TOTAL = _metric("traces_service_graph_request_total", _COUNTER, "", ("client", "server", "connection_type"), _M, "Requests between two services.")
SERVICE_GRAPH_REQUEST_FAILED_TOTAL = _metric("traces_service_graph_request_failed_total", _COUNTER, "", ("client", "server", "connection_type"), _M, "Failed requests between two services.")
SERVICE_GRAPH_REQUEST_SERVER_SECONDS = _metric("traces_service_graph_request_server_seconds", _HISTOGRAM, "seconds", ("client", "server", "connection_type"), _M, "Server-side duration of requests between two services.", buckets=DURATION_BUCKETS)
# fmt: on

ALL_METRICS: tuple[Metric, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Metric))

# The 32 distinct metric names the monitoring report lists (its "35+" counts three error metrics
# twice).
REPORT_METRIC_NAMES: frozenset[str] = frozenset(
    m.name
    for m in (
        TRAINING_LOSS,
        TRAINING_VALIDATION_LOSS,
        TRAINING_CURRENT_EPOCH,
        TRAINING_PROGRESS_PERCENT,
        TRAINING_EPOCHS_PER_SECOND,
        TRAINING_ITERATION_SECONDS,
        TRAINING_CONVERGENCE_RATE,
        TRAINING_NAN_COUNT,
        TRAINING_GRADIENT_EXPLOSION_TOTAL,
        TRAINING_FAILURES_TOTAL,
        GPU_UTILIZATION_PERCENT,
        GPU_MEMORY_USED_BYTES,
        GPU_MEMORY_TOTAL_BYTES,
        GPU_TEMPERATURE_CELSIUS,
        GPU_POWER_WATTS,
        GPU_ERRORS_TOTAL,
        CHECKPOINT_SAVES_TOTAL,
        CHECKPOINT_SAVE_FAILURES_TOTAL,
        CHECKPOINT_SAVE_DURATION_SECONDS,
        CHECKPOINT_SIZE_BYTES,
        MODEL_ACCURACY,
        MODEL_F1_SCORE,
        MODEL_PRECISION,
        MODEL_RECALL,
        TRAINING_MEMORY_USED_BYTES,
        TRAINING_CPU_USAGE_PERCENT,
        TRAINING_ACTIVE_WORKERS,
        TRAINING_DATA_BATCHES_TOTAL,
        TRAINING_DATA_LOADING_SECONDS,
        FEATURE_ENGINEERING_ERRORS_TOTAL,
        TRAINING_JOBS_BY_STATUS,
        TRAINING_JOB_DURATION_SECONDS,
    )
)

_BY_NAME: dict[str, Metric] = {m.name: m for m in ALL_METRICS}
_BY_SERIES: dict[str, Metric] = {s: m for m in ALL_METRICS for s in m.series_names}


def by_name(name: str) -> Metric:
    """The family named `name`; also accepts a histogram's `_bucket`/`_sum`/`_count` series."""
    try:
        return _BY_NAME.get(name) or _BY_SERIES[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the catalog (foxhunt_trainer/contract/catalog.py)") from None


def by_producer(producer: Producer) -> tuple[Metric, ...]:
    return tuple(m for m in ALL_METRICS if m.producer is producer)
