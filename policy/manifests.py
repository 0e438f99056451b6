"""Reading manifests defensively: any `Mapping`/`Sequence` (never `dict`/`list` checks), pod
templates and containers of every workload kind, and Pulumi resources turned into objects."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from policy.vocabulary import KubeObject

EMPTY: Mapping[str, Any] = {}

# Kinds with no namespace: the explicit-namespace policy does not apply to them.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService", "CertificateSigningRequest", "ClusterRole", "ClusterRoleBinding", "CSIDriver", "CSINode",
        "CustomResourceDefinition", "IngressClass", "MutatingWebhookConfiguration", "Namespace", "Node",
        "PersistentVolume", "PriorityClass", "RuntimeClass", "StorageClass", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "VolumeAttachment",
    }
)  # fmt: skip

# Workload kinds whose pods run until stopped (they need liveness and readiness probes).
LONG_RUNNING_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController"})

# Pulumi modules in the kubernetes provider that are components, not API objects.
_COMPONENT_MODULES = ("yaml", "helm.sh", "kustomize")


def parsed_file(name: str, text: str) -> object:
    """A rendered file's document (JSON for `.json`, YAML otherwise); None when it does not parse."""
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError):
        return None


def is_yaml(name: str) -> bool:
    return name.endswith((".yaml", ".yml"))


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else EMPTY


def sequence(value: Any) -> Sequence[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return value
    return ()


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    """A whole number, however it arrives: an int, an integral float (a protobuf Struct's numbers),
    or a string of digits (annotation values, stack config); None for anything else. The one integer
    parser of the project: the stack settings read their numbers with it too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def kube_object_from_pulumi(type_token: str, props: Mapping[str, Any], origin: str = "") -> KubeObject | None:
    """The object a `kubernetes:<group>/<version>:<Kind>` resource sends (None for anything else).

    `kubernetes:apps/v1:DeploymentPatch` becomes a Deployment marked as a patch; `core` is the
    empty API group. Works the same on the mock engine's inputs and on the analyzer's properties.
    """
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes":
        return None
    group_version, kind = parts[1], parts[2]
    group, _, version = group_version.rpartition("/")
    if not group or not version or group in _COMPONENT_MODULES or not kind:
        return None
    is_patch = kind.endswith("Patch")
    kind = kind.removesuffix("Patch")
    api_version = version if group == "core" else f"{group}/{version}"
    manifest = {key: props[key] for key in props if key not in ("apiVersion", "kind")}
    return KubeObject({"apiVersion": api_version, "kind": kind, **manifest}, is_patch=is_patch, origin=origin)


@dataclass(frozen=True)
class PodTemplate:
    """A pod spec inside an object, with the field path that leads to it."""

    path: str  # "spec.template" (workloads), "spec.jobTemplate.spec.template" (CronJob), "" (Pod)
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]
    long_running: bool

    def field(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    @property
    def labels(self) -> Mapping[str, Any]:
        return mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, Any]:
        return mapping(self.metadata.get("annotations"))


def pod_templates(obj: KubeObject) -> list[PodTemplate]:
    spec = mapping(obj.manifest.get("spec"))
    if obj.kind == "Pod":
        restart = spec.get("restartPolicy", "Always")
        return [PodTemplate("", obj.metadata, spec, long_running=restart == "Always")]
    if obj.kind == "CronJob":
        template = mapping(mapping(mapping(spec.get("jobTemplate")).get("spec")).get("template"))
        path = "spec.jobTemplate.spec.template"
    elif obj.kind in LONG_RUNNING_KINDS or obj.kind in ("Job", "PodTemplate"):
        template = mapping(spec.get("template")) if obj.kind != "PodTemplate" else mapping(obj.manifest.get("template"))
        path = "spec.template" if obj.kind != "PodTemplate" else "template"
    else:
        return []
    if not template:
        return []
    return [
        PodTemplate(
            path,
            mapping(template.get("metadata")),
            mapping(template.get("spec")),
            long_running=obj.kind in LONG_RUNNING_KINDS,
        )
    ]


@dataclass(frozen=True)
class Container:
    path: str  # "spec.template.spec.containers[poller]"
    name: str
    kind: str  # "containers", "initContainers" or "ephemeralContainers"
    spec: Mapping[str, Any]

    def field(self, name: str) -> str:
        return f"{self.path}.{name}"

    @property
    def security_context(self) -> Mapping[str, Any]:
        return mapping(self.spec.get("securityContext"))


CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def containers(template: PodTemplate, lists: Sequence[str] = CONTAINER_LISTS) -> Iterator[Container]:
    for list_name in lists:
        for index, item in enumerate(sequence(template.spec.get(list_name))):
            container = mapping(item)
            name = string(container.get("name")) or str(index)
            yield Container(template.field(f"spec.{list_name}[{name}]"), name, list_name, container)


def env_value(container: Container, name: str) -> tuple[bool, str | None]:
    """Whether the container sets env var `name`, and its literal value (None when valueFrom)."""
    for item in sequence(container.spec.get("env")):
        entry = mapping(item)
        if entry.get("name") == name:
            return True, string(entry.get("value"))
    return False, None


def service_label(template: PodTemplate, obj: KubeObject) -> str | None:
    """The `service` target label scrape discovery gives the pods: `app.kubernetes.io/name`."""
    return string(template.labels.get("app.kubernetes.io/name")) or string(obj.labels.get("app.kubernetes.io/name"))


def plain(value: Any) -> Any:
    """A deep copy as dicts and lists (for serializing what may be read-only proxies)."""
    if isinstance(value, Mapping):
        return {str(key): plain(value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(item) for item in value]
    return value


def walk(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every leaf as (field path, its key, value); list items are addressed by index."""
    if isinstance(value, Mapping):
        for key in value:
            child = f"{path}.{key}" if path else str(key)
            item = value[key]
            if isinstance(item, Mapping) or (isinstance(item, Sequence) and not isinstance(item, str | bytes)):
                yield from walk(item, child)
            else:
                yield child, str(key), item
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        key = path.rsplit(".", 1)[-1]
        for index, item in enumerate(value):
            child = f"{path}[{index}]"
            if isinstance(item, Mapping) or (isinstance(item, Sequence) and not isinstance(item, str | bytes)):
                yield from walk(item, child)
            else:
                yield child, key, item
