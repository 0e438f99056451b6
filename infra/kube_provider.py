"""The stack's own Kubernetes provider, and the guard that keeps a stack off the wrong cluster.

Every Kubernetes resource of the program is created through one explicit provider per stack
(`kubernetes_provider`): the context the stack config names (`kubeContext`), of the kubeconfig
the stack carries as a secret (`kubeconfig`) or else of the ambient one, with server-side apply.
The ambient default provider, which follows whatever the current kubeconfig context happens to
be, is never used.

The guard refuses a stack whose provider would not use the context its config names:
- `kubernetes:context` set in `Pulumi.<stack>.yaml` (the default provider's setting) that differs
  from `kubeContext` (render, preview and up);
- under `pulumi preview`/`up`, a kubeconfig that has no such context (the ambient one from
  `$KUBECONFIG` or `~/.kube/config`, or the stack's secret one);
- in the render, a Kubernetes resource registered with any other provider (`infra.offline.checks`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from infra.settings import Settings, default_provider_conflict

PROVIDER_NAME = "kubernetes"
PROVIDER_TYPE = "pulumi:providers:kubernetes"


class ProviderContextError(RuntimeError):
    """The stack's provider would deploy somewhere other than the context its config names."""


def kubernetes_provider(settings: Settings) -> k8s.Provider:
    target = settings.kubernetes
    kubeconfig = pulumi.Output.secret(target.kubeconfig) if target.kubeconfig is not None else None
    return k8s.Provider(
        PROVIDER_NAME,
        context=target.context,
        kubeconfig=kubeconfig,
        enable_server_side_apply=True,
    )


def kubeconfig_contexts(text: str) -> tuple[list[str], str | None]:
    """Context names and the current context of a kubeconfig document."""
    document: Any = yaml.safe_load(text) or {}
    contexts = [str(c.get("name")) for c in document.get("contexts") or [] if isinstance(c, Mapping)]
    current = document.get("current-context")
    return contexts, str(current) if current else None


def context_problem(stack: str, wanted: str | None, kubeconfig_text: str, where: str) -> str | None:
    """Why the provider of `stack` would not use context `wanted` of this kubeconfig (None: it will)."""
    try:
        contexts, current = kubeconfig_contexts(kubeconfig_text)
    except yaml.YAMLError as exc:
        return f"stack {stack!r}: {where} is not a valid kubeconfig: {exc}"
    if wanted is None:
        if current is None or current not in contexts:
            return f"stack {stack!r}: {where} has no current-context; set kubeContext to the context to deploy to"
        return None
    if wanted not in contexts:
        return (
            f"stack {stack!r}: kubeContext {wanted!r} is not a context of {where} "
            f"(it has: {', '.join(contexts) or 'none'}); refusing to deploy to another cluster"
        )
    return None


def ambient_kubeconfig(environ: Mapping[str, str]) -> list[Path]:
    """The files the provider reads without an explicit kubeconfig: $KUBECONFIG, else ~/.kube/config."""
    listed = [Path(p) for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path(environ.get("HOME", str(Path.home()))) / ".kube" / "config"]


def guard_live_run(settings: Settings, default_context: str | None, environ: Mapping[str, str]) -> None:
    """Before `pulumi preview`/`up` registers anything: refuse a provider that would not use the
    context the stack config names. The secret kubeconfig is checked when its value resolves."""
    target = settings.kubernetes
    conflict = default_provider_conflict(settings.stack, target, default_context)
    if conflict:
        raise ProviderContextError(conflict)
    if target.kubeconfig is not None:

        def check(text: str) -> str:
            problem = context_problem(settings.stack, target.context, text, "the stack's kubeconfig secret")
            if problem:
                raise ProviderContextError(problem)
            return "ok"

        pulumi.Output.secret(target.kubeconfig).apply(check)
        return
    files = [p for p in ambient_kubeconfig(environ) if p.is_file()]
    if not files:
        raise ProviderContextError(
            f"stack {settings.stack!r}: no kubeconfig found ($KUBECONFIG or ~/.kube/config) to take context "
            f"{target.context!r} from"
        )
    contexts = [name for f in files for name in kubeconfig_contexts(f.read_text())[0]]
    if target.context not in contexts:
        raise ProviderContextError(
            f"stack {settings.stack!r}: kubeContext {target.context!r} is not a context of "
            f"{os.pathsep.join(map(str, files))} (it has: {', '.join(contexts) or 'none'}); refusing to deploy "
            "to another cluster"
        )
