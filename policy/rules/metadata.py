"""Every object says where it lives (an explicit namespace) and who owns it (common labels)."""

from __future__ import annotations

from collections.abc import Iterator

from policy.manifests import CLUSTER_SCOPED_KINDS
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

DEFAULT_COMMON_LABEL_KEYS = ("app.kubernetes.io/part-of", "app.kubernetes.io/managed-by")


def check_namespace(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    if obj.kind in CLUSTER_SCOPED_KINDS:
        return
    allowed = sorted(ctx.namespaces or ())
    if not obj.namespace:
        yield Finding(
            "metadata.namespace",
            f"{obj.kind} {obj.name} has no namespace, so it lands in whatever namespace the provider defaults to",
            f"set metadata.namespace (this stack's namespaces: {', '.join(allowed) or 'see Pulumi.<stack>.yaml'})",
        )
    elif ctx.namespaces is not None and obj.namespace not in ctx.namespaces:
        yield Finding(
            "metadata.namespace",
            f"namespace {obj.namespace!r} is not one of this stack's namespaces ({', '.join(allowed)})",
            "use the stack's namespaces (Pulumi.<stack>.yaml namespaces / grafana.namespace)",
        )


def check_common_labels(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    if obj.is_patch:
        return  # the patched object belongs to another system; its labels are not ours to set
    expected = dict(ctx.common_labels) if ctx.common_labels is not None else dict.fromkeys(DEFAULT_COMMON_LABEL_KEYS)
    for key, value in expected.items():
        actual = obj.labels.get(key)
        if actual is None:
            shown = f"{key}: {value}" if value is not None else key
            yield Finding(f"metadata.labels.{key}", f"the common label {key} is missing", f"add {shown}")
        elif value is not None and actual != value:
            yield Finding(
                f"metadata.labels.{key}", f"label {key} is {actual!r}, expected {value!r}", f"set {key}: {value}"
            )


EXPLICIT_NAMESPACE = Policy(
    id="explicit-namespace",
    description="Every namespaced object sets metadata.namespace, to one of the stack's namespaces.",
    enforcement=Enforcement.MANDATORY,
    remediation="Set metadata.namespace from the stack's namespaces settings.",
    check=check_namespace,
    uses=("namespaces",),
    tags=("hygiene",),
)

COMMON_LABELS = Policy(
    id="common-labels",
    description="Objects this project owns carry the common labels (part-of, managed-by, environment).",
    enforcement=Enforcement.ADVISORY,
    remediation="Merge the stack's common labels into metadata.labels.",
    check=check_common_labels,
    uses=("common_labels",),
    tags=("hygiene",),
)
