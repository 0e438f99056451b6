"""Pieces every component builds its objects from: names and labels, the OTEL env, the Pod
Security Standard "restricted" security contexts, resources and tolerations.

Manifests are plain dicts in Kubernetes' own camelCase shape: what the mock engine records, what
the schema check validates and what the cluster receives are the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from infra.settings import Resources, Toleration

FIELD_MANAGER = "foxhunt-observability"  # server-side apply field manager of every patch
NONROOT_UID = 65532  # the distroless "nonroot" user; the poller image runs as it
NVIDIA_RUNTIME_CLASS = "nvidia"
GPU_RESOURCE = "nvidia.com/gpu"

# Env vars the downward API fills, named as the OpenTelemetry Operator names them so they rarely
# collide with a service's own variables. They must precede OTEL_RESOURCE_ATTRIBUTES, which
# references them with $(VAR) (Kubernetes expands only variables defined earlier in the list).
POD_NAME_ENV = "OTEL_RESOURCE_ATTRIBUTES_POD_NAME"
NAMESPACE_ENV = "OTEL_RESOURCE_ATTRIBUTES_NAMESPACE"
NODE_NAME_ENV = "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME"


@dataclass(frozen=True)
class OtelExport:
    """Where a workload sends its traces, and the environment it reports."""

    environment: str
    otlp_grpc_endpoint: str


def child(parent: pulumi.Resource, *, formerly: str | None = None, **kwargs: Any) -> pulumi.ResourceOptions:
    """Options for a component's child: parented to it.

    `formerly`: the child's logical name in stacks deployed before it was renamed. The alias lets
    `pulumi up` update the existing object in place; without it Pulumi would create the object
    under the new name, then delete the old one, which is the same Kubernetes object (same
    metadata.name), so the update would end with the object deleted."""
    if formerly is not None:
        kwargs["aliases"] = [*kwargs.get("aliases", ()), pulumi.Alias(name=formerly)]
    return pulumi.ResourceOptions(parent=parent, **kwargs)


def labels(common_labels: Mapping[str, str], app: str, component: str) -> dict[str, str]:
    """Common labels of every object: the stack's, plus name and component."""
    return {**common_labels, "app.kubernetes.io/name": app, "app.kubernetes.io/component": component}


def metadata(
    common_labels: Mapping[str, str],
    name: str,
    namespace: str,
    *,
    app: str,
    component: str,
    extra_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Any:
    """Explicit name and namespace (no auto-naming suffix), common labels.

    Typed `Any`: the SDK's typed dicts spell keys in snake_case, while these manifest fragments are
    Kubernetes' own camelCase shape, which the provider accepts as written."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**labels(common_labels, app, component), **(extra_labels or {})},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}


def _attribute(key: str, value: str) -> str:
    if any(c in value for c in ",= ") or any(c in key for c in ",= "):
        raise ValueError(f"OTEL resource attribute {key}={value!r}: keys and values may not contain ',', '=' or ' '")
    return f"{key}={value}"


def otel_env(
    otel: OtelExport,
    service_name: str,
    extra_attributes: Sequence[tuple[str, str]] = (),
    extra_env: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """OTEL_EXPORTER_OTLP_ENDPOINT (the stack's Tempo OTLP gRPC), OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES (environment; namespace, pod and node from the downward API)."""
    attributes = [
        ("deployment.environment", otel.environment),
        ("k8s.namespace.name", f"$({NAMESPACE_ENV})"),
        ("k8s.pod.name", f"$({POD_NAME_ENV})"),
        ("k8s.node.name", f"$({NODE_NAME_ENV})"),
        *extra_attributes,
    ]
    return [
        field_env(POD_NAME_ENV, "metadata.name"),
        field_env(NAMESPACE_ENV, "metadata.namespace"),
        field_env(NODE_NAME_ENV, "spec.nodeName"),
        *extra_env,
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": otel.otlp_grpc_endpoint},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
        {"name": "OTEL_SERVICE_NAME", "value": service_name},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": ",".join(_attribute(k, v) for k, v in attributes)},
    ]


def restricted_pod_security_context(uid: int = NONROOT_UID) -> dict[str, Any]:
    """Pod Security Standard "restricted" at pod level."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container_security_context(uid: int = NONROOT_UID) -> dict[str, Any]:
    """Pod Security Standard "restricted" at container level, plus a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources(spec: Resources, extended: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Requests and limits; extended resources (GPUs) must have request == limit."""
    extra = dict(extended or {})
    return {
        "requests": {"cpu": spec.cpu_request, "memory": spec.memory_request, **extra},
        "limits": {"cpu": spec.cpu_limit, "memory": spec.memory_limit, **extra},
    }


def tolerations(items: Sequence[Toleration]) -> list[dict[str, Any]]:
    out = []
    for t in items:
        toleration: dict[str, Any] = {"key": t.key, "operator": t.operator, "effect": t.effect}
        if t.operator == "Equal":
            toleration["value"] = t.value
        out.append(toleration)
    return out


def scratch_volume(name: str = "tmp") -> dict[str, Any]:
    """A small memory-backed /tmp for containers with a read-only root filesystem."""
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}


# Where an exporter pod (the GPU poller, a training job) mounts its certificate and web config.
METRICS_TLS_DIR = "/etc/foxhunt/metrics-tls"
METRICS_WEB_DIR = "/etc/foxhunt/metrics-web"
WEB_CONFIG_KEY = "web-config.yaml"


@dataclass(frozen=True)
class ExporterWeb:
    """TLS and authentication of an exporter pod (`scrapeSecurity`): the kubernetes.io/tls Secret
    of its certificate and the Secret of its web config, mounted read-only."""

    tls_secret: str
    web_config_secret: str
    require_client_cert: bool

    @property
    def web_config_file(self) -> str:
        return f"{METRICS_WEB_DIR}/{WEB_CONFIG_KEY}"

    def volumes(self) -> list[dict[str, Any]]:
        return [
            {"name": "metrics-tls", "secret": {"secretName": self.tls_secret, "defaultMode": 0o440}},
            {"name": "metrics-web", "secret": {"secretName": self.web_config_secret, "defaultMode": 0o440}},
        ]

    def mounts(self) -> list[dict[str, Any]]:
        return [
            {"name": "metrics-tls", "mountPath": METRICS_TLS_DIR, "readOnly": True},
            {"name": "metrics-web", "mountPath": METRICS_WEB_DIR, "readOnly": True},
        ]
