"""GpuPoller: the NVML GPU poller image, its DaemonSet on the GPU nodes, and a headless Service.

Image: built from `poller/Dockerfile` (context: the repository root) and pushed to the stack's
registry by `pulumi_docker_build.Image`; the DaemonSet uses the pushed digest ref
(`registry/repo@sha256:...`), so a rebuild rolls the pods and nothing runs a mutable tag. A stack
can instead pin a prebuilt image by digest (`poller.image.digest`): then no build happens.

Pod: only on GPU nodes (node selector and tolerations from the settings), the NVIDIA runtime class
with NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (NVML only, no compute),
no GPU request (it observes the GPUs the jobs use), not privileged, no hostPath, Pod Security
Standard "restricted", requests and limits, liveness and readiness probes on /healthz, NODE_NAME
from the downward API, rolling updates, a priority class and the scrape annotations.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker_build as docker_build
import pulumi_kubernetes as k8s

from infra import REPO_ROOT
from infra.components.common import (
    NVIDIA_RUNTIME_CLASS,
    ExporterWeb,
    child,
    field_env,
    labels,
    metadata,
    resources,
    restricted_container_security_context,
    restricted_pod_security_context,
    scratch_volume,
    tolerations,
)
from infra.settings import ImageBuild, PollerSettings
from observability.scrape_config import SECURED_ANNOTATION, SECURED_VALUE, pod_scrape_annotations
from policy.manifests import as_int

TYPE = "foxhunt:observability:GpuPoller"
COMPONENT = "gpu-monitoring"
CONTAINER = "gpu-poller"
PORT_NAME = "metrics"
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
DOCKERFILE = "poller/Dockerfile"


def build_context() -> str:
    """The repository root relative to the working directory Pulumi runs the program in (`infra/`
    under `pulumi up`, the repository root in the offline render), so no absolute path of this
    checkout ends up in the image's inputs."""
    return os.path.relpath(REPO_ROOT, os.getcwd())


@dataclass(frozen=True)
class GpuPollerArgs:
    poller: PollerSettings
    namespace: str
    service: str  # the poller's service name: its `app.kubernetes.io/name` and scrape `service` label
    project: str
    stack: str  # the pushed image's tag
    common_labels: Mapping[str, str]
    # The poller is a source of critical alerts: scraped at the critical interval and timeout
    # (observability.scrape_config.critical_scrape_annotations).
    critical_scrape: Mapping[str, str]
    web: ExporterWeb | None = None  # TLS and authentication of /metrics (scrapeSecurity)


def selector_labels(args: GpuPollerArgs) -> dict[str, str]:
    return {"app.kubernetes.io/name": args.service, "app.kubernetes.io/part-of": args.project}


def _int_or_percent(value: str) -> int | str:
    number = as_int(value)
    return value if number is None else number


def probe_action(web: ExporterWeb | None) -> dict[str, Any]:
    """GET /healthz (over HTTPS with TLS: /healthz needs no credential); a TCP connect when the
    poller requires client certificates, which the kubelet has none of."""
    if web is not None and web.require_client_cert:
        return {"tcpSocket": {"port": PORT_NAME}}
    return {"httpGet": {"path": HEALTH_PATH, "port": PORT_NAME, "scheme": "HTTPS" if web else "HTTP"}}


def scrape_annotations(port: int, web: ExporterWeb | None) -> dict[str, str]:
    if web is None:
        return pod_scrape_annotations(port, METRICS_PATH)
    return {**pod_scrape_annotations(port, METRICS_PATH, "https"), SECURED_ANNOTATION: SECURED_VALUE}


def poller_container(
    poller: PollerSettings, image: pulumi.Input[str], web: ExporterWeb | None = None
) -> dict[str, Any]:
    probe = probe_action(web)
    web_args = ["--web-config-file", web.web_config_file] if web else []
    return {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--listen", f"0.0.0.0:{poller.port}", "--min-interval", f"{poller.min_interval_seconds:g}",
                 *web_args],
        "ports": [{"name": PORT_NAME, "containerPort": poller.port, "protocol": "TCP"}],
        "env": [
            field_env("NODE_NAME", "spec.nodeName"),
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "resources": resources(poller.resources),
        "securityContext": restricted_container_security_context(),
        "livenessProbe": {**probe, "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 3,
                          "failureThreshold": 3},
        "readinessProbe": {**probe, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 2},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *(web.mounts() if web else [])],
    }  # fmt: skip


def daemonset_spec(args: GpuPollerArgs, image: pulumi.Input[str]) -> dict[str, Any]:
    poller = args.poller
    return {
        "selector": {"matchLabels": selector_labels(args)},
        "updateStrategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": _int_or_percent(poller.max_unavailable)},
        },
        "template": {
            "metadata": {
                "labels": labels(args.common_labels, args.service, COMPONENT),
                "annotations": {**scrape_annotations(poller.port, args.web), **args.critical_scrape},
            },
            "spec": {
                "runtimeClassName": NVIDIA_RUNTIME_CLASS,
                "priorityClassName": poller.priority_class,
                "nodeSelector": dict(poller.node_selector),
                "tolerations": tolerations(poller.tolerations),
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": restricted_pod_security_context(),
                "terminationGracePeriodSeconds": 10,
                "containers": [poller_container(poller, image, args.web)],
                "volumes": [scratch_volume("tmp"), *(args.web.volumes() if args.web else [])],
            },
        },
    }


def service_spec(args: GpuPollerArgs) -> dict[str, Any]:
    return {
        "clusterIP": "None",
        "selector": selector_labels(args),
        "ports": [{"name": PORT_NAME, "port": args.poller.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
    }


class GpuPoller(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuPollerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        poller = args.poller
        self.image: docker_build.Image | None = None
        image_ref: pulumi.Input[str]
        if isinstance(poller.image, ImageBuild):
            build = poller.image
            context = build_context()
            self.image = docker_build.Image(
                f"{name}-image",
                context={"location": context},
                dockerfile={"location": os.path.join(context, DOCKERFILE)},
                platforms=list(build.platforms),
                push=True,
                tags=[f"{build.registry}/{build.repository}:{args.stack}"],
                labels={"org.opencontainers.image.title": CONTAINER, "org.opencontainers.image.vendor": args.project},
                registries=[
                    {
                        "address": build.registry,
                        "username": build.username,
                        "password": pulumi.Output.secret(build.password),
                    }
                ],
                opts=child(self),
            )
            image_ref = self.image.ref
        else:
            image_ref = poller.image.ref
        meta = metadata(args.common_labels, CONTAINER, args.namespace, app=args.service, component=COMPONENT)
        self.daemonset = k8s.apps.v1.DaemonSet(
            name, metadata=meta, spec=daemonset_spec(args, image_ref), opts=child(self)
        )
        self.service = k8s.core.v1.Service(name, metadata=meta, spec=service_spec(args), opts=child(self))
        self.image_ref = image_ref
        self.register_outputs({"image": image_ref})
