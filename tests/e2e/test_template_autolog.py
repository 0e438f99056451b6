"""The rendered single-process training Job run as its pod would run it: the container's command and
arguments (`foxhunt-run python -m ...`, the trainer wheel's console script run as installed) and its
env as the kubelet builds it (the Job's name from the pod label, `$(VAR)`s expanded), with the
program replaced by an unmodified PyTorch loop (tests/autolog/programs/plain_loop.py). The loop
reports itself under the Job's name and the stack's model type, on the template's metrics port; with
the stack's `trainingJob.autolog: false` the same pod runs the loop as it is and serves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer import trainer_env
from foxhunt_trainer.contract import catalog
from harness.ports import free_port
from infra import REPO_ROOT
from infra.offline import render
from infra.settings import read_stack_config
from tests.e2e.torchrun_pods import as_installed, container_env

pytestmark = pytest.mark.slow

STACK = "dev"
JOB_NAME = "dqn-run-42"  # what `kubectl create job dqn-run-42 --from=cronjob/...` names the Job
PROGRAM = REPO_ROOT / "tests" / "autolog" / "programs" / "plain_loop.py"
EPOCHS, BATCHES = 2, 10


def job_container(autolog: bool) -> dict[str, Any]:
    """The trainer container of the stack's rendered Job file, with trainingJob.autolog as given."""
    job_settings = json.loads(read_stack_config(STACK).values["trainingJob"])
    result = render.render_stack(STACK, overrides={"trainingJob": {**job_settings, "autolog": autolog}})
    settings = result.settings
    text = result.files[f"kubernetes/job_{settings.namespaces.training}_{settings.training_job.name}.yaml"]
    (container,) = yaml.safe_load(text)["spec"]["template"]["spec"]["containers"]
    return dict(container)


def start_pod(container: dict[str, Any], out: Path, port: int) -> subprocess.Popen[str]:
    """The container's process: its program (`python -m ...`) swapped for the plain loop."""
    fields = {
        "metadata.name": f"{JOB_NAME}-abcde",
        "metadata.namespace": "training-dev",
        "spec.nodeName": "local-node-0",
        "metadata.labels['batch.kubernetes.io/job-name']": JOB_NAME,
    }
    env = container_env(container, fields)
    env[trainer_env.METRICS_BASE_PORT_ENV] = str(port)  # the pods of the tests share one host
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT")  # no Tempo here
    argv = [*container.get("command", []), *container.get("args", [])]
    python = argv.index("python")
    assert argv[python + 1 :] == ["-m", "train_baseline_rl"], argv
    loop = [str(PROGRAM), str(out), "--epochs", str(EPOCHS), "--batches-per-epoch", str(BATCHES)]
    return subprocess.Popen(
        as_installed([*argv[: python + 1], *loop, "--step-seconds", "0.05"]),
        cwd=REPO_ROOT,
        env={
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONPATH": str(REPO_ROOT),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def scrape_until_exit(pod: subprocess.Popen[str], port: int, timeout: float = 180) -> list[str]:
    """Every page the pod served, scraped as Prometheus would until the process ends."""
    pages, deadline = [], time.monotonic() + timeout
    while pod.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                pages.append(response.read().decode())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pod.wait(timeout=max(deadline - time.monotonic(), 1))
    return pages


def sample(page: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return float(s.value)
    return None


def test_the_rendered_job_runs_an_unmodified_loop_auto_instrumented_under_the_jobs_name(tmp_path: Path) -> None:
    container = job_container(autolog=True)
    assert container["command"] == [trainer_env.RUN_COMMAND]
    port = free_port()
    pod = start_pod(container, tmp_path, port)
    pages = scrape_until_exit(pod, port)
    output = pod.stdout.read() if pod.stdout else ""
    assert pod.returncode == 0, output[-4000:]
    assert pages, f"the pod served no /metrics on its port {port}:\n{output[-4000:]}"
    last = pages[-1]
    job = {"job_id": JOB_NAME, "model_type": "dqn"}
    assert sample(last, catalog.TRAINING_STEPS_TOTAL.name, **job) == EPOCHS * BATCHES, last[-3000:]
    assert sample(last, catalog.TRAINING_JOBS_BY_STATUS.name, status="completed") == 1
    assert (tmp_path / "result.json").is_file()  # the program's own result, written as without the wrapper


def test_with_autolog_off_the_same_pod_runs_the_loop_as_it_is(tmp_path: Path) -> None:
    container = job_container(autolog=False)
    assert container["command"] == ["python"]
    port = free_port()
    pod = start_pod(container, tmp_path, port)
    pages = scrape_until_exit(pod, port)
    output = pod.stdout.read() if pod.stdout else ""
    assert pod.returncode == 0, output[-4000:]
    assert pages == [], "a program run with FOXHUNT_AUTOLOG=off served metrics"
    assert (tmp_path / "result.json").is_file()
