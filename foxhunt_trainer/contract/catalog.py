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

# --- A. Training progress (monitoring report) -------------------------------------------------------
TRAINING_LOSS = Metric("ml_training_loss", MetricType.GAUGE, "", "Training loss of the latest epoch.", JOB, _T)
TRAINING_VALIDATION_LOSS = Metric(
    "ml_training_validation_loss", MetricType.GAUGE, "", "Validation loss of the latest epoch.", JOB, _T
)
TRAINING_CURRENT_EPOCH = Metric(
    "ml_training_current_epoch", MetricType.GAUGE, "", "Current training epoch number.", JOB, _T
)
TRAINING_PROGRESS_PERCENT = Metric(
    "ml_training_progress_percent",
    MetricType.GAUGE,
    "percent",
    "Training progress from 0 to 100. " + KEPT_NAME_NOTE.format(why="a percentage, not the base-unit ratio 0-1"),
    JOB,
    _T,
)
TRAINING_EPOCHS_PER_SECOND = Metric(
    "ml_training_epochs_per_second", MetricType.GAUGE, "epochs/s", "Training speed in epochs per second.", JOB, _T
)
TRAINING_ITERATION_SECONDS = Metric(
    "ml_training_iteration_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Duration of one training iteration.",
    JOB,
    _T,
    DURATION_BUCKETS,
)
TRAINING_CONVERGENCE_RATE = Metric(
    "ml_training_convergence_rate",
    MetricType.GAUGE,
    "",
    "Change of the training loss per epoch (negative means improving).",
    JOB,
    _T,
)

# --- B. NaN detection and training errors ---------------------------------------------------
TRAINING_NAN_COUNT = Metric(
    "ml_training_nan_count",
    MetricType.COUNTER,
    "",
    "Non-finite values (NaN, infinity) detected, by tensor type (loss, validation_loss, gradient, activation, "
    "weights). " + KEPT_NAME_NOTE.format(why="a counter without the `_total` suffix"),
    (*JOB, "tensor_type"),
    _T,
)
TRAINING_GRADIENT_EXPLOSION_TOTAL = Metric(
    "ml_training_gradient_explosion_total", MetricType.COUNTER, "", "Gradient explosion events.", JOB, _T
)
TRAINING_FAILURES_TOTAL = Metric(
    "ml_training_failures_total",
    MetricType.COUNTER,
    "",
    "Training jobs that ended with an error, by error type (nan, oom, timeout, config, io, exception).",
    (*JOB, "error_type"),
    _T,
)

# --- C. GPU monitoring (report names; emitted by the NVML poller) -------------------------
GPU_UTILIZATION_PERCENT = Metric(
    "ml_gpu_utilization_percent",
    MetricType.GAUGE,
    "percent",
    "Percent of time over the last sample period during which a kernel ran on the GPU (0-100). "
    + KEPT_NAME_NOTE.format(why="a percentage, not a ratio"),
    GPU,
    _G,
)
GPU_MEMORY_UTILIZATION_PERCENT = Metric(
    "ml_gpu_memory_utilization_percent",
    MetricType.GAUGE,
    "percent",
    "Percent of time over the last sample period during which device memory was read or written "
    "(0-100), as NVML reports it; named like its sibling ml_gpu_utilization_percent.",
    GPU,
    _G,
)
GPU_MEMORY_USED_BYTES = Metric("ml_gpu_memory_used_bytes", MetricType.GAUGE, "bytes", "GPU memory used.", GPU, _G)
GPU_MEMORY_TOTAL_BYTES = Metric("ml_gpu_memory_total_bytes", MetricType.GAUGE, "bytes", "Total GPU memory.", GPU, _G)
GPU_TEMPERATURE_CELSIUS = Metric(
    "ml_gpu_temperature_celsius", MetricType.GAUGE, "celsius", "GPU core temperature.", GPU, _G
)
GPU_POWER_WATTS = Metric("ml_gpu_power_watts", MetricType.GAUGE, "watts", "GPU power draw.", GPU, _G)
GPU_POWER_LIMIT_WATTS = Metric(
    "ml_gpu_power_limit_watts", MetricType.GAUGE, "watts", "Enforced GPU power limit.", GPU, _G
)
GPU_SM_CLOCK_HERTZ = Metric("ml_gpu_sm_clock_hertz", MetricType.GAUGE, "hertz", "Current SM clock.", GPU, _G)
GPU_MEMORY_CLOCK_HERTZ = Metric(
    "ml_gpu_memory_clock_hertz", MetricType.GAUGE, "hertz", "Current memory clock.", GPU, _G
)
# GPU Performance Monitoring (GPM, NVML on Hopper and newer): what the GPU really does, where
# ml_gpu_utilization_percent only says that some kernel ran. Averaged over the interval between
# the poller's last two collection passes; absent on GPUs without GPM and on the first pass after
# the poller starts or a GPU returns. Percent like the other utilization figures of this catalog.
_GPM_NOTE = (
    " Averaged over the interval between the poller's last two collection passes (NVML GPM, Hopper "
    "and newer; absent elsewhere)."
)
GPU_SM_ACTIVE_PERCENT = Metric(
    "ml_gpu_sm_active_percent",
    MetricType.GAUGE,
    "percent",
    "Percent of SMs busy (at least one warp resident), the share of the GPU doing work (0-100; "
    "DCGM's PROF_SM_ACTIVE x 100)." + _GPM_NOTE,
    GPU,
    _G,
)
GPU_SM_OCCUPANCY_PERCENT = Metric(
    "ml_gpu_sm_occupancy_percent",
    MetricType.GAUGE,
    "percent",
    "Resident warps as a percent of the SMs' maximum (0-100; DCGM's PROF_SM_OCCUPANCY x 100)." + _GPM_NOTE,
    GPU,
    _G,
)
GPU_TENSOR_ACTIVE_PERCENT = Metric(
    "ml_gpu_tensor_active_percent",
    MetricType.GAUGE,
    "percent",
    "Percent of time the SMs ran tensor-core instructions of any type (0-100; DCGM's "
    "PROF_PIPE_TENSOR_ACTIVE x 100)." + _GPM_NOTE,
    GPU,
    _G,
)
GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT = Metric(
    "ml_gpu_dram_bandwidth_utilization_percent",
    MetricType.GAUGE,
    "percent",
    "Device-memory bandwidth used as a percent of its theoretical maximum (0-100; DCGM's "
    "PROF_DRAM_ACTIVE x 100)." + _GPM_NOTE,
    GPU,
    _G,
)
GPU_PCIE_BYTES_TOTAL = Metric(
    "ml_gpu_pcie_bytes_total",
    MetricType.COUNTER,
    "bytes",
    "PCIe traffic counted by the poller from NVML GPM throughput, by direction rx (to the GPU) or tx "
    "(from the GPU); appears after the second pass, keeps counting across NVML re-initialisations.",
    (*GPU, "direction"),
    _G,
)
GPU_NVLINK_BYTES_TOTAL = Metric(
    "ml_gpu_nvlink_bytes_total",
    MetricType.COUNTER,
    "bytes",
    "NVLink traffic over all links counted by the poller from NVML GPM throughput, by direction rx "
    "(read by the GPU) or tx (written); appears after the second pass, on GPUs with NVLink.",
    (*GPU, "direction"),
    _G,
)
GPU_CLOCK_THROTTLE_ACTIVE = Metric(
    "ml_gpu_clock_throttle_active",
    MetricType.GAUGE,
    "",
    "1 while the named clock-throttle (event) reason is active, else 0.",
    (*GPU, "reason"),
    _G,
)
GPU_ECC_ERRORS_TOTAL = Metric(
    "ml_gpu_ecc_errors_total",
    MetricType.COUNTER,
    "",
    "ECC errors since the driver loaded (volatile), by ecc_type corrected or uncorrected.",
    (*GPU, "ecc_type"),
    _G,
)
GPU_XID_ERRORS_TOTAL = Metric(
    "ml_gpu_xid_errors_total",
    MetricType.COUNTER,
    "",
    "XID events since the poller started, by XID code; a code's series appears on its first occurrence.",
    (*GPU, "xid"),
    _G,
)
GPU_ERRORS_TOTAL = Metric(
    "ml_gpu_errors_total",
    MetricType.COUNTER,
    "",
    "GPU hardware errors by error type (xid, ecc_uncorrected, gpu_lost).",
    (*GPU, "error_type"),
    _G,
)
GPU_ENERGY_JOULES_TOTAL = Metric(
    "ml_gpu_energy_joules_total",
    MetricType.COUNTER,
    "joules",
    "Energy the GPU consumed since the driver loaded (NVML total energy consumption); absent where the GPU "
    "or driver cannot report it.",
    GPU,
    _G,
)
# MIG (Multi-Instance GPU): each MIG device is a GPU of its own in the series above (its `uuid` the
# `MIG-...` the device plugin hands the pod, `gpu_id` `<parent index>/<slot>`, `gpu_name` its parent's
# product name), reporting what NVML answers for a MIG device (memory, GPM); the parent keeps its
# device-level series (power, temperature, clocks, errors).
GPU_MIG_DEVICE_INFO = Metric(
    "ml_gpu_mig_device_info",
    MetricType.INFO,
    "",
    "1 for each MIG device of a GPU in MIG mode: its parent GPU (parent_gpu_id, parent_uuid) and its MIG "
    "profile (e.g. 1g.10gb); gone when the instance is destroyed.",
    (*GPU, "parent_gpu_id", "parent_uuid", "profile"),
    _G,
)
# The compute slices of a whole GPU that MIG divides (A100, H100, H200, B200): a MIG device's share of
# its GPU's SMs is its profile's compute slices over these.
MIG_COMPUTE_SLICES = 7


def mig_profile_compute_slices(profile: str) -> int | None:
    """The compute slices of a MIG profile (`3g.40gb` -> 3; `1c.3g.40gb`, a compute instance, -> 1);
    None where the profile does not say."""
    head = profile.split(".", 1)[0]
    count = head[:-1] if head[-1:] in ("g", "c") else ""
    return int(count) if count.isdigit() and 0 < int(count) <= MIG_COMPUTE_SLICES else None


GPU_MIG_SM_SHARE_RATIO = Metric(
    "ml_gpu_mig_sm_share_ratio",
    MetricType.GAUGE,
    "ratio",
    "The MIG device's share (0-1) of its parent GPU's SMs: its profile's compute slices over the 7 of a whole "
    "GPU; scales the peak FLOPs (MFU) and the price of the instance.",
    GPU,
    _G,
)
GPU_DRIVER_INFO = Metric(
    "ml_gpu_driver_info",
    MetricType.INFO,
    "",
    "NVML and driver versions on the node (value always 1).",
    ("node", "driver_version", "nvml_version", "cuda_driver_version"),
    _G,
)
GPU_POLLER_NVML_UP = Metric(
    "ml_gpu_poller_nvml_up",
    MetricType.GAUGE,
    "",
    "1 when the last collection reached NVML, 0 when NVML is missing or failing.",
    ("node",),
    _G,
)
GPU_POLLER_COLLECTION_DURATION_SECONDS = Metric(
    "ml_gpu_poller_collection_duration_seconds",
    MetricType.GAUGE,
    "seconds",
    "Wall time of the last NVML collection pass.",
    ("node",),
    _G,
)
GPU_POLLER_COLLECTION_FAILURES_TOTAL = Metric(
    "ml_gpu_poller_collection_failures_total",
    MetricType.COUNTER,
    "",
    "Failed NVML calls or passes by reason (init, gpu_lost, query, event).",
    ("node", "reason"),
    _G,
)
GPU_POLLER_DEVICES = Metric(
    "ml_gpu_poller_devices",
    MetricType.GAUGE,
    "",
    "GPUs answering: read in the last collection (0 when NVML is down).",
    ("node",),
    _G,
)
GPU_POLLER_DEVICES_ENUMERATED = Metric(
    "ml_gpu_poller_devices_enumerated",
    MetricType.GAUGE,
    "",
    "GPUs NVML enumerates on the node, answering or not (0 when NVML is down); more than "
    "ml_gpu_poller_devices means a GPU is present but cannot be queried (lost or failing).",
    ("node",),
    _G,
)

# --- D. Checkpoints ---------------------------------------------------------------------------
CHECKPOINT_SAVES_TOTAL = Metric(
    "ml_checkpoint_saves_total", MetricType.COUNTER, "", "Successful checkpoint saves.", JOB, _T
)
CHECKPOINT_SAVE_FAILURES_TOTAL = Metric(
    "ml_checkpoint_save_failures_total",
    MetricType.COUNTER,
    "",
    "Checkpoint save failures by error type (io_error, timeout, serialization, storage, other).",
    (*JOB, "error_type"),
    _T,
)
CHECKPOINT_SAVE_DURATION_SECONDS = Metric(
    "ml_checkpoint_save_duration_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Checkpoint save duration.",
    JOB,
    _T,
    DURATION_BUCKETS,
)
CHECKPOINT_SIZE_BYTES = Metric(
    "ml_checkpoint_size_bytes", MetricType.GAUGE, "bytes", "Size of the latest checkpoint.", JOB, _T
)
CHECKPOINT_LAST_GOOD_STEP = Metric(
    "ml_checkpoint_last_good_step",
    MetricType.GAUGE,
    "",
    "Training step of the latest good checkpoint (saved without error, with finite weights): where a rollback resumes.",
    JOB,
    _T,
)
TRAINING_ROLLBACKS_TOTAL = Metric(
    "ml_training_rollbacks_total",
    MetricType.COUNTER,
    "",
    "Rollbacks of non-finite training to the last good checkpoint (learning rate lowered, training continued).",
    JOB,
    _T,
)
TRAINING_RESUMED = Metric(
    "ml_training_resumed",
    MetricType.GAUGE,
    "",
    "1 when this process resumed the job from its latest good checkpoint (a restarted pod), 0 when it started fresh.",
    JOB,
    _T,
)
TRAINING_ROLLBACK_BUDGET = Metric(
    "ml_training_rollback_budget",
    MetricType.GAUGE,
    "",
    "Rollbacks the job may still make before non-finite training ends it (0 with remediation off).",
    JOB,
    _T,
)
CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS = Metric(
    "ml_checkpoint_last_good_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "Unix time the latest good checkpoint was saved.",
    JOB,
    _T,
)
CHECKPOINT_WRITTEN_BYTES_TOTAL = Metric(
    "ml_checkpoint_written_bytes_total",
    MetricType.COUNTER,
    "bytes",
    "Bytes of checkpoints this rank saved successfully (what checkpoint storage is billed for).",
    RANK_JOB,
    _T,
)

# --- Training efficiency: model FLOPs (the numerator of model FLOPs utilization) ------------------
# The values of the model-FLOPs counter's `precision` label: fp32 on CUDA cores, the others on
# tensor cores (the peak-FLOPs table, foxhunt_trainer/contract/peak_flops.json, is keyed by them too).
MODEL_FLOPS_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")
TRAINING_MODEL_FLOPS_TOTAL = Metric(
    "ml_training_model_flops_total",
    MetricType.COUNTER,
    "",
    "Model FLOPs (forward and backward, as torch.utils.flop_counter counts them, or as declared) of the "
    "training steps this rank completed, by the precision its matrix multiplies run in (fp32, tf32, "
    "bf16, fp16, fp8).",
    (*RANK_JOB, "precision"),
    _T,
)

# --- Device memory each process holds on its GPU (what splits a time-sliced GPU by job) ------------
TRAINING_GPU_MEMORY_RESERVED_BYTES = Metric(
    "ml_training_gpu_memory_reserved_bytes",
    MetricType.GAUGE,
    "bytes",
    "Device memory this rank's allocator holds on the GPU named by uuid (PyTorch: "
    "torch.cuda.memory_reserved): the job's own share of a GPU other jobs may share.",
    (*RANK_JOB, "uuid"),
    _T,
)

# --- E. Model performance ---------------------------------------------------------------------
MODEL_ACCURACY = Metric(
    "ml_model_accuracy", MetricType.GAUGE, "ratio", "Model accuracy (0-1) on the validation set.", JOB, _T
)
MODEL_F1_SCORE = Metric("ml_model_f1_score", MetricType.GAUGE, "ratio", "F1 score (0-1).", JOB, _T)
MODEL_PRECISION = Metric("ml_model_precision", MetricType.GAUGE, "ratio", "Precision (0-1).", JOB, _T)
MODEL_RECALL = Metric("ml_model_recall", MetricType.GAUGE, "ratio", "Recall (0-1).", JOB, _T)
# Regression quality on the validation set (the classification ratios above are 0-1; these are not).
MODEL_RMSE = Metric(
    "ml_model_rmse",
    MetricType.GAUGE,
    "",
    "Root mean squared error of a regression model on the validation set, in the target's unit (0 = exact).",
    JOB,
    _T,
)
MODEL_MAE = Metric(
    "ml_model_mae",
    MetricType.GAUGE,
    "",
    "Mean absolute error of a regression model on the validation set, in the target's unit (0 = exact).",
    JOB,
    _T,
)
MODEL_R2_SCORE = Metric(
    "ml_model_r2_score",
    MetricType.GAUGE,
    "",
    "Coefficient of determination (R squared) of a regression model on the validation set: 1 = exact, 0 = no "
    "better than predicting the mean, negative = worse (averaged over the outputs of a multi-output model).",
    JOB,
    _T,
)

# --- F. Resource usage ------------------------------------------------------------------------
TRAINING_MEMORY_USED_BYTES = Metric(
    "ml_training_memory_used_bytes", MetricType.GAUGE, "bytes", "System memory used by the training job.", JOB, _T
)
TRAINING_CPU_USAGE_PERCENT = Metric(
    "ml_training_cpu_usage_percent",
    MetricType.GAUGE,
    "percent",
    "CPU usage of the training job (100 = one core). " + KEPT_NAME_NOTE.format(why="a percentage, not CPU seconds"),
    JOB,
    _T,
)
TRAINING_ACTIVE_WORKERS = Metric(
    "ml_training_active_workers", MetricType.GAUGE, "", "Active training workers.", JOB, _T
)

# --- G. Data pipeline -------------------------------------------------------------------------
TRAINING_DATA_BATCHES_TOTAL = Metric(
    "ml_training_data_batches_total", MetricType.COUNTER, "", "Data batches processed.", JOB, _T
)
TRAINING_DATA_LOADING_SECONDS = Metric(
    "ml_training_data_loading_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Data loading duration.",
    JOB,
    _T,
    DURATION_BUCKETS,
)
FEATURE_ENGINEERING_ERRORS_TOTAL = Metric(
    "ml_feature_engineering_errors_total",
    MetricType.COUNTER,
    "",
    "Feature engineering errors.",
    ("model_type", "error_type"),
    _T,
)

# --- H. Job lifecycle -------------------------------------------------------------------------
TRAINING_JOBS_BY_STATUS = Metric(
    "ml_training_jobs_by_status",
    MetricType.GAUGE,
    "",
    "Training jobs by status (pending, running, completed, failed, stopped, paused).",
    ("status",),
    _T,
)
TRAINING_JOB_GPU_INFO = Metric(
    "ml_training_job_gpu_info",
    MetricType.INFO,
    "",
    "1 for each GPU (by NVML UUID) the training job's container was given; joins the GPU poller's series "
    "to the job on `uuid`.",
    (*JOB, "uuid"),
    _T,
)
TRAINING_JOB_START_TIMESTAMP_SECONDS = Metric(
    "ml_training_job_start_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "Unix time the training job started: with the end time, its duration while and after it runs.",
    JOB,
    _T,
)
TRAINING_JOB_END_TIMESTAMP_SECONDS = Metric(
    "ml_training_job_end_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "Unix time the training job finished (absent while it runs).",
    JOB,
    _T,
)
TRAINING_JOB_DURATION_SECONDS = Metric(
    "ml_training_job_duration_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Total training job duration.",
    ("model_type", "status"),
    _T,
    JOB_DURATION_BUCKETS,
)

# --- Per-fold view: one series per fold, label `fold` -----------------
TRAINING_FOLD_LOSS = Metric(
    "ml_training_fold_loss", MetricType.GAUGE, "", "Best training loss reached in a fold.", FOLD, _T
)
TRAINING_FOLD_VALIDATION_LOSS = Metric(
    "ml_training_fold_validation_loss", MetricType.GAUGE, "", "Best validation loss reached in a fold.", FOLD, _T
)
TRAINING_FOLD_EPOCH = Metric(
    "ml_training_fold_epoch", MetricType.GAUGE, "", "Epochs completed within a fold.", FOLD, _T
)
TRAINING_FOLD_DURATION_SECONDS = Metric(
    "ml_training_fold_duration_seconds", MetricType.GAUGE, "seconds", "Wall time a fold took.", FOLD, _T
)
TRAINING_FOLDS_PLANNED = Metric(
    "ml_training_folds_planned", MetricType.GAUGE, "", "Folds the job will run in total.", JOB, _T
)
TRAINING_FOLDS_COMPLETED_TOTAL = Metric(
    "ml_training_folds_completed_total", MetricType.COUNTER, "", "Folds completed by the job.", JOB, _T
)

# --- Steps and time accounting, per rank ---------------------------------------------------------
TRAINING_RANK_INFO = Metric(
    "ml_training_rank_info",
    MetricType.INFO,
    "",
    "1 for each process of a job: its rank, local rank, node rank and the job's world size.",
    (*RANK_JOB, "local_rank", "node_rank", "world_size"),
    _T,
)
TRAINING_STEPS_TOTAL = Metric(
    "ml_training_steps_total", MetricType.COUNTER, "", "Optimizer steps completed by this rank.", RANK_JOB, _T
)
TRAINING_SAMPLES_TOTAL = Metric(
    "ml_training_samples_total", MetricType.COUNTER, "", "Training samples processed by this rank.", RANK_JOB, _T
)
TRAINING_TOKENS_TOTAL = Metric(
    "ml_training_tokens_total", MetricType.COUNTER, "", "Training tokens processed by this rank.", RANK_JOB, _T
)
TRAINING_LAST_STEP_TIMESTAMP_SECONDS = Metric(
    "ml_training_last_step_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "Unix time at which this rank completed its latest step.",
    RANK_JOB,
    _T,
)
TRAINING_PHASE_SECONDS_TOTAL = Metric(
    "ml_training_phase_seconds_total",
    MetricType.COUNTER,
    "seconds",
    "Wall time of this rank by phase (startup, data_wait, compute, collective, checkpoint, evaluation, "
    "lost_work, idle); the phases of a rank sum to its wall time since the job started.",
    (*RANK_JOB, "phase"),
    _T,
)

# --- Optimization, per job (the PyTorch integration; bounded labels: no step, no trial) ----------
# The hyperparameters a job's throughput and loss are compared across, one series per job.
HYPERPARAMETER_LABELS = ("batch_size", "optimizer", "precision", "lr_schedule")
TRAINING_STEP_LOSS = Metric(
    "ml_training_step_loss",
    MetricType.GAUGE,
    "",
    "Mean training loss over the optimizer steps since the previous check (every check interval).",
    JOB,
    _T,
)
TRAINING_LEARNING_RATE = Metric(
    "ml_training_learning_rate",
    MetricType.GAUGE,
    "",
    "Learning rate of each optimizer parameter group (by its name, else its index).",
    (*JOB, "param_group"),
    _T,
)
TRAINING_GRADIENT_NORM = Metric(
    "ml_training_gradient_norm",
    MetricType.GAUGE,
    "",
    "Global L2 norm of the gradients the optimizer stepped with, at the latest check.",
    JOB,
    _T,
)
TRAINING_HYPERPARAMETERS_INFO = Metric(
    "ml_training_hyperparameters_info",
    MetricType.INFO,
    "",
    "1 per job, labelled with its hyperparameters: batch size, optimizer, precision, learning-rate schedule.",
    (*JOB, *HYPERPARAMETER_LABELS),
    _T,
)

# --- Distributed training: where each rank runs, and its collectives -----------------------------
# `collective`: all_reduce, broadcast, all_gather, reduce_scatter (a DDP gradient bucket is an all_reduce).
RANK_COLLECTIVE = (*RANK_JOB, "collective")
TRAINING_RANK_PLACEMENT_INFO = Metric(
    "ml_training_rank_placement_info",
    MetricType.INFO,
    "",
    "1 for each process of a job: the Kubernetes node it runs on and the GPU it computes on (NVML UUID, empty "
    "without one; comma-separated UUIDs for a rank on several GPUs); names the node and GPU of a straggling or "
    "stopped rank.",
    (*RANK_JOB, "node", "uuid"),
    _T,
)
TRAINING_COLLECTIVE_OPERATIONS_TOTAL = Metric(
    "ml_training_collective_operations_total",
    MetricType.COUNTER,
    "",
    "Collectives this rank completed, by kind.",
    RANK_COLLECTIVE,
    _T,
)
TRAINING_COLLECTIVE_BYTES_TOTAL = Metric(
    "ml_training_collective_bytes_total",
    MetricType.COUNTER,
    "bytes",
    "Message bytes of this rank's completed collectives, counted as NCCL's tests count a collective's size "
    "(all_reduce and broadcast: the buffer; all_gather: the gathered output; reduce_scatter: the input).",
    RANK_COLLECTIVE,
    _T,
)
TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL = Metric(
    "ml_training_collective_busy_seconds_total",
    MetricType.COUNTER,
    "seconds",
    "Wall time during which at least one collective of this kind was in flight on this rank, overlapped with "
    "compute or not (the exposed part is the rank's `collective` phase; for DDP's gradient all-reduce timed per "
    "step, from its first bucket's launch to the end of its reduction, which is no shorter); bytes over this time "
    "is the rank's algorithmic bandwidth.",
    RANK_COLLECTIVE,
    _T,
)

# --- Model-specific: reinforcement learning (DQN, PPO), from the algorithm's own values ---------
RL_EXPLORATION_RATE = Metric(
    "ml_rl_exploration_rate",
    MetricType.GAUGE,
    "ratio",
    "Probability (0-1) that the epsilon-greedy policy takes a random action now (DQN).",
    JOB,
    _T,
)
RL_Q_VALUE = Metric(
    "ml_rl_q_value",
    MetricType.GAUGE,
    "",
    "Predicted value of the greedy action (the largest Q-value), averaged over the latest observations (DQN).",
    JOB,
    _T,
)
RL_POLICY_ENTROPY = Metric(
    "ml_rl_policy_entropy",
    MetricType.GAUGE,
    "nats",
    "Mean entropy of the policy's action distribution in the latest policy update (PPO).",
    JOB,
    _T,
)
RL_VALUE_LOSS = Metric(
    "ml_rl_value_loss",
    MetricType.GAUGE,
    "",
    "Value-function loss (mean squared error against the returns) of the latest policy update (PPO).",
    JOB,
    _T,
)
RL_APPROX_KL = Metric(
    "ml_rl_approx_kl",
    MetricType.GAUGE,
    "nats",
    "Approximate KL divergence between the policy before and after the latest update (PPO).",
    JOB,
    _T,
)
RL_CLIP_FRACTION = Metric(
    "ml_rl_clip_fraction",
    MetricType.GAUGE,
    "ratio",
    "Share (0-1) of samples whose probability ratio was clipped in the latest policy update (PPO).",
    JOB,
    _T,
)
RL_EXPLAINED_VARIANCE = Metric(
    "ml_rl_explained_variance",
    MetricType.GAUGE,
    "",
    "Share of the returns' variance the value function explains (1 is perfect, 0 or less predicts nothing).",
    JOB,
    _T,
)
RL_EPISODE_REWARD = Metric(
    "ml_rl_episode_reward",
    MetricType.GAUGE,
    "",
    "Mean total reward of the latest episodes (the last 100 by default).",
    JOB,
    _T,
)
RL_EPISODE_LENGTH = Metric(
    "ml_rl_episode_length",
    MetricType.GAUGE,
    "steps",
    "Mean length in environment steps of the latest episodes (the last 100 by default).",
    JOB,
    _T,
)
RL_EPISODES_TOTAL = Metric("ml_rl_episodes_total", MetricType.COUNTER, "", "Episodes completed.", JOB, _T)

# --- Hyperparameter search: one series per study (and trial state), never one per trial ----------
STUDY = ("model_type", "job_id", "study")
HPO_TRIALS = Metric(
    "ml_hpo_trials",
    MetricType.GAUGE,
    "",
    "Trials of the study by state (running, waiting, complete, pruned, failed), as the study's storage holds them.",
    (*STUDY, "state"),
    _T,
)
HPO_BEST_VALUE = Metric(
    "ml_hpo_best_value",
    MetricType.GAUGE,
    "",
    "Best objective value of the study's completed trials so far.",
    STUDY,
    _T,
)
HPO_OBJECTIVE_VALUE = Metric(
    "ml_hpo_objective_value",
    MetricType.GAUGE,
    "",
    "Objective value of the latest trial this job completed.",
    STUDY,
    _T,
)
HPO_TRIAL_NUMBER = Metric(
    "ml_hpo_trial_number",
    MetricType.GAUGE,
    "",
    "Number of the trial this job runs now (or ran last).",
    STUDY,
    _T,
)
HPO_TRIAL_EPOCH = Metric(
    "ml_hpo_trial_epoch",
    MetricType.GAUGE,
    "",
    "Latest epoch (reported step) of the trial this job runs now (or ran last).",
    STUDY,
    _T,
)
HPO_TRIAL_LOSS = Metric(
    "ml_hpo_trial_loss",
    MetricType.GAUGE,
    "",
    "Latest loss (reported intermediate value) of the trial this job runs now (or ran last).",
    STUDY,
    _T,
)
HPO_TRIAL_EPOCHS_TOTAL = Metric(
    "ml_hpo_trial_epochs_total",
    MetricType.COUNTER,
    "",
    "Epochs (reported steps) run by the trials this job finished, by the state they ended in.",
    (*STUDY, "state"),
    _T,
)

# --- ML services (the metrics the service alerts query) --------------------------------------
INFERENCE_LATENCY_SECONDS = Metric(
    "ml_inference_latency_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Online inference request latency.",
    ("service", "model_type"),
    _S,
    INFERENCE_BUCKETS,
)
MODEL_LOADING_FAILURES_TOTAL = Metric(
    "ml_model_loading_failures_total",
    MetricType.COUNTER,
    "",
    "Model loading failures by error type.",
    ("service", "model_type", "error_type"),
    _S,
)
MODEL_CACHE_HITS_TOTAL = Metric(
    "ml_model_cache_hits_total", MetricType.COUNTER, "", "Model cache hits.", ("service", "model_type"), _S
)
MODEL_CACHE_MISSES_TOTAL = Metric(
    "ml_model_cache_misses_total", MetricType.COUNTER, "", "Model cache misses.", ("service", "model_type"), _S
)
MODEL_DRIFT_SCORE = Metric(
    "ml_model_drift_score", MetricType.GAUGE, "", "Model drift score (0 = no drift).", ("service", "model_type"), _S
)
FEATURE_DISTRIBUTION_DISTANCE = Metric(
    "ml_feature_distribution_distance",
    MetricType.GAUGE,
    "",
    "Distance between the live and the training distribution of a feature.",
    ("service", "model_type", "feature"),
    _S,
)
PREDICTION_CONFIDENCE = Metric(
    "ml_prediction_confidence",
    MetricType.HISTOGRAM,
    "ratio",
    "Confidence (0-1) of served predictions.",
    ("service", "model_type"),
    _S,
    CONFIDENCE_BUCKETS,
)
TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS = Metric(
    "ml_training_data_last_update_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "Unix time of the latest update of a training data set.",
    ("dataset",),
    _S,
)
FEATURE_EXTRACTION_DURATION_SECONDS = Metric(
    "ml_feature_extraction_duration_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Feature extraction latency.",
    ("service", "model_type"),
    _S,
    DURATION_BUCKETS,
)
S3_ERRORS_TOTAL = Metric(
    "ml_s3_errors_total",
    MetricType.COUNTER,
    "",
    "S3 request errors by operation and error type.",
    ("service", "operation", "error_type"),
    _S,
)
MODEL_STORAGE_USED_BYTES = Metric(
    "ml_model_storage_used_bytes",
    MetricType.GAUGE,
    "bytes",
    "Bytes used on model storage.",
    ("service", "volume"),
    _S,
)
MODEL_STORAGE_CAPACITY_BYTES = Metric(
    "ml_model_storage_capacity_bytes",
    MetricType.GAUGE,
    "bytes",
    "Capacity of model storage.",
    ("service", "volume"),
    _S,
)

# --- Scrape health (produced by Prometheus itself for every target) ---------------------------
UP = Metric(
    "up",
    MetricType.GAUGE,
    "",
    "1 if the last scrape of the target succeeded, else 0.",
    ("job", "instance", "namespace", "pod", "service"),
    Producer.PROMETHEUS,
)

SCRAPE_DURATION_SECONDS = Metric(
    "scrape_duration_seconds",
    MetricType.GAUGE,
    "seconds",
    "How long the last scrape of the target took.",
    ("job", "instance", "namespace", "pod", "service"),
    Producer.PROMETHEUS,
)

# --- Prometheus' own rule manager (Prometheus scraping itself; `rule_group` is "<file>;<group>") ---
PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL = Metric(
    "prometheus_rule_evaluation_failures_total",
    MetricType.COUNTER,
    "",
    "Rule evaluations that failed, per rule group.",
    ("job", "instance", "rule_group"),
    Producer.PROMETHEUS,
)
PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS = Metric(
    "prometheus_rule_group_last_duration_seconds",
    MetricType.GAUGE,
    "seconds",
    "How long the last evaluation of the rule group took.",
    ("job", "instance", "rule_group"),
    Producer.PROMETHEUS,
)
PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS = Metric(
    "prometheus_rule_group_interval_seconds",
    MetricType.GAUGE,
    "seconds",
    "The rule group's evaluation interval.",
    ("job", "instance", "rule_group"),
    Producer.PROMETHEUS,
)

# --- Prometheus' remote write (a shard's queue to the global tier; `remote_name`, `url` per queue) ---
_QUEUE = ("job", "instance", "remote_name", "url")
PROMETHEUS_REMOTE_STORAGE_SAMPLES_PENDING = Metric(
    "prometheus_remote_storage_samples_pending",
    MetricType.GAUGE,
    "",
    "Samples read from the WAL and waiting in the queue's shards to be sent.",
    _QUEUE,
    Producer.PROMETHEUS,
)
PROMETHEUS_REMOTE_STORAGE_SAMPLES_FAILED_TOTAL = Metric(
    "prometheus_remote_storage_samples_failed_total",
    MetricType.COUNTER,
    "",
    "Samples the queue gave up on after a non-recoverable error (they never reach the receiver).",
    _QUEUE,
    Producer.PROMETHEUS,
)
PROMETHEUS_REMOTE_STORAGE_SAMPLES_RETRIED_TOTAL = Metric(
    "prometheus_remote_storage_samples_retried_total",
    MetricType.COUNTER,
    "",
    "Samples sent again after a recoverable error (the receiver down or overloaded).",
    _QUEUE,
    Producer.PROMETHEUS,
)
PROMETHEUS_REMOTE_STORAGE_HIGHEST_TIMESTAMP_IN_SECONDS = Metric(
    "prometheus_remote_storage_highest_timestamp_in_seconds",
    MetricType.GAUGE,
    "seconds",
    "The newest sample's timestamp this Prometheus has written to its WAL (Unix seconds).",
    ("job", "instance"),
    Producer.PROMETHEUS,
)
PROMETHEUS_REMOTE_STORAGE_QUEUE_HIGHEST_SENT_TIMESTAMP_SECONDS = Metric(
    "prometheus_remote_storage_queue_highest_sent_timestamp_seconds",
    MetricType.GAUGE,
    "seconds",
    "The newest sample's timestamp the queue has sent successfully (Unix seconds).",
    _QUEUE,
    Producer.PROMETHEUS,
)

# --- kube-state-metrics (only where the stack says it runs: `kubeStateMetrics`) -------------------
KUBE_NODE_STATUS_CAPACITY = Metric(
    "kube_node_status_capacity",
    MetricType.GAUGE,
    "",
    "A node's capacity per resource (GPUs: resource nvidia_com_gpu), from kube-state-metrics.",
    ("node", "resource", "unit"),
    Producer.KUBE_STATE_METRICS,
)

# --- Tempo metrics generator (span metrics and service graphs) --------------------------------
SPANMETRICS_CALLS_TOTAL = Metric(
    "traces_spanmetrics_calls_total",
    MetricType.COUNTER,
    "",
    "Spans received, by service and status.",
    ("service", "span_name", "span_kind", "status_code"),
    _M,
)
SPANMETRICS_LATENCY = Metric(
    "traces_spanmetrics_latency",
    MetricType.HISTOGRAM,
    "seconds",
    "Span duration.",
    ("service", "span_name", "span_kind", "status_code"),
    _M,
    DURATION_BUCKETS,
)
SERVICE_GRAPH_REQUEST_TOTAL = Metric(
    "traces_service_graph_request_total",
    MetricType.COUNTER,
    "",
    "Requests between two services.",
    ("client", "server", "connection_type"),
    _M,
)
SERVICE_GRAPH_REQUEST_FAILED_TOTAL = Metric(
    "traces_service_graph_request_failed_total",
    MetricType.COUNTER,
    "",
    "Failed requests between two services.",
    ("client", "server", "connection_type"),
    _M,
)
SERVICE_GRAPH_REQUEST_SERVER_SECONDS = Metric(
    "traces_service_graph_request_server_seconds",
    MetricType.HISTOGRAM,
    "seconds",
    "Server-side duration of requests between two services.",
    ("client", "server", "connection_type"),
    _M,
    DURATION_BUCKETS,
)

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
