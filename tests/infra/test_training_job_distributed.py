"""The multi-node training Job: an Indexed Job whose pods rendezvous through a headless Service,
torchrun's arguments from the completion index, one scrape target per rank; single-node stacks
without torchrun keep the template they had."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer import launcher, trainer_env
from harness.ports import free_port
from infra import REPO_ROOT
from infra.components import training_job
from infra.offline import render
from infra.offline.result import RenderResult
from infra.settings import SettingsError, read_stack_config
from observability import scrape_config
from tests.e2e.torchrun_pods import as_installed, console_scripts
from tests.infra.support import STACKS, one


def env_entries(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def rendezvous_services(result: RenderResult) -> list[dict[str, Any]]:
    name = training_job.rendezvous_service_name(result.settings.training_job)
    return [m for m in result.manifests.values() if m["kind"] == "Service" and m["metadata"]["name"] == name]


def rendezvous_service(result: RenderResult) -> dict[str, Any]:
    (service,) = rendezvous_services(result)
    return service


def multi_node_stacks(rendered: dict[str, RenderResult]) -> list[str]:
    return [s for s in STACKS if rendered[s].settings.training_job.nodes > 1]


def test_some_stack_runs_multi_node_jobs(rendered: dict[str, RenderResult]) -> None:
    assert multi_node_stacks(rendered), "no stack file sets trainingJob.nodes > 1: the multi-node template is unchecked"


def test_multi_node_jobs_are_indexed_with_torchrun_ranks_from_the_completion_index(
    rendered: dict[str, RenderResult],
) -> None:
    for stack in multi_node_stacks(rendered):
        result = rendered[stack]
        settings = result.settings.training_job
        namespace = result.settings.namespaces.training
        spec = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
            "Indexed", settings.nodes, settings.nodes,
        )  # fmt: skip
        pod = spec["template"]
        service = rendezvous_service(result)
        # the pods' hostnames (<job>-<index>) resolve under the headless Service that selects them
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert service["metadata"]["namespace"] == namespace
        selector = service["spec"]["selector"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        (container,) = pod["spec"]["containers"]
        assert container["command"] == [training_job.LAUNCHER]
        assert container["args"] == [
            f"--nnodes={settings.nodes}",
            "--node-rank=$(TORCHRUN_NODE_RANK)",
            "--master-addr=$(TORCHRUN_MASTER_ADDR)",
            "--master-port=$(TORCHRUN_MASTER_PORT)",
            f"--nproc-per-node={settings.gpu_count}",
            *settings.command,
        ]
        env = env_entries(container)
        index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        assert env[training_job.NODE_RANK_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == index
        assert env[training_job.MASTER_ADDR_ENV]["value"] == (
            f"$({trainer_env.JOB_NAME_ENV})-0.{service['metadata']['name']}.{namespace}.svc"
        )
        assert env[training_job.MASTER_PORT_ENV]["value"] == str(training_job.RENDEZVOUS_PORT)
        assert env[trainer_env.METRICS_BASE_PORT_ENV]["value"] == str(settings.metrics_port)
        names = list(env)  # $(VAR) in an env value resolves only against variables defined earlier
        assert names.index(trainer_env.JOB_NAME_ENV) < names.index(training_job.MASTER_ADDR_ENV)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {
            **{f"metrics-{i}": settings.metrics_port + i for i in range(settings.gpu_count)},
            "rendezvous": training_job.RENDEZVOUS_PORT,
        }
        assert {p["port"] for p in service["spec"]["ports"]} == {training_job.RENDEZVOUS_PORT}
        # the standalone Job file is the same Job
        assert yaml.safe_load(result.files[training_job_file(result)])["spec"] == spec


@pytest.mark.slow
def test_the_rendered_multi_node_command_runs_torchrun_through_the_launcher_with_the_trainers_exit_code(
    rendered: dict[str, RenderResult], tmp_path: Path
) -> None:
    """The first multi-node stack's container command and arguments, run as its pods would run
    them (one per node rank, `$(VAR)`s from the pod's env, 127.0.0.1 as index 0's address), with the
    training program replaced by a worker that ends as non-finite training past its rollback budget
    ends (tests/trainer/launcher_worker.py): every pod exits 80, the code the podFailurePolicy fails
    the Job on, although torchrun itself exits 1."""
    result = rendered[multi_node_stacks(rendered)[0]]
    settings = result.settings.training_job
    (container,) = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [training_job.LAUNCHER]
    # the console script the trainer wheel installs, run as the installed script runs it
    assert console_scripts()[training_job.LAUNCHER] == f"{launcher.__name__}:main"
    args = container["args"]
    assert args[-len(settings.command) :] == list(settings.command)
    program = ["-m", "tests.trainer.launcher_worker", "--out", str(tmp_path), "--ranks", "all"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO_ROOT),
        "OTEL_TRACES_EXPORTER": "none",
    }
    master_port = str(free_port())

    def pod_args(node: int) -> list[str]:
        """The torchrun options as Kubernetes expands them in the pod of node rank `node`."""
        values = {
            training_job.NODE_RANK_ENV: str(node),
            training_job.MASTER_ADDR_ENV: "127.0.0.1",
            training_job.MASTER_PORT_ENV: master_port,
        }
        return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in args[: -len(settings.command)]]

    command = as_installed(container["command"])
    ending = ["--ending", "budget-spent"]
    pods = [
        subprocess.Popen(
            [*command, *pod_args(node), *program, *ending],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in range(settings.nodes)
    ]
    finished = [pod.communicate(timeout=240) for pod in pods]
    codes = [pod.returncode for pod in pods]
    assert codes == [launcher.EXIT_ROLLBACK_BUDGET_SPENT] * settings.nodes, [out for out, _ in finished]
    ranks = {int(p.name.split("-")[1]) for p in tmp_path.glob("started-*")}
    assert ranks == set(range(settings.nodes * settings.processes_per_node))  # every rank of every node ran


def training_job_file(result: RenderResult) -> str:
    return f"kubernetes/job_{result.settings.namespaces.training}_{result.settings.training_job.name}.yaml"


def test_single_node_stacks_without_torchrun_keep_the_single_pod_template_and_run_their_program(
    rendered: dict[str, RenderResult],
) -> None:
    plain = [s for s in STACKS if not rendered[s].settings.training_job.command]
    assert plain, "every stack launches torchrun: the single-pod template is unchecked"
    for stack in plain:
        result = rendered[stack]
        spec = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]
        assert "completionMode" not in spec and "completions" not in spec and "parallelism" not in spec
        pod = spec["template"]
        assert "subdomain" not in pod["spec"]
        (container,) = pod["spec"]["containers"]
        settings = result.settings.training_job
        assert container["command"] == [training_job.AUTOLOG_RUNNER] and container["args"] == list(settings.program)
        assert scrape_config.RANK_PORTS_ANNOTATION not in pod["metadata"]["annotations"]
        assert rendezvous_services(result) == []


def test_a_single_node_torchrun_job_runs_standalone_with_a_port_per_rank() -> None:
    result = render.render_stack("prod", overrides=training_overrides("prod", command=["-m", "train"], program=None))
    settings = result.settings.training_job
    spec = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]
    assert "completionMode" not in spec
    (container,) = spec["template"]["spec"]["containers"]
    assert container["args"] == ["--standalone", "--nnodes=1", f"--nproc-per-node={settings.gpu_count}", "-m", "train"]
    assert [p["name"] for p in container["ports"]] == [f"metrics-{i}" for i in range(settings.gpu_count)]
    assert rendezvous_services(result) == []


def training_overrides(stack: str, **changes: Any) -> dict[str, Any]:
    base = json.loads(read_stack_config(stack).values["trainingJob"])
    base.update(changes)
    return {"trainingJob": {k: v for k, v in base.items() if v is not None}}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"nodes": 2}, "trainingJob.command"),
        ({"nodes": 0, "command": ["-m", "train"]}, "trainingJob.nodes"),
        ({"nodes": 2, "command": "-m train"}, "a list of non-empty strings"),
        ({"nodes": 2, "command": ["--nnodes=4", "train.py"]}, "torchrun's own options come from the template"),
    ],
)
def test_bad_multi_node_settings_are_named(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(SettingsError) as error:
        render.render_stack("dev", overrides=training_overrides("dev", **changes))
    assert expected in str(error.value)
