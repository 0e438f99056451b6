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
- in the render, a Kubernetes resource registered with any other provider (`check_render`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from infra.settings import KubernetesTarget, Settings

if TYPE_CHECKING:
    from infra.render import RenderResult

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


def default_provider_conflict(stack: str, target: KubernetesTarget, default_context: str | None) -> str | None:
    """`kubernetes:context` in the stack file must not name another cluster than `kubeContext`."""
    if default_context and target.context and default_context != target.context:
        return (
            f"Pulumi.{stack}.yaml sets kubernetes:context = {default_context!r} but kubeContext = {target.context!r}: "
            "the stack deploys only through its own provider (kubeContext); remove kubernetes:context or make them "
            "the same"
        )
    return None


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


def check_render(result: RenderResult) -> list[str]:
    """Offline: one explicit provider with the stack's context and server-side apply, and every
    Kubernetes resource created through it (none through the ambient default provider)."""
    providers = [r for r in result.run.resources if r.type == PROVIDER_TYPE]
    if len(providers) != 1:
        return [f"expected one explicit Kubernetes provider, found {len(providers)}"]
    (provider,) = providers
    problems = []
    target = result.settings.kubernetes
    if provider.inputs.get("context") != target.context:
        problems.append(
            f"the provider's context is {provider.inputs.get('context')!r}, the stack config names {target.context!r}"
        )
    if str(provider.inputs.get("enableServerSideApply")).lower() != "true":
        problems.append("the provider does not use server-side apply (enableServerSideApply)")
    for resource in result.run.resources:
        if resource.type.startswith("kubernetes:") and not resource.provider.startswith(f"{provider.urn}::"):
            problems.append(
                f"{resource.type} {resource.name!r} is not created through the stack's provider "
                f"(provider {resource.provider or 'default'})"
            )
    return problems
