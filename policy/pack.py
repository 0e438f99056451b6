"""The CrossGuard policy pack: every policy of `policy.rules` as a pulumi_policy policy.

Resource policies become `ResourceValidationPolicy`s (the engine calls `Analyze` per resource),
stack policies `StackValidationPolicy`s (`AnalyzeStack` once with every resource). Each turns the
analyzer's read-only properties into a `KubeObject` and its config into a `PolicyContext`, runs
the same function pytest runs and reports every violation with its actionable message.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import Policy as PulumiPolicy

from policy.engine import run_resource_policy, stack_policy_violations
from policy.manifests import kube_object_from_pulumi
from policy.pack_config import config_schema, context_from_config
from policy.rules import ALL_POLICIES
from policy.vocabulary import Enforcement, KubeObject, Policy

PACK_NAME = "foxhunt-observability"
PACK_DESCRIPTION = (
    "Pod security, resources, probes, pinned images, scrape annotations, OTLP endpoints, Grafana sidecar "
    "ConfigMaps, alert annotations, no plaintext secrets, namespaces and labels for foxhunt-observability."
)
LEVELS = {Enforcement.MANDATORY: EnforcementLevel.MANDATORY, Enforcement.ADVISORY: EnforcementLevel.ADVISORY}


def _schema(policy: Policy) -> PolicyConfigSchema | None:
    properties, required = config_schema(policy)
    return PolicyConfigSchema(properties, required or None) if properties else None


def _stack() -> str:
    """The stack being previewed: the engine passes PULUMI_STACK to analyzers."""
    return os.environ.get("PULUMI_STACK", "")


def _validate_resource(policy: Policy) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = kube_object_from_pulumi(args.resource_type, args.props, args.urn)
        if obj is None:
            return
        ctx = context_from_config(args.get_config(), _stack())
        for violation in run_resource_policy(policy, obj, ctx):
            report_violation(violation.message(), None)

    return validate


def _validate_stack(policy: Policy) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        objects: list[KubeObject] = []
        for resource in args.resources:
            obj = kube_object_from_pulumi(resource.resource_type, resource.props, resource.urn)
            if obj is not None:
                objects.append(obj)
        ctx = context_from_config(args.get_config(), _stack())
        for obj, violation in stack_policy_violations(policy, objects, ctx):
            report_violation(violation.message(), obj.origin if obj is not None and obj.origin else None)

    return validate


def crossguard_policy(policy: Policy) -> PulumiPolicy:
    if policy.is_stack_policy:
        return StackValidationPolicy(
            name=policy.id,
            description=policy.description,
            validate=_validate_stack(policy),
            enforcement_level=LEVELS[policy.enforcement],
            config_schema=_schema(policy),
            remediation_steps=policy.remediation,
            tags=list(policy.tags),
        )
    return ResourceValidationPolicy(
        name=policy.id,
        description=policy.description,
        validate=_validate_resource(policy),
        enforcement_level=LEVELS[policy.enforcement],
        config_schema=_schema(policy),
        remediation_steps=policy.remediation,
        tags=list(policy.tags),
    )


def serve() -> None:
    """Start the analyzer gRPC server, print its port on stdout and serve until killed."""
    PolicyPack(
        name=PACK_NAME,
        description=PACK_DESCRIPTION,
        enforcement_level=EnforcementLevel.MANDATORY,
        policies=[crossguard_policy(p) for p in ALL_POLICIES],
    )
