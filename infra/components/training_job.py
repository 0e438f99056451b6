"""TrainingJobTemplate: a suspended CronJob that trainers start jobs from.

    kubectl -n <training namespace> create job dqn-run-42 --from=cronjob/<trainingJob.name>

The CronJob never runs by itself (`spec.suspend: true`); it only holds the Job template: the
trainer image (by digest), the OTEL env pointing at the stack's Tempo (OTLP gRPC), resource
attributes with model type and job name, `NVIDIA_DRIVER_CAPABILITIES=compute,utility` (NVML in the
container, so the trainer can name the GPUs it holds), scrape annotations for the metrics port, GPU requests and
limits, the NVIDIA runtime class, `restartPolicy: Never`, a backoff limit and a TTL after finish.
The same Job (kind Job, same pod template) is written to `rendered/<stack>/kubernetes/` for
`kubectl create -f` (it uses `generateName`, so it can be created repeatedly).

Every program runs auto-instrumented (`trainingJob.autolog`, on unless the stack turns it off): a
job without torchrun runs `foxhunt-run <trainingJob.program>`, and torchrun's launcher instruments
its workers, so a training program reports its steps, loss, phases and status with no code of its
own. The container says which in `FOXHUNT_AUTOLOG` (on or off; a job may set its own, and turn
integrations off one by one in `FOXHUNT_AUTOLOG_DISABLE`), beside the job's identity the trainer
reads: the Kubernetes Job's name (`TRAINING_JOB_NAME`, from the pod's job-name label), the stack's
model type (`FOXHUNT_MODEL_TYPE`) and the metrics port (`FOXHUNT_METRICS_BASE_PORT`).

Distributed jobs (`trainingJob.command` set): the container runs `torchrun` with one process per
GPU, through `foxhunt-torchrun` (`foxhunt_trainer.launcher`: the trainer's documented exit code
becomes the pod's, which torchrun's own would hide from the podFailurePolicy), and each process
(rank) serves its own metrics on `metricsPort + LOCAL_RANK`, declared as container port
`metrics-<local rank>`; the pod annotation `foxhunt.io/scrape-rank-ports: "true"` makes the
scrape config take every such port as its own target, so every rank is scraped and a stopped
rank shows as its own target (one exporter per pod would hide which rank stopped and repeat the
pod's GPU series once per rank). `trainingJob.nodes` > 1 makes the Job Indexed
(`completions` = `parallelism` = nodes, one pod per node rank): its completion index is torchrun's
`--node-rank`, and index 0, reached by its stable hostname `<job>-0.<rendezvous Service>`, hosts
the static rendezvous (`--master-addr`). The rendezvous Service is headless, shared by every job of
the template (the hostnames carry the job name) and publishes pods before they are ready, so
rendezvous starts as soon as pod 0 has an IP. A single-node stack without `command` runs one pod
of one process.

Jobs created with `--from=cronjob/...` get the CronJob as owner. The CronJob carries
`pulumi.com/deletionPropagationPolicy: orphan`, so `pulumi destroy` (or a replacement of the
template) deletes the template but never a training job that is running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from foxhunt_trainer.contract.web_config import WEB_CONFIG_ENV
from foxhunt_trainer.gpus import DRIVER_CAPABILITIES, DRIVER_CAPABILITIES_ENV
from foxhunt_trainer.launcher import UNFIXABLE_EXIT_CODES
from foxhunt_trainer.trainer_env import (
    AUTOLOG_ENV,
    AUTOLOG_OFF,
    AUTOLOG_ON,
    FINAL_SCRAPE_WAIT_ENV,
    JOB_NAME_ENV,
    METRICS_BASE_PORT_ENV,
    MODEL_TYPE_ENV,
    REMEDIATION_ENABLED_ENV,
    REMEDIATION_LR_FACTOR_ENV,
    REMEDIATION_MAX_ROLLBACKS_ENV,
    RUN_COMMAND,
    TERMINATION_GRACE_ENV,
    TORCHRUN_COMMAND,
)
from infra.components.common import (
    GPU_RESOURCE,
    NVIDIA_RUNTIME_CLASS,
    ExporterWeb,
    OtelExport,
    child,
    field_env,
    labels,
    metadata,
    otel_env,
    resources,
    restricted_container_security_context,
    restricted_pod_security_context,
    tolerations,
)
from infra.settings import TrainingJobSettings
from observability.config import ObservabilityConfig
from observability.scrape_config import (
    RANK_PORTS_ANNOTATION,
    SECURED_ANNOTATION,
    SECURED_VALUE,
    final_scrape_wait_seconds,
    pod_scrape_annotations,
    prometheus_requirement_annotations,
    rank_port_name,
)

TYPE = "foxhunt:observability:TrainingJobTemplate"
COMPONENT = "training"
CONTAINER = "trainer"
MODEL_TYPE_LABEL = "foxhunt.io/model-type"
NEVER = "0 0 1 1 *"  # a valid schedule for the API; the CronJob is suspended so it never fires
SCRATCH_SIZE = "20Gi"
HISTORY_LIMIT = 50
# The pod's grace period between SIGTERM and the kill; the trainer reads it from its env
# (`TERMINATION_GRACE_ENV`) to fit its last flush into it.
TERMINATION_GRACE_PERIOD_SECONDS = 120
DELETION_POLICY_ANNOTATION = "pulumi.com/deletionPropagationPolicy"
# torchrun's static rendezvous: node rank from the Indexed Job's completion index, the TCP store
# on index 0 (torchrun's default port). The container runs torchrun through the trainer library's
# launcher, which exits with the trainer's documented code (torchrun's own is 1 for any failed
# worker), so the podFailurePolicy sees it, and instruments the workers while autolog is on.
LAUNCHER = TORCHRUN_COMMAND
# A job without torchrun (`trainingJob.program`) runs through this one while autolog is on.
AUTOLOG_RUNNER = RUN_COMMAND
RENDEZVOUS_PORT = 29500
NODE_RANK_ENV = "TORCHRUN_NODE_RANK"
MASTER_ADDR_ENV = "TORCHRUN_MASTER_ADDR"
MASTER_PORT_ENV = "TORCHRUN_MASTER_PORT"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class TrainingJobArgs:
    job: TrainingJobSettings
    cfg: ObservabilityConfig  # the trainer's service name and final-scrape wait come from it
    namespace: str  # where training jobs run
    otel: OtelExport
    common_labels: Mapping[str, str]
    web: ExporterWeb | None = None  # TLS and authentication of the trainers' /metrics (scrapeSecurity)


def pod_labels(args: TrainingJobArgs) -> dict[str, str]:
    return {
        **labels(args.common_labels, args.cfg.training_job_service, COMPONENT),
        MODEL_TYPE_LABEL: args.job.model_type,
    }


def pod_selector(args: TrainingJobArgs) -> dict[str, str]:
    """Labels every pod of the template carries (whatever the model type of a run)."""
    return {k: v for k, v in pod_labels(args).items() if k != MODEL_TYPE_LABEL}


def rendezvous_service_name(job: TrainingJobSettings) -> str:
    """The headless Service whose DNS names the pods of a multi-node job: `<job>-<index>.<this>`."""
    name = f"{job.name}-rendezvous"
    if len(name) > 63:
        raise ValueError(f"trainingJob.name {job.name!r} is too long for its rendezvous Service {name!r} (63 at most)")
    return name


def master_address(args: TrainingJobArgs) -> str:
    """Index 0's DNS name; Kubernetes expands $(TRAINING_JOB_NAME) from the env defined before it."""
    return f"$({JOB_NAME_ENV})-0.{rendezvous_service_name(args.job)}.{args.namespace}.svc"


def torchrun_args(job: TrainingJobSettings) -> list[str]:
    """torchrun's options, then the training program: one process per GPU on every node."""
    if job.nodes == 1:
        rendezvous = ["--standalone", "--nnodes=1"]
    else:
        rendezvous = [
            f"--nnodes={job.nodes}",
            f"--node-rank=$({NODE_RANK_ENV})",
            f"--master-addr=$({MASTER_ADDR_ENV})",
            f"--master-port=$({MASTER_PORT_ENV})",
        ]
    return [*rendezvous, f"--nproc-per-node={job.processes_per_node}", *job.command]


def container_command(job: TrainingJobSettings) -> dict[str, list[str]]:
    """The container's `command` and `args`: torchrun through the launcher (`trainingJob.command`),
    else the program, through `foxhunt-run` while autolog is on; with neither, the image's entrypoint
    (the settings allow that only with autolog off)."""
    if job.command:
        return {"command": [LAUNCHER], "args": torchrun_args(job)}
    if not job.program:
        return {}
    if job.autolog:
        return {"command": [AUTOLOG_RUNNER], "args": list(job.program)}
    return {"command": [job.program[0]], "args": list(job.program[1:])}


def usage(args: TrainingJobArgs) -> str:
    return f"kubectl -n {args.namespace} create job <name> --from=cronjob/{args.job.name}"


def training_env(args: TrainingJobArgs) -> list[dict[str, Any]]:
    job, cfg = args.job, args.cfg
    return otel_env(
        args.otel,
        cfg.training_job_service,
        extra_attributes=[("ml.model_type", job.model_type), ("k8s.job.name", f"$({JOB_NAME_ENV})")],
        extra_env=[
            # The job's identity for the trainer (its job_id and model type).
            field_env(JOB_NAME_ENV, "metadata.labels['batch.kubernetes.io/job-name']"),
            {"name": MODEL_TYPE_ENV, "value": job.model_type},
            # foxhunt-run and foxhunt-torchrun instrument the program unless this says off; a job may
            # set its own (FOXHUNT_AUTOLOG=off, or integrations off in FOXHUNT_AUTOLOG_DISABLE).
            {"name": AUTOLOG_ENV, "value": AUTOLOG_ON if job.autolog else AUTOLOG_OFF},
            # The metrics server's port (a rank's is this plus its local rank).
            {"name": METRICS_BASE_PORT_ENV, "value": str(job.metrics_port)},
            # The trainer's metrics server waits up to this long for a last scrape before exiting,
            # so the job's duration and final status are recorded (foxhunt_trainer).
            {"name": FINAL_SCRAPE_WAIT_ENV, "value": str(final_scrape_wait_seconds(cfg))},
            # On SIGTERM the trainer stops the job and flushes within the pod's grace period.
            {"name": TERMINATION_GRACE_ENV, "value": str(TERMINATION_GRACE_PERIOD_SECONDS)},
            # `utility` makes the NVIDIA runtime mount libnvidia-ml, so the trainer names its GPUs
            # by UUID through NVML (ml_training_job_gpu_info) without any privilege.
            {"name": DRIVER_CAPABILITIES_ENV, "value": DRIVER_CAPABILITIES},
            *distributed_env(args),
            # TLS and authentication of the metrics server (foxhunt_trainer.contract.web_config).
            *([{"name": WEB_CONFIG_ENV, "value": args.web.web_config_file}] if args.web else []),
            *remediation_env(job),
        ],
    )


def distributed_env(args: TrainingJobArgs) -> list[dict[str, Any]]:
    """What torchrun reads with several nodes: the node rank (the completion index) and index 0's
    address."""
    if args.job.nodes == 1:
        return []
    return [
        field_env(NODE_RANK_ENV, f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"),
        {"name": MASTER_ADDR_ENV, "value": master_address(args)},
        {"name": MASTER_PORT_ENV, "value": str(RENDEZVOUS_PORT)},
    ]


def container_ports(job: TrainingJobSettings) -> list[dict[str, Any]]:
    """One metrics port per local rank (`metrics-<i>` when torchrun runs), the rendezvous port
    with several nodes."""
    if not job.command:
        return [{"name": "metrics", "containerPort": job.metrics_port, "protocol": "TCP"}]
    ports = [
        {"name": rank_port_name(i), "containerPort": job.metrics_port + i, "protocol": "TCP"}
        for i in range(job.processes_per_node)
    ]
    if job.nodes > 1:
        ports.append({"name": "rendezvous", "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"})
    return ports


def pod_annotations(
    job: TrainingJobSettings, cfg: ObservabilityConfig, web: ExporterWeb | None = None
) -> dict[str, str]:
    annotations = pod_scrape_annotations(job.metrics_port, scheme="https" if web else "http", critical=cfg)
    if web:
        annotations[SECURED_ANNOTATION] = SECURED_VALUE
    if job.command:
        annotations[RANK_PORTS_ANNOTATION] = "true"
    return annotations


def pod_template(args: TrainingJobArgs) -> dict[str, Any]:
    job = args.job
    return {
        "metadata": {
            "labels": pod_labels(args),
            # a source of critical alerts (NaN): scraped at the critical interval
            "annotations": pod_annotations(job, args.cfg, args.web),
        },
        "spec": {
            **({"subdomain": rendezvous_service_name(job)} if job.nodes > 1 else {}),
            "restartPolicy": "Never",
            "runtimeClassName": NVIDIA_RUNTIME_CLASS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "nodeSelector": dict(job.node_selector),
            "tolerations": tolerations(job.tolerations),
            "securityContext": restricted_pod_security_context(),
            # SIGTERM first: time for the trainer to flush its metrics and write a last checkpoint.
            "terminationGracePeriodSeconds": TERMINATION_GRACE_PERIOD_SECONDS,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": job.image,
                    "imagePullPolicy": "IfNotPresent",
                    **container_command(job),
                    "ports": container_ports(job),
                    "env": training_env(args),
                    "resources": resources(job.resources, {GPU_RESOURCE: str(job.gpu_count)}),
                    "securityContext": restricted_container_security_context(),
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/tmp"},
                        *(args.web.mounts() if args.web else []),
                    ],
                }
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
                *(args.web.volumes() if args.web else []),
            ],
        },
    }


def pod_failure_policy() -> dict[str, Any]:
    """Fail the Job at once on the trainer's exit codes for what a restart cannot fix (non-finite
    training past its rollback budget, foxhunt_trainer.remediation); ignore disruptions
    (node drain, preemption: the pod is recreated without counting a retry); every other failure
    (a GPU or collective error, an out-of-memory kill) counts against backoffLimit."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": list(UNFIXABLE_EXIT_CODES)},
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def remediation_env(job: TrainingJobSettings) -> list[dict[str, str]]:
    """The stack's remediation policy for every job of the template (a job may set its own)."""
    policy = job.remediation
    return [
        {"name": REMEDIATION_ENABLED_ENV, "value": "on" if policy.enabled else "off"},
        {"name": REMEDIATION_MAX_ROLLBACKS_ENV, "value": str(policy.max_rollbacks)},
        {"name": REMEDIATION_LR_FACTOR_ENV, "value": f"{policy.lr_factor:g}"},
    ]


def job_spec(args: TrainingJobArgs) -> dict[str, Any]:
    job = args.job
    indexed = {"completionMode": "Indexed", "completions": job.nodes, "parallelism": job.nodes} if job.nodes > 1 else {}
    return {
        **indexed,
        "backoffLimit": job.backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        "ttlSecondsAfterFinished": job.ttl_seconds_after_finished,
        "template": pod_template(args),
    }


def rendezvous_service_manifest(args: TrainingJobArgs) -> dict[str, Any]:
    """Headless Service over the template's pods: DNS for `<job>-<index>.<service>`, published
    before readiness so rendezvous does not wait for it."""
    service = args.cfg.training_job_service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            args.common_labels, rendezvous_service_name(args.job), args.namespace, app=service, component=COMPONENT
        ),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {
                **labels(args.common_labels, service, COMPONENT),
                MODEL_TYPE_LABEL: args.job.model_type,
            },
            "ports": [
                {"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT, "protocol": "TCP"}
            ],
        },
    }


def cronjob_manifest(args: TrainingJobArgs) -> dict[str, Any]:
    service = args.cfg.training_job_service
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(
            args.common_labels, args.job.name, args.namespace, app=service, component=COMPONENT,
            annotations={
                DELETION_POLICY_ANNOTATION: "orphan",
                "foxhunt.io/usage": usage(args),
                **prometheus_requirement_annotations(),
            },
        ),
        "spec": {
            "schedule": NEVER,
            "timeZone": "Etc/UTC",
            "suspend": True,
            "concurrencyPolicy": "Forbid",
            # Jobs made with --from=cronjob are owned by the CronJob, whose controller deletes
            # finished ones beyond these limits: keep them high so ttlSecondsAfterFinished decides.
            "successfulJobsHistoryLimit": HISTORY_LIMIT,
            "failedJobsHistoryLimit": HISTORY_LIMIT,
            "jobTemplate": {
                "metadata": {"labels": labels(args.common_labels, service, COMPONENT)},
                "spec": job_spec(args),
            },
        },
    }  # fmt: skip


def job_manifest(args: TrainingJobArgs) -> dict[str, Any]:
    """The same Job as a standalone object, for `kubectl create -f` (rendered/<stack>/kubernetes/)."""
    job = args.job
    meta = metadata(
        args.common_labels, job.name, args.namespace, app=args.cfg.training_job_service, component=COMPONENT,
        annotations={
            "foxhunt.io/usage": f"kubectl create -f <this file>, or: {usage(args)}",
            **prometheus_requirement_annotations(),
        },
    )  # fmt: skip
    meta["generateName"] = f"{job.model_type}-training-"
    del meta["name"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec(args)}


def job_manifest_path(args: TrainingJobArgs) -> str:
    return f"kubernetes/job_{args.namespace}_{args.job.name}.yaml"


class TrainingJobTemplate(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        manifest = cronjob_manifest(args)
        self.cronjob = k8s.batch.v1.CronJob(
            f"{name}-template",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child(self),
        )
        self.rendezvous: k8s.core.v1.Service | None = None
        if args.job.nodes > 1:
            service = rendezvous_service_manifest(args)
            self.rendezvous = k8s.core.v1.Service(
                f"{name}-rendezvous", metadata=service["metadata"], spec=service["spec"], opts=child(self)
            )
        self.register_outputs({"usage": usage(args)})
