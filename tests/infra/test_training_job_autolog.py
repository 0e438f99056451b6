"""The training job template runs every program auto-instrumented: one process through `foxhunt-run`
(trainingJob.program), torchrun through `foxhunt-torchrun` (trainingJob.command), FOXHUNT_AUTOLOG
on, and the job's identity in its env; `trainingJob.autolog: false` runs the program as it is with
FOXHUNT_AUTOLOG off. The `training-job-autolog` policy holds every rendered stack to it and follows
the setting."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from foxhunt_trainer import trainer_env
from infra.components import training_job
from infra.offline import render
from infra.offline.policy_context import context_from_settings, rendered_objects
from infra.offline.result import RenderResult
from infra.settings import SettingsError, read_stack_config
from policy.engine import evaluate
from policy.rules import training_jobs
from tests.infra.support import STACKS, one


def training_overrides(stack: str, **changes: Any) -> dict[str, Any]:
    base = json.loads(read_stack_config(stack).values["trainingJob"])
    base.update(changes)
    return {"trainingJob": {k: v for k, v in base.items() if v is not None}}


def trainer_container(result: RenderResult) -> dict[str, Any]:
    (container,) = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == training_job.CONTAINER
    return dict(container)


def job_file_container(result: RenderResult) -> dict[str, Any]:
    """The trainer container of the standalone Job file (rendered/<stack>/kubernetes/)."""
    settings = result.settings
    job = yaml.safe_load(
        result.files[f"kubernetes/job_{settings.namespaces.training}_{settings.training_job.name}.yaml"]
    )
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return dict(container)


def env_values(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def autolog_findings(result: RenderResult) -> list[str]:
    violations = evaluate(
        rendered_objects(result), context_from_settings(result.settings), [training_jobs.TRAINING_AUTOLOG]
    )
    return [v.message() for v in violations]


def test_every_stack_runs_its_program_as_its_autolog_setting_says(rendered: dict[str, RenderResult]) -> None:
    launchers = set()
    for stack in STACKS:
        result = rendered[stack]
        settings = result.settings.training_job
        switch = trainer_env.AUTOLOG_ON if settings.autolog else trainer_env.AUTOLOG_OFF
        for container in (trainer_container(result), job_file_container(result)):
            assert env_values(container)[trainer_env.AUTOLOG_ENV] == switch
            if settings.command:
                assert container["command"] == [trainer_env.TORCHRUN_COMMAND]
                assert container["args"][-len(settings.command) :] == list(settings.command)
            elif settings.autolog:
                assert container["command"] == [trainer_env.RUN_COMMAND]
                assert container["args"] == list(settings.program)
            if settings.autolog:
                launchers.add(container["command"][0])
        assert autolog_findings(result) == [], stack
    # both launchers are rendered by some stack, so neither path goes unchecked
    assert launchers == {trainer_env.RUN_COMMAND, trainer_env.TORCHRUN_COMMAND}


def test_autolog_is_on_unless_the_stack_file_says_otherwise() -> None:
    for stack in ("dev", "staging"):
        result = render.render_stack(stack, overrides=training_overrides(stack, autolog=None))
        assert result.settings.training_job.autolog
        assert env_values(trainer_container(result))[trainer_env.AUTOLOG_ENV] == trainer_env.AUTOLOG_ON


def test_the_template_sets_the_jobs_identity_and_metrics_port(rendered: dict[str, RenderResult]) -> None:
    for stack in STACKS:
        result = rendered[stack]
        settings = result.settings.training_job
        container = trainer_container(result)
        env = env_values(container)
        # the Kubernetes Job's name, from the pod label every Job's pods carry
        job_name = env[trainer_env.JOB_NAME_ENV]["fieldRef"]["fieldPath"]
        assert job_name == "metadata.labels['batch.kubernetes.io/job-name']"
        assert env[trainer_env.MODEL_TYPE_ENV] == settings.model_type
        # one process or torchrun's ranks: each serves on the base port plus its local rank
        assert env[trainer_env.METRICS_BASE_PORT_ENV] == str(settings.metrics_port)
        assert container["ports"][0]["containerPort"] == settings.metrics_port
        assert f"ml.model_type={settings.model_type}" in env["OTEL_RESOURCE_ATTRIBUTES"]


@pytest.mark.parametrize(
    ("stack", "changes", "command", "args"),
    [
        # one process: the program itself, its executable as the container's command
        ("dev", {"autolog": False}, ["python"], ["-m", "train_baseline_rl"]),
        # no program: the image's entrypoint, as the template rendered before auto-instrumentation
        ("dev", {"autolog": False, "program": None}, None, None),
        # torchrun still runs through its launcher (the podFailurePolicy needs its exit codes); the
        # launcher reads FOXHUNT_AUTOLOG and leaves the workers as they are
        ("staging", {"autolog": False}, [trainer_env.TORCHRUN_COMMAND], "torchrun"),
    ],
    ids=["program", "entrypoint", "torchrun"],
)
def test_autolog_off_runs_the_program_as_it_is(
    stack: str, changes: dict[str, Any], command: list[str] | None, args: list[str] | str | None
) -> None:
    result = render.render_stack(stack, overrides=training_overrides(stack, **changes))
    for container in (trainer_container(result), job_file_container(result)):
        assert env_values(container)[trainer_env.AUTOLOG_ENV] == trainer_env.AUTOLOG_OFF
        assert container.get("command") == command
        if args == "torchrun":
            assert container["args"] == training_job.torchrun_args(result.settings.training_job)
        else:
            assert container.get("args") == args
    assert autolog_findings(result) == []


def test_the_policy_follows_the_setting_not_only_the_command() -> None:
    """The same unwrapped program passes with FOXHUNT_AUTOLOG off and is reported with it on."""
    off = render.render_stack("dev", overrides=training_overrides("dev", autolog=False))
    objects = rendered_objects(off)
    for obj in objects:
        if obj.kind in ("CronJob", "Job"):  # the template and its Job file
            spec = obj.manifest["spec"]
            pod = (spec["jobTemplate"]["spec"] if obj.kind == "CronJob" else spec)["template"]
            for entry in pod["spec"]["containers"][0]["env"]:
                if entry["name"] == trainer_env.AUTOLOG_ENV:
                    entry["value"] = trainer_env.AUTOLOG_ON
    violations = evaluate(objects, context_from_settings(off.settings), [training_jobs.TRAINING_AUTOLOG])
    # the template and the Job file made from it (which has only a generateName)
    assert sorted(v.subject.split(" ")[0] for v in violations) == ["CronJob", "Job"], violations
    assert all("runs 'python' with FOXHUNT_AUTOLOG=on" in v.problem for v in violations), violations


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"autolog": "yes"}, "trainingJob.autolog = 'yes': expected true or false"),
        ({"program": None}, "trainingJob.program = null: expected the command line the training image runs"),
        (
            {"program": "python -m train"},
            "trainingJob.program = 'python -m train': expected a list of non-empty strings",
        ),
        ({"program": []}, "trainingJob.program = []: expected a list of non-empty strings"),
        ({"program": ["foxhunt-run", "python", "train.py"]}, "the template adds foxhunt-run"),
        ({"command": ["-m", "train"]}, "no program while trainingJob.command is set"),
    ],
    ids=["autolog-not-bool", "no-program", "program-string", "program-empty", "program-wrapped", "program-and-command"],
)
def test_bad_autolog_settings_are_named(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(SettingsError) as error:
        render.render_stack("dev", overrides=training_overrides("dev", **{"autolog": True, **changes}))
    assert expected in str(error.value)


def test_the_policy_spells_the_trainers_names() -> None:
    """The pack imports nothing of the project: its copies of the names match the trainer's."""
    assert training_jobs.AUTOLOG_ENV == trainer_env.AUTOLOG_ENV
    assert training_jobs.AUTOLOG_COMMANDS == (trainer_env.RUN_COMMAND, trainer_env.TORCHRUN_COMMAND)
    assert training_jobs.REMEDIATION_ENV == trainer_env.REMEDIATION_ENABLED_ENV
    assert training_jobs.MAX_ROLLBACKS_ENV == trainer_env.REMEDIATION_MAX_ROLLBACKS_ENV
    assert training_jobs.MAX_ROLLBACKS == trainer_env.REMEDIATION_MAX_ROLLBACKS_LIMIT
