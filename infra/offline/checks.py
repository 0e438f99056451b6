"""Offline checks run after every render, before anything is written: Kubernetes schemas, the
policies (the same ones the CrossGuard pack enforces), promtool over the rules files, and the
shard tier's rules file read again for rules that combine scrape targets."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from infra.kube_provider import PROVIDER_TYPE
from infra.offline import schema_check
from infra.offline.artifacts import RULES_PATH, TIER_RULES_PATHS
from infra.offline.policy_context import context_from_settings, rendered_objects
from infra.offline.result import RenderResult
from infra.settings import stack_file
from observability.rules import Tier
from observability.rules.tiers import shard_tier_problems
from policy.engine import check_files, check_stack_file, evaluate, mandatory

Check = Callable[[RenderResult], list[str]]


def check_policies(result: RenderResult) -> list[str]:
    """Mandatory policy violations in the rendered objects, files and the stack file."""
    violations = evaluate(rendered_objects(result), context_from_settings(result.settings))
    violations += check_files(result.files)
    path = stack_file(result.stack)
    if path.is_file():
        violations += check_stack_file(path.name, path.read_text())
    return [v.message() for v in mandatory(violations)]


def check_rules_with_promtool(result: RenderResult) -> list[str]:
    """`promtool check rules` on the rendered rules files (Debian's prometheus package)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ["promtool not found: install Debian's `prometheus` package (`sudo make sysdeps`)"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for rendered in (RULES_PATH, *TIER_RULES_PATHS.values()):
            path = Path(tmp) / Path(rendered).name
            path.write_text(result.files[rendered])
            paths.append(str(path))
        proc = subprocess.run([promtool, "check", "rules", *paths], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    return []


def check_provider(result: RenderResult) -> list[str]:
    """One explicit provider with the stack's context and server-side apply, and every Kubernetes
    resource created through it (none through the ambient default provider)."""
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


def check_rule_tiers(result: RenderResult) -> list[str]:
    """Every rule of `rules-shard.yaml` reads one scrape target's series (observability.rules.tiers)."""
    shard_file = yaml.safe_load(result.files[TIER_RULES_PATHS[Tier.SHARD]]) or {}
    whole = yaml.safe_load(result.files[RULES_PATH]) or {}
    return shard_tier_problems(shard_file.get("groups") or [], whole.get("groups") or [])


ALL_CHECKS: list[tuple[str, Check]] = [
    ("kubernetes-provider", check_provider),
    ("kubernetes-schema", schema_check.check_render),
    ("policies", check_policies),
    ("promtool-rules", check_rules_with_promtool),
    ("rule-tiers", check_rule_tiers),
]
