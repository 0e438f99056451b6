"""Guard rails of the training job template: it fails at once on what a restart cannot fix, retries
the rest a bounded number of times, ignores disruptions, and bounds the trainer's rollbacks.

- `podFailurePolicy` with a `FailJob` rule on exit codes (the trainer's documented codes for
  non-finite training a restart cannot fix) and an `Ignore` rule on the `DisruptionTarget` pod
  condition (a node drain or preemption is not the job's fault);
- `backoffLimit` set and at most MAX_BACKOFF_LIMIT (retriable failures, e.g. a GPU or collective
  error, count against it);
- remediation set explicitly on every container (`FOXHUNT_REMEDIATION` on or off), and with it on,
  `FOXHUNT_REMEDIATION_MAX_ROLLBACKS` a whole number from 0 to MAX_ROLLBACKS.

And it reports every program with no code of its own (`training-job-autolog`): every container says
whether auto-instrumentation is on (`FOXHUNT_AUTOLOG` on or off, from the stack's
trainingJob.autolog), and with it on runs its program through the trainer wheel's `foxhunt-run` or
`foxhunt-torchrun`; an image's entrypoint run as it is reports nothing of its training.

The names are the trainer library's (foxhunt_trainer.trainer_env); the pack imports
nothing of the project, so they are spelled here and a test compares them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policy.manifests import Container, as_int, containers, env_value, mapping, pod_templates, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

REMEDIATION_ENV = "FOXHUNT_REMEDIATION"
MAX_ROLLBACKS_ENV = "FOXHUNT_REMEDIATION_MAX_ROLLBACKS"
MAX_ROLLBACKS = 10
MAX_BACKOFF_LIMIT = 10
AUTOLOG_ENV = "FOXHUNT_AUTOLOG"
AUTOLOG_COMMANDS = ("foxhunt-run", "foxhunt-torchrun")


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


def _training_service(ctx: PolicyContext) -> str | None:
    """The `app.kubernetes.io/name` of the training template's pods (its declared service)."""
    for service in ctx.services or ():
        if ctx.training_job_name in service.workloads:
            return service.name
    return None


def _is_training_template(obj: KubeObject, ctx: PolicyContext) -> bool:
    """The stack's training template (by name), or a Job made from it: the rendered Job file has no
    name of its own (`generateName`), only the template's pods."""
    if obj.is_patch:
        return False
    if ctx.training_job_name is None or obj.name == ctx.training_job_name:
        return True
    service = _training_service(ctx)
    return (
        obj.kind == "Job"
        and not obj.name
        and service is not None
        and any(template.labels.get("app.kubernetes.io/name") == service for template in pod_templates(obj))
    )


def check_training_failure_policy(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    if not _is_training_template(obj, ctx):
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
    uses=("training_job_name", "services"),
    tags=("reliability", "training"),
)


def _launcher(container: Container) -> str | None:
    """The command the container starts (its executable's file name), None for the image's entrypoint."""
    command = sequence(container.spec.get("command"))
    first = string(command[0]) if command else None
    return first.rsplit("/", 1)[-1] if first else None


def check_training_autolog(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    if not _is_training_template(obj, ctx) or _job_spec(obj) is None:
        return
    for template in pod_templates(obj):
        for container in containers(template, ("containers",)):
            is_set, value = env_value(container, AUTOLOG_ENV)
            if not is_set or value not in ("on", "off"):
                yield Finding(
                    container.field("env"),
                    f"training container {container.name} does not say whether its program is auto-instrumented "
                    f"({AUTOLOG_ENV} is {value!r}, expected on or off)",
                    "render the template from the stack's trainingJob settings (trainingJob.autolog)",
                )
                continue
            launcher = _launcher(container)
            if value == "on" and launcher not in AUTOLOG_COMMANDS:
                started = f"runs {launcher!r}" if launcher else "runs the image's entrypoint"
                yield Finding(
                    container.field("command"),
                    f"training container {container.name} {started} with {AUTOLOG_ENV}=on, not through "
                    f"{' or '.join(AUTOLOG_COMMANDS)}: its program reports nothing of its training unless it "
                    "instruments itself",
                    "set trainingJob.program (one process) or trainingJob.command (torchrun) in Pulumi.<stack>.yaml, "
                    "or trainingJob.autolog: false to run the program as it is",
                )


TRAINING_AUTOLOG = Policy(
    id="training-job-autolog",
    description=(
        "The training job template runs every program through the trainer's auto-instrumentation "
        "(foxhunt-run, foxhunt-torchrun) unless the stack turned it off, and says which in FOXHUNT_AUTOLOG."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Render the template from the stack's trainingJob settings (program or command, autolog).",
    check=check_training_autolog,
    uses=("training_job_name", "services"),
    tags=("observability", "training"),
)
