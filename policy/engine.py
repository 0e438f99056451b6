"""Run the policies: over Kubernetes objects, over rendered files, over a stack file.

`evaluate(objects, ctx)` is what pytest asserts on (no mandatory violation per stack) and what
the CrossGuard pack does per resource (`run_resource_policy`) and per stack (`run_stack_policy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from policy.rules import ALL_POLICIES
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext, Violation

# Context field -> the key that carries it in the pack's policy config (rendered/<stack>/policy/pack-config.json).
CONFIG_KEYS = {
    "services": "services",
    "tempo_otlp_endpoint": "tempoOtlpEndpoint",
    "training_job_name": "trainingJobName",
    "namespaces": "namespaces",
    "common_labels": "commonLabels",
}


def missing_context(policy: Policy, ctx: PolicyContext) -> list[str]:
    return [name for name in policy.needs if getattr(ctx, name) is None]


def _missing_context_violation(policy: Policy, missing: list[str], subject: str) -> Violation:
    keys = ", ".join(CONFIG_KEYS[name] for name in missing)
    return Violation(
        policy.id,
        policy.enforcement,
        subject,
        "",
        f"the policy cannot run without its config ({keys})",
        "run with --policy-pack-config rendered/<stack>/policy/pack-config.json "
        "(written from Pulumi.<stack>.yaml by `make render STACK=<stack>`)",
    )


def _violation(policy: Policy, subject: str, finding: Finding) -> Violation:
    return Violation(policy.id, policy.enforcement, subject, finding.path, finding.problem, finding.fix)


def run_resource_policy(policy: Policy, obj: KubeObject, ctx: PolicyContext) -> list[Violation]:
    assert policy.check is not None, f"{policy.id} is a stack policy"
    missing = missing_context(policy, ctx)
    if missing:
        return [_missing_context_violation(policy, missing, obj.ref)]
    return [_violation(policy, obj.ref, finding) for finding in policy.check(obj, ctx)]


def stack_policy_violations(
    policy: Policy, objects: Sequence[KubeObject], ctx: PolicyContext
) -> list[tuple[KubeObject | None, Violation]]:
    """(the object a violation is about, or None for the stack as a whole; the violation)."""
    assert policy.stack_check is not None, f"{policy.id} is a resource policy"
    subject = f"stack {ctx.stack}" if ctx.stack else "the stack"
    missing = missing_context(policy, ctx)
    if missing:
        return [(None, _missing_context_violation(policy, missing, subject))]
    return [
        (obj, _violation(policy, obj.ref if obj is not None else subject, finding))
        for obj, finding in policy.stack_check(objects, ctx)
    ]


def run_stack_policy(policy: Policy, objects: Sequence[KubeObject], ctx: PolicyContext) -> list[Violation]:
    return [violation for _, violation in stack_policy_violations(policy, objects, ctx)]


def evaluate(
    objects: Sequence[KubeObject], ctx: PolicyContext, policies: Iterable[Policy] = ALL_POLICIES
) -> list[Violation]:
    violations: list[Violation] = []
    for policy in policies:
        if policy.is_stack_policy:
            violations += run_stack_policy(policy, objects, ctx)
        else:
            for obj in objects:
                violations += run_resource_policy(policy, obj, ctx)
    return violations


def mandatory(violations: Iterable[Violation]) -> list[Violation]:
    return [v for v in violations if v.enforcement is Enforcement.MANDATORY]


# ------------------------------------------------------------------------------------------------
# Rendered files (rendered/<stack>/...) and stack files
# ------------------------------------------------------------------------------------------------


def check_files(files: Mapping[str, str]) -> list[Violation]:
    """The rendered files besides the Kubernetes objects (rule files, datasource provisioning, bare
    dashboards, and every file for plaintext credentials): each policy of `ALL_POLICIES` with a
    `file_check`, by file. `kubernetes/` is skipped (those are the objects `evaluate` checks,
    Secrets included)."""
    rendered = {name: text for name, text in sorted(files.items()) if PurePosixPath(name).parts[:1] != ("kubernetes",)}
    violations = [
        _violation(policy, name, finding)
        for policy in ALL_POLICIES
        if policy.file_check is not None
        for name, finding in policy.file_check(rendered)
    ]
    return sorted(violations, key=lambda v: v.subject)


def check_stack_file(name: str, text: str) -> list[Violation]:
    """`Pulumi.<stack>.yaml`: each policy of `ALL_POLICIES` with a `stack_file_check` (no plaintext
    credential in its config or anywhere in its text)."""
    return [
        _violation(policy, name, finding)
        for policy in ALL_POLICIES
        if policy.stack_file_check is not None
        for finding in policy.stack_file_check(text)
    ]
