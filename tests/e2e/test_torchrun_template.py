"""The job template's torchrun command, started locally as the two pods of a 2-node Indexed Job
with two processes each (tests/e2e/torchrun_pods.py: the kubelet's env and argument expansion,
index 0's DNS name answered by 127.0.0.1): every rank rendezvouses and joins one gloo all-reduce,
with the rank, node rank and metrics port the template promises."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from bench._prometheus import free_port
from infra import REPO_ROOT, render
from tests.infra.test_training_job_distributed import training_overrides

from .torchrun_pods import pod_process, start_pod

pytestmark = pytest.mark.slow

NODES, PER_NODE = 2, 2
PROBE = "tests/e2e/programs/rank_probe.py"


def test_the_rendered_torchrun_command_runs_2_nodes_of_2_ranks(tmp_path: Path) -> None:
    overrides = training_overrides("staging", nodes=NODES, gpuCount=PER_NODE, command=[PROBE, "--out", str(tmp_path)])
    result = render.render_stack("staging", overrides=overrides)
    job = next(m for m in result.manifests.values() if m["kind"] == "CronJob")["spec"]["jobTemplate"]["spec"]
    assert job["completions"] == NODES
    namespace = result.settings.namespaces.training
    master_port = free_port()
    metrics_ports = [free_port() for _ in range(NODES)]
    pods = [
        pod_process(job, job_name="ddp-run-7", namespace=namespace, index=i, master_port=master_port,
                    metrics_port=metrics_ports[i])
        for i in range(NODES)
    ]  # fmt: skip
    venv_bin = Path(sys.executable).parent
    procs = [start_pod(p, REPO_ROOT, venv_bin, tmp_path / f"pod-{i}.log") for i, p in enumerate(pods)]
    try:
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    logs = "\n".join((tmp_path / f"pod-{i}.log").read_text() for i in range(NODES))
    assert [p.returncode for p in procs] == [0] * NODES, logs
    records = {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in tmp_path.glob("rank-*.json")}
    world = NODES * PER_NODE
    assert sorted(records) == list(range(world)), logs
    for rank, record in records.items():
        node, local = divmod(rank, PER_NODE)
        assert record["WORLD_SIZE"] == str(world) and record["LOCAL_WORLD_SIZE"] == str(PER_NODE)
        # the completion index is the node rank: ranks 0-1 on pod 0, 2-3 on pod 1
        assert (record["GROUP_RANK"], record["LOCAL_RANK"]) == (str(node), str(local))
        assert record["TRAINING_JOB_NAME"] == "ddp-run-7"
        assert record["FOXHUNT_METRICS_BASE_PORT"] == str(metrics_ports[node])
        assert record["MASTER_PORT"] == str(master_port)
        assert record["rank_sum"] == sum(range(world))


def test_the_pod_emulation_refuses_a_field_it_does_not_know() -> None:
    from .torchrun_pods import container_env

    container = {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]}
    with pytest.raises(KeyError, match=r"status\.hostIP"):
        container_env(container, {})
