"""Guard rails of the training job template: it fails at once on what a restart cannot fix, retries
the rest a bounded number of times, ignores disruptions, and bounds the trainer's rollbacks.

- `podFailurePolicy` with a `FailJob` rule on exit codes (the trainer's documented codes for
  non-finite training a restart cannot fix) and an `Ignore` rule on the `DisruptionTarget` pod
  condition (a node drain or preemption is not the job's fault);
- `backoffLimit` set and at most MAX_BACKOFF_LIMIT (retriable failures, e.g. a GPU or collective
  error, count against it);
- remediation set explicitly on every container (`FOXHUNT_REMEDIATION` on or off), and with it on,
  `FOXHUNT_REMEDIATION_MAX_ROLLBACKS` a whole number from 0 to MAX_ROLLBACKS.

The names are the trainer library's (foxhunt_trainer.remediation); the pack imports
nothing of the project, so they are spelled here and a test compares them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policy.manifests import as_int, containers, env_value, mapping, pod_templates, sequence
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

REMEDIATION_ENV = "FOXHUNT_REMEDIATION"
MAX_ROLLBACKS_ENV = "FOXHUNT_REMEDIATION_MAX_ROLLBACKS"
MAX_ROLLBACKS = 10
MAX_BACKOFF_LIMIT = 10


def _job_spec(obj: KubeObject) -> tuple[str, Mapping[str, Any]] | None:
    spec = mapping(obj.manifest.get("spec"))
    if obj.kind == "Job":
        return "spec", spec
    if obj.kind == "CronJob":
        return "spec.jobTemplate.spec", mapping(mapping(spec.get("jobTemplate")).get("spec"))
    return None


def _has_rule(policy: Mapping[str, Any], action: str, key: str) -> bool:
    return any(
        mapping(rule).get("action") == action and mapping(rule).get(key) for rule in sequence(policy.get("rules"))
    )


def _ignores_disruptions(policy: Mapping[str, Any]) -> bool:
    for rule in sequence(policy.get("rules")):
        rule = mapping(rule)
        conditions = [mapping(c) for c in sequence(rule.get("onPodConditions"))]
        if rule.get("action") == "Ignore" and any(c.get("type") == "DisruptionTarget" for c in conditions):
            return True
    return False


def check_training_failure_policy(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    if obj.is_patch or (ctx.training_job_name is not None and obj.name != ctx.training_job_name):
        return
    found = _job_spec(obj)
    if found is None:
        return
    path, spec = found
    policy = mapping(spec.get("podFailurePolicy"))
    if not _has_rule(policy, "FailJob", "onExitCodes"):
        yield Finding(
            f"{path}.podFailurePolicy",
            "the training job has no podFailurePolicy rule failing it on the trainer's unfixable exit codes: "
            "a diverged run is restarted up to backoffLimit times and burns its GPUs again",
            "add podFailurePolicy.rules: {action: FailJob, onExitCodes: {operator: In, values: [80, 81, 82]}}",
        )
    if not _ignores_disruptions(policy):
        yield Finding(
            f"{path}.podFailurePolicy",
            "the training job's podFailurePolicy does not ignore disruptions: a node drain or preemption "
            "counts against backoffLimit",
            "add podFailurePolicy.rules: {action: Ignore, onPodConditions: [{type: DisruptionTarget}]}",
        )
    limit = as_int(spec.get("backoffLimit"))
    if limit is None or not 0 <= limit <= MAX_BACKOFF_LIMIT:
        yield Finding(
            f"{path}.backoffLimit",
            f"the training job's backoffLimit is {limit if limit is not None else spec.get('backoffLimit')!r}: "
            f"expected a bound from 0 to "
            f"{MAX_BACKOFF_LIMIT} (unset is Kubernetes' default of 6, retried without the stack saying so)",
            "set trainingJob.backoffLimit in Pulumi.<stack>.yaml",
        )
    for template in pod_templates(obj):
        for container in containers(template, ("containers",)):
            is_set, value = env_value(container, REMEDIATION_ENV)
            if not is_set or value not in ("on", "off"):
                yield Finding(
                    container.field("env"),
                    f"training container {container.name} does not say whether remediation is on "
                    f"({REMEDIATION_ENV} on or off)",
                    "set trainingJob.remediation in Pulumi.<stack>.yaml",
                )
                continue
            if value == "on":
                _, budget = env_value(container, MAX_ROLLBACKS_ENV)
                rollbacks = as_int(budget)
                if rollbacks is None or not 0 <= rollbacks <= MAX_ROLLBACKS:
                    yield Finding(
                        container.field("env"),
                        f"training container {container.name} rolls back non-finite training without a bound: "
                        f"{MAX_ROLLBACKS_ENV} is {budget!r}, expected 0 to {MAX_ROLLBACKS}",
                        "set trainingJob.remediation.maxRollbacks in Pulumi.<stack>.yaml",
                    )


TRAINING_FAILURE_POLICY = Policy(
    id="training-job-failure-policy",
    description=(
        "The training job template fails at once on the trainer's unfixable exit codes, ignores disruptions, "
        "retries a bounded number of times and bounds the trainer's rollbacks."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Render the template from the stack's trainingJob settings (backoffLimit, remediation).",
    check=check_training_failure_policy,
    uses=("training_job_name",),
    tags=("reliability", "training"),
)
