"""The environment variables the training job template sets and the trainer library reads.

Imports nothing: the Pulumi program (`observability.scrape_config`, `infra/`) and the trainer
library (`foxhunt_trainer`, shipped alone in the training image) both take the names
from here.
"""

# A finished process's last values (a training job's duration, its final status) reach Prometheus
# only if it is scraped once more before it exits: the trainer's metrics server waits for that
# scrape, at most this many seconds (the job template sets two scrape intervals).
FINAL_SCRAPE_WAIT_ENV = "FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS"

# Where torchrun runs several ranks in a pod, each serves its metrics on this base port plus its
# local rank (container port `metrics-<local rank>`, scraped one target per rank).
METRICS_BASE_PORT_ENV = "FOXHUNT_METRICS_BASE_PORT"

# The pod's terminationGracePeriodSeconds, as the job template renders it: on SIGTERM the trainer
# records the job as stopped and flushes its metrics within it (foxhunt_trainer.termination).
TERMINATION_GRACE_ENV = "FOXHUNT_TERMINATION_GRACE_PERIOD_SECONDS"

# Bounded rollback of non-finite training (foxhunt_trainer.remediation): the template sets these
# from the stack file's trainingJob.remediation; a job's own environment may override them.
REMEDIATION_ENABLED_ENV = "FOXHUNT_REMEDIATION"  # "on" or "off"
REMEDIATION_MAX_ROLLBACKS_ENV = "FOXHUNT_REMEDIATION_MAX_ROLLBACKS"
REMEDIATION_LR_FACTOR_ENV = "FOXHUNT_REMEDIATION_LR_FACTOR"
# The most rollbacks a job may be allowed: a run that needs more is diverging, not unlucky.
REMEDIATION_MAX_ROLLBACKS_LIMIT = 10

# Auto-instrumentation of the training program (`foxhunt-run`, `foxhunt-torchrun`): "on" or "off"
# for the whole program. The template sets it from the stack file's trainingJob.autolog; a job's own
# environment may override it.
AUTOLOG_ENV = "FOXHUNT_AUTOLOG"
AUTOLOG_ON = "on"
AUTOLOG_OFF = "off"
# Integrations turned off one by one while the rest stay on: a comma-separated list of their names
# (such as "lightning,sb3").
AUTOLOG_DISABLE_ENV = "FOXHUNT_AUTOLOG_DISABLE"

# The job's identity, set by the template for every pod: the Kubernetes Job's name (the downward
# API's pod label batch.kubernetes.io/job-name; a job started with `--from=cronjob/...` or from the
# rendered Job file gets its own) and the stack's model type (trainingJob.modelType).
JOB_NAME_ENV = "TRAINING_JOB_NAME"
MODEL_TYPE_ENV = "FOXHUNT_MODEL_TYPE"

# The trainer wheel's commands (pyproject's [project.scripts]) the template starts a program with:
# one process, auto-instrumented, or torchrun with one process per GPU.
RUN_COMMAND = "foxhunt-run"
TORCHRUN_COMMAND = "foxhunt-torchrun"

# Progress lines in the job's log: one every this many seconds (default 60); "0" or "off" turns
# them off (the end-of-run summary stays). foxhunt_trainer.summary reads and checks it.
PROGRESS_SECONDS_ENV = "FOXHUNT_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 60.0
# The GPU model the job runs on, as NVML names it ("NVIDIA H100 80GB HBM3"), where NVML cannot say:
# the end-of-run summary's MFU looks its peak up in the peak-FLOPs table.
GPU_MODEL_ENV = "FOXHUNT_GPU_MODEL"
