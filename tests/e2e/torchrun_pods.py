"""The rendered training Job's pods started as local processes: what the kubelet would run.

Each pod of the Indexed Job becomes one process with the container's `command` and `args`, and the
container's env as Kubernetes builds it: downward-API fields filled in (job name, completion
index, pod and node name), `$(VAR)` references expanded the way the kubelet expands them (in
order for env values, against the whole env for args; `$$` is a literal `$`, unknown references
stay as written). Only what the cluster's network provides is replaced: index 0's DNS name by
127.0.0.1, and, because every pod here shares one host, the rendezvous port and each pod's
metrics base port by free local ports, and a console script of the trainer wheel (the container's
command, `foxhunt-torchrun`) by what the installed script runs: its entry point, from this checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt_trainer.trainer_env import METRICS_BASE_PORT_ENV
from infra import REPO_ROOT
from infra.components import training_job

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(one, text)


def container_env(container: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """The container's env in order, each value expanded against the ones before it."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
            continue
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        if path not in fields:
            raise KeyError(f"env {item['name']} reads downward-API field {path!r}, which this pod emulation lacks")
        env[item["name"]] = fields[path]
    return env


def console_scripts() -> dict[str, str]:
    """The commands the trainer wheel installs (pyproject's `[project.scripts]`): name -> module:function."""
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {str(k): str(v) for k, v in scripts.items()}


def as_installed(argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """`argv`, its command run the way the wheel's console script runs it when it is one (the
    script calls the entry point and exits with what it returns), else unchanged."""
    entry = console_scripts().get(argv[0])
    if entry is None:
        return list(argv)
    module, function = entry.split(":")
    return [python, "-c", f"import sys; from {module} import {function}; sys.exit({function}())", *argv[1:]]


@dataclass(frozen=True)
class PodProcess:
    argv: list[str]
    env: dict[str, str]  # the container's env only (the process also gets PATH etc.)


def pod_process(
    job_spec: Mapping[str, Any], *, job_name: str, namespace: str, index: int, master_port: int, metrics_port: int
) -> PodProcess:
    """Index `index` of the Job as a local process."""
    (container,) = job_spec["template"]["spec"]["containers"]
    fields = {
        "metadata.name": f"{job_name}-{index}-local",
        "metadata.namespace": namespace,
        "spec.nodeName": f"local-node-{index}",
        "metadata.labels['batch.kubernetes.io/job-name']": job_name,
        f"metadata.annotations['{training_job.COMPLETION_INDEX_ANNOTATION}']": str(index),
    }
    env = container_env(container, fields)
    subdomain = job_spec["template"]["spec"]["subdomain"]
    dns = f"{job_name}-0.{subdomain}.{namespace}.svc"
    if env.get(training_job.MASTER_ADDR_ENV) != dns:
        raise AssertionError(
            f"{training_job.MASTER_ADDR_ENV} is {env.get(training_job.MASTER_ADDR_ENV)!r}, not {dns!r}"
        )
    env[training_job.MASTER_ADDR_ENV] = "127.0.0.1"  # what the cluster DNS answers for index 0
    env[training_job.MASTER_PORT_ENV] = str(master_port)
    env[METRICS_BASE_PORT_ENV] = str(metrics_port)
    argv = [expand(a, env) for a in [*container["command"], *container.get("args", [])]]
    return PodProcess(as_installed(argv), env)


def start_pod(
    pod: PodProcess, cwd: Path, venv_bin: Path, log: Path, extra_env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start one pod's process (its own process group, so it is stopped as a whole)."""
    env = {
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(cwd),
        **pod.env,
        **(extra_env or {}),
    }
    # no real Tempo here: traces go nowhere rather than to the rendered endpoint
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen(
        pod.argv, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
