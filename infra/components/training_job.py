"""TrainingJobTemplate: a suspended CronJob that trainers start jobs from.

    kubectl -n <training namespace> create job dqn-run-42 --from=cronjob/<trainingJob.name>

The CronJob never runs by itself (`spec.suspend: true`); it only holds the Job template: the
trainer image (by digest), the OTEL env pointing at the stack's Tempo (OTLP gRPC), resource
attributes with model type and job name, `NVIDIA_DRIVER_CAPABILITIES=compute,utility` (NVML in the
container, so the trainer can name the GPUs it holds), scrape annotations for the metrics port, GPU requests and
limits, the NVIDIA runtime class, `restartPolicy: Never`, a backoff limit and a TTL after finish.
The same Job (kind Job, same pod template) is written to `rendered/<stack>/kubernetes/` for
`kubectl create -f` (it uses `generateName`, so it can be created repeatedly).

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
from observability.instrument.gpus import DRIVER_CAPABILITIES, DRIVER_CAPABILITIES_ENV
from observability.scrape_config import (
    FINAL_SCRAPE_WAIT_ENV,
    SECURED_ANNOTATION,
    SECURED_VALUE,
    final_scrape_wait_seconds,
    pod_scrape_annotations,
    prometheus_requirement_annotations,
)
from observability.web_config import WEB_CONFIG_ENV

TYPE = "foxhunt:observability:TrainingJobTemplate"
COMPONENT = "training"
CONTAINER = "trainer"
JOB_NAME_ENV = "TRAINING_JOB_NAME"
MODEL_TYPE_LABEL = "foxhunt.io/model-type"
NEVER = "0 0 1 1 *"  # a valid schedule for the API; the CronJob is suspended so it never fires
SCRATCH_SIZE = "20Gi"
HISTORY_LIMIT = 50
DELETION_POLICY_ANNOTATION = "pulumi.com/deletionPropagationPolicy"


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


def usage(args: TrainingJobArgs) -> str:
    return f"kubectl -n {args.namespace} create job <name> --from=cronjob/{args.job.name}"


def training_env(args: TrainingJobArgs) -> list[dict[str, Any]]:
    job, cfg = args.job, args.cfg
    return otel_env(
        args.otel,
        cfg.training_job_service,
        extra_attributes=[("ml.model_type", job.model_type), ("k8s.job.name", f"$({JOB_NAME_ENV})")],
        extra_env=[
            field_env(JOB_NAME_ENV, "metadata.labels['batch.kubernetes.io/job-name']"),
            # The trainer's metrics server waits up to this long for a last scrape before exiting,
            # so the job's duration and final status are recorded (observability.instrument).
            {"name": FINAL_SCRAPE_WAIT_ENV, "value": str(final_scrape_wait_seconds(cfg))},
            # `utility` makes the NVIDIA runtime mount libnvidia-ml, so the trainer names its GPUs
            # by UUID through NVML (ml_training_job_gpu_info) without any privilege.
            {"name": DRIVER_CAPABILITIES_ENV, "value": DRIVER_CAPABILITIES},
            # TLS and authentication of the metrics server (observability.web_config).
            *([{"name": WEB_CONFIG_ENV, "value": args.web.web_config_file}] if args.web else []),
        ],
    )


def pod_template(args: TrainingJobArgs) -> dict[str, Any]:
    job = args.job
    return {
        "metadata": {
            "labels": pod_labels(args),
            "annotations": (
                {**pod_scrape_annotations(job.metrics_port, scheme="https"), SECURED_ANNOTATION: SECURED_VALUE}
                if args.web
                else pod_scrape_annotations(job.metrics_port)
            ),
        },
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": NVIDIA_RUNTIME_CLASS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "nodeSelector": dict(job.node_selector),
            "tolerations": tolerations(job.tolerations),
            "securityContext": restricted_pod_security_context(),
            # SIGTERM first: time for the trainer to write a last checkpoint.
            "terminationGracePeriodSeconds": 120,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": job.image,
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"name": "metrics", "containerPort": job.metrics_port, "protocol": "TCP"}],
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


def job_spec(args: TrainingJobArgs) -> dict[str, Any]:
    job = args.job
    return {
        "backoffLimit": job.backoff_limit,
        "ttlSecondsAfterFinished": job.ttl_seconds_after_finished,
        "template": pod_template(args),
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
        self.register_outputs({"usage": usage(args)})
