"""The names of recording rules the trainer wheel's tools read (`foxhunt-report`; the end-to-end
tests compare the job's own summary with them): `observability.rules.goodput` records them under
these names, so the rules and the wheel, which ships without the platform's code, spell them once."""

WINDOW = "5m"  # the rules' window for the time split, MFU and the verdict
# Share (0-1) of each job's time in each phase over the window, and over its life so far.
PHASE_SHARE = f"model_type_job_id_phase:ml_training_phase_seconds:ratio_rate{WINDOW}"
PHASE_SHARE_SO_FAR = "model_type_job_id_phase:ml_training_phase_seconds:ratio"
# Goodput (0-1): the compute share, over the window and over the job's life so far.
GOODPUT = f"model_type_job_id:ml_training_goodput:ratio_rate{WINDOW}"
GOODPUT_SO_FAR = "model_type_job_id:ml_training_goodput:ratio"
# How busy (0-100) the job's GPUs are (label `source`: gpm_sm_active, job_time_split on a GPU other jobs
# share, or nvml_utilization).
GPU_BUSY = "model_type_job_id_source:ml_gpu_busy_percent:avg"
# Model FLOPs utilization (0-1) over the window.
MFU = f"model_type_job_id:ml_training_mfu:ratio_rate{WINDOW}"
# The bottleneck verdict (value 1, label `verdict`).
VERDICT = "model_type_job_id_verdict:ml_training_bottleneck:info"
# Bytes of checkpoints the job has saved so far, summed over its ranks.
CHECKPOINT_BYTES = "model_type_job_id:ml_checkpoint_written_bytes:sum"
