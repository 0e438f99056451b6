"""The vocabulary of the policies: objects under test, the stack context, findings and violations.

A rule returns `Finding`s (where in the object, what is wrong, how to fix it); the engine turns
them into `Violation`s that also name the policy, its enforcement level and the object. Rules see
`KubeObject`s, whose manifest is any read-only `Mapping` (plain dicts in pytest, the analyzer's
proxies in the CrossGuard pack).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Enforcement(enum.Enum):
    """What a violation does: mandatory ones fail pytest and block `pulumi preview`/`up`."""

    MANDATORY = "mandatory"
    ADVISORY = "advisory"


@dataclass(frozen=True)
class Finding:
    """One problem a rule found: `path` is the field path in the object (or file)."""

    path: str
    problem: str
    fix: str


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: Enforcement
    subject: str  # "DaemonSet monitoring-dev/gpu-poller", or a file name
    path: str
    problem: str
    fix: str

    @property
    def mandatory(self) -> bool:
        return self.enforcement is Enforcement.MANDATORY

    def message(self) -> str:
        """What, where, how to fix: the line a person reads in pytest output or a PR comment."""
        where = f"{self.subject}: {self.path}" if self.path else self.subject
        return f"{where}: {self.problem}. Fix: {self.fix}"

    def __str__(self) -> str:
        return f"[{self.policy}] ({self.enforcement.value}) {self.message()}"


@dataclass(frozen=True, eq=False)
class KubeObject:
    """A Kubernetes object as sent to the API server; a patch carries only the fields it sets."""

    manifest: Mapping[str, Any]
    is_patch: bool = False
    origin: str = ""  # where it came from (file, URN), for people reading a violation

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind") or "")

    @property
    def api_version(self) -> str:
        return str(self.manifest.get("apiVersion") or "")

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.manifest.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def labels(self) -> Mapping[str, Any]:
        labels = self.metadata.get("labels")
        return labels if isinstance(labels, Mapping) else {}

    @property
    def annotations(self) -> Mapping[str, Any]:
        annotations = self.metadata.get("annotations")
        return annotations if isinstance(annotations, Mapping) else {}

    @property
    def ref(self) -> str:
        kind = f"{self.kind} patch" if self.is_patch else self.kind
        name = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{kind} {name or '<unnamed>'}"


@dataclass(frozen=True)
class DeclaredService:
    """A scrape target the stack declares: its `service` label value and the ports it may expose."""

    name: str
    ports: frozenset[int]
    path: str | None = None
    # Must carry the scrape annotations (the platform services); others are checked when annotated.
    required: bool = True
    # Object names that belong to this service when their pods carry no `app.kubernetes.io/name`.
    workloads: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PolicyContext:
    """What the policies know about the stack besides its objects; a field left None is unknown.

    pytest builds it from the stack's typed settings; the CrossGuard pack from its policy config
    (`rendered/<stack>/policy/pack-config.json`, see `policy.pack_config`).
    """

    stack: str = ""
    services: tuple[DeclaredService, ...] | None = None
    tempo_otlp_endpoint: str | None = None
    training_job_name: str | None = None
    namespaces: frozenset[str] | None = None
    common_labels: Mapping[str, str] | None = None

    def service(self, service_label: str | None, object_name: str) -> DeclaredService | None:
        """The declared service a workload belongs to, by pod label first, else by object name."""
        for declared in self.services or ():
            if service_label and declared.name == service_label:
                return declared
        for declared in self.services or ():
            if not service_label and (declared.name == object_name or object_name in declared.workloads):
                return declared
        return None


CONTEXT_FIELDS = ("services", "tempo_otlp_endpoint", "training_job_name", "namespaces", "common_labels")

ResourceCheck = Callable[[KubeObject, PolicyContext], Iterable[Finding]]
StackCheck = Callable[[Sequence[KubeObject], PolicyContext], Iterable[tuple[KubeObject | None, Finding]]]
# The rendered files besides the Kubernetes objects (path -> text) -> (the path a finding is in, finding).
FileCheck = Callable[[Mapping[str, str]], Iterable[tuple[str, Finding]]]
# A stack file's text (`Pulumi.<stack>.yaml`) -> findings.
StackFileCheck = Callable[[str], Iterable[Finding]]


@dataclass(frozen=True)
class Policy:
    """A rule with a stable id; exactly one of `check` (per object) or `stack_check` (all objects).
    A rule that also reads the rendered files (rule files, provisioning, bare dashboards) has a
    `file_check`, one that reads the stack file a `stack_file_check`."""

    id: str
    description: str
    enforcement: Enforcement
    remediation: str
    check: ResourceCheck | None = None
    stack_check: StackCheck | None = None
    file_check: FileCheck | None = None
    stack_file_check: StackFileCheck | None = None
    # Context fields the rule cannot run without, and those it reads when they are given.
    needs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if (self.check is None) == (self.stack_check is None):
            raise ValueError(f"policy {self.id}: give exactly one of check or stack_check")
        unknown = set(self.needs) | set(self.uses)
        unknown -= set(CONTEXT_FIELDS)
        if unknown:
            raise ValueError(f"policy {self.id}: unknown context fields {sorted(unknown)}")

    @property
    def is_stack_policy(self) -> bool:
        return self.stack_check is not None
