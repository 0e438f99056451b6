"""Run the policies: over Kubernetes objects, over rendered files, over a stack file.

`evaluate(objects, ctx)` is what pytest asserts on (no mandatory violation per stack) and what
the CrossGuard pack does per resource (`run_resource_policy`) and per stack (`run_stack_policy`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

import yaml

from policy.model import Enforcement, Finding, KubeObject, Policy, PolicyContext, Violation
from policy.rules import ALL_POLICIES
from policy.rules.alerting import ALERT_RULE_ANNOTATIONS, groups_in_text, rule_group_findings
from policy.rules.grafana import (
    DASHBOARD_CONFIGMAPS,
    DASHBOARD_UIDS_UNIQUE,
    DATASOURCE_LINKS_RESOLVE,
    datasource_link_findings,
    datasources_in_text,
    looks_like_dashboard,
    uid_findings,
)
from policy.rules.plaintext import NO_PLAINTEXT_SECRETS, document_findings, stack_file_findings, text_findings

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


def _parse(name: str, text: str) -> object:
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError):
        return None


def check_files(files: Mapping[str, str]) -> list[Violation]:
    """The rendered files besides the Kubernetes objects: rule files, datasource provisioning,
    bare dashboards, and every one of them for plaintext credentials. `kubernetes/` is skipped
    (those are the objects `evaluate` checks, Secrets included)."""
    violations: list[Violation] = []
    dashboard_uids: dict[str, str] = {}
    for name, text in sorted(files.items()):
        if PurePosixPath(name).parts[:1] == ("kubernetes",):
            continue
        groups = groups_in_text(text) if name.endswith((".yaml", ".yml")) else None
        if groups is not None:
            violations += [_violation(ALERT_RULE_ANNOTATIONS, name, f) for f in rule_group_findings(groups, "groups")]
        sources = datasources_in_text(text) if name.endswith((".yaml", ".yml")) else []
        violations += [
            _violation(DATASOURCE_LINKS_RESOLVE, name, f)
            for _, f in datasource_link_findings([("", s) for s in sources])
        ]
        document = _parse(name, text)
        if name.endswith(".json") and isinstance(document, Mapping) and looks_like_dashboard(document):
            uid = document.get("uid") if isinstance(document.get("uid"), str) else None
            violations += [_violation(DASHBOARD_CONFIGMAPS, name, f) for f in uid_findings(uid, "uid")]
            if uid and uid in dashboard_uids:
                violations.append(
                    _violation(
                        DASHBOARD_UIDS_UNIQUE,
                        name,
                        Finding(
                            "uid", f"dashboard uid {uid!r} is also used by {dashboard_uids[uid]}", "use unique uids"
                        ),
                    )
                )
            elif uid:
                dashboard_uids[uid] = name
        structured = isinstance(document, Mapping | list)
        findings = list(document_findings(document)) if structured else list(text_findings(text, ""))
        violations += [_violation(NO_PLAINTEXT_SECRETS, name, f) for f in findings]
    return violations


def check_stack_file(name: str, text: str) -> list[Violation]:
    """`Pulumi.<stack>.yaml`: no plaintext credential in its config or anywhere in its text."""
    return [_violation(NO_PLAINTEXT_SECRETS, name, f) for f in stack_file_findings(text)]
