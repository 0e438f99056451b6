"""Distributed training end to end: a real 4-rank DDP run, started from the job template's rendered
torchrun command as the two pods of a 2-node Indexed Job (two ranks each, gloo on 127.0.0.1,
tests/e2e/torchrun_pods.py), every rank scraped on its own port through the project's relabelling
by Debian's Prometheus 2.42, which evaluates the rendered rules.

One run, in phases, steered through the trainer's control files (harness/ddp_trainer.py):
1. balanced: every rank's simulated device time is the same;
2. straggler: rank 3's device time is 30 % longer, then back to normal;
3. hang: rank 1 is stopped with SIGSTOP, then continued with SIGCONT.
Over the whole run TrainingRankStraggler may fire only for rank 3 during phase 2, and
TrainingJobHung only during phase 3, naming rank 1.

The rules are rendered for a 1-second scrape and evaluation interval (their windows and `for`
follow from it: four and two scrape intervals) with the hang threshold at 8 seconds, so the test
takes about a minute and a half; the stack's own intervals and threshold are measured in bench/
(`python -m bench distributed`), the thresholds' edges in the promtool cases.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from foxhunt_trainer.contract import catalog
from harness import ddp_trainer
from harness.ports import free_port, free_port_range
from harness.prometheus import PrometheusServer, config_yaml
from infra import REPO_ROOT
from infra.offline import render
from observability.config import ObservabilityConfig
from observability.promql import duration
from observability.rules import distributed, rules_file_yaml
from observability.scrape_config import (
    INTERVAL_ANNOTATION,
    PORT_ANNOTATION,
    TIMEOUT_ANNOTATION,
    annotation_scrape_configs,
)
from observability.thresholds import DEFAULT_THRESHOLDS, Threshold, Thresholds
from tests.infra.test_scrape_relabel_prometheus import pod_target
from tests.infra.test_training_job_distributed import training_overrides

from .torchrun_pods import container_env, pod_process, start_pod

pytestmark = pytest.mark.slow

NODES, PER_NODE = 2, 2
WORLD = NODES * PER_NODE
JOB_ID = "ddp-e2e"
K8S_JOB = "ddp-run-7"
SLOW_RANK, STOPPED_RANK = 3, 1
HANG_SECONDS = 8
TRAINER = "harness/ddp_trainer.py"
# Hang guards, not speed checks: a passing run never waits them out. Starting up is four ranks and
# two launchers importing PyTorch and joining one gloo group on a shared 2-core machine, which under
# the rest of the suite's load has taken more than 90 s.
WAIT = 180.0
STARTUP_WAIT = 480.0


def distributed_config() -> ObservabilityConfig:
    hang = DEFAULT_THRESHOLDS.training_rank_hang_seconds
    others = [t for t in DEFAULT_THRESHOLDS if t.name != hang.name]
    thresholds = Thresholds([*others, Threshold(hang.name, HANG_SECONDS, hang.unit, hang.alert)])
    return replace(ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1), thresholds=thresholds)


CFG = distributed_config()
WINDOW = duration(distributed.window_seconds(CFG))


def gpu_uuid(node: int, local: int) -> str:
    return f"GPU-{node:08x}-0000-0000-0000-{local:012x}"


@dataclass
class Run:
    prom: PrometheusServer
    control: Path
    pods: list[subprocess.Popen[bytes]]
    logs: list[Path]
    # when each phase began and ended (Unix time)
    marks: dict[str, float] = field(default_factory=dict)
    done: list[dict[str, Any]] = field(default_factory=list)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return self.prom.api.query(expr, at)

    def firing(self, alert: str) -> list[dict[str, str]]:
        return [r["metric"] for r in self.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')]

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.logs) + "\n" + self.prom.log_tail()


def wait_for(what: str, check: Any, run: Run, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{run.log_text()}")
        if any(p.poll() not in (None, 0) for p in run.pods):
            raise AssertionError(f"a pod exited while waiting for {what}\n{run.log_text()}")
        time.sleep(0.5)


def rank_pid(control: Path, rank: int) -> int:
    return int((control / f"pid-{rank}").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work = tmp_path_factory.mktemp("ddp")
    control = work / "control"
    control.mkdir()
    command = [TRAINER, "--job-id", JOB_ID, "--control", str(control)]
    result = render.render_stack("staging", overrides=training_overrides("staging", nodes=NODES, gpuCount=PER_NODE,
                                                                        command=command))  # fmt: skip
    job_spec = next(m for m in result.manifests.values() if m["kind"] == "CronJob")["spec"]["jobTemplate"]["spec"]
    annotations = job_spec["template"]["metadata"]["annotations"]
    namespace = result.settings.namespaces.training
    master_port, base_ports = free_port(), [free_port_range(PER_NODE) for _ in range(NODES)]
    pods = [
        pod_process(job_spec, job_name=K8S_JOB, namespace=namespace, index=i, master_port=master_port,
                    metrics_port=base_ports[i])
        for i in range(NODES)
    ]  # fmt: skip
    targets = []
    for i, pod in enumerate(pods):
        name = pod.env["OTEL_RESOURCE_ATTRIBUTES_POD_NAME"]
        # this test's intervals instead of the stack's critical scrape interval the template asks for
        pod_annotations = {**annotations, PORT_ANNOTATION: str(base_ports[i]), INTERVAL_ANNOTATION: "1s",
                           TIMEOUT_ANNOTATION: "1s"}  # fmt: skip
        for port in job_spec["template"]["spec"]["containers"][0]["ports"]:
            number = base_ports[i] + int(port["name"].split("-")[1]) if port["name"].startswith("metrics-") else 0
            targets.append(pod_target(name, ip="127.0.0.1", declared_port=number or port["containerPort"],
                                      annotations=pod_annotations, service="training-job", port_name=port["name"],
                                      node=f"local-node-{i}", namespace=namespace))  # fmt: skip
    (work / "targets.json").write_text(json.dumps(targets))
    (job,) = annotation_scrape_configs(CFG, [namespace])
    del job["kubernetes_sd_configs"]
    job.update(file_sd_configs=[{"files": [str(work / "targets.json")], "refresh_interval": "1s"}], scrape_timeout="1s")
    config = config_yaml(
        [job], [str(work / "prometheus" / "rules.yml")], scrape_interval="1s", evaluation_interval="1s"
    )
    prom = PrometheusServer(work / "prometheus", config, {"rules.yml": rules_file_yaml(CFG)})
    logs = [work / f"pod-{i}.log" for i in range(NODES)]
    procs: list[subprocess.Popen[bytes]] = []
    run = Run(prom, control, procs, logs)
    try:
        prom.start()
        venv_bin = Path(sys.executable).parent
        for i, pod in enumerate(pods):
            visible = ",".join(gpu_uuid(i, local) for local in range(PER_NODE))  # as the device plugin sets it
            procs.append(start_pod(pod, REPO_ROOT, venv_bin, logs[i], {"NVIDIA_VISIBLE_DEVICES": visible}))
        wait_for(
            "every rank's first step",
            lambda: all((control / f"ready-{r}").exists() for r in range(WORLD)),
            run,
            STARTUP_WAIT,
        )
        run.marks["started"] = time.time()
        wait_for(f"{WORLD} rank targets up", lambda: len(run.query("up == 1")) == WORLD, run)
        yield run
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(rank_pid(control, STOPPED_RANK), signal.SIGCONT)
        (control / "stop").write_text("")
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        prom.stop()


def distributed_alerts(run: Run, start: float, end: float) -> list[dict[str, Any]]:
    """Every firing sample of the group's alerts between `start` and `end`, per series."""
    names = "|".join(a.name for a in distributed.alerts(CFG))
    expr = f'ALERTS{{alertname=~"{names}", alertstate="firing"}}'
    return run.prom.api.query_range(expr, start, end, "1s")


def test_1_balanced_run_reports_bandwidth_and_communication_share_and_no_alert(run: Run) -> None:
    # enough for every window (4 s) and `for` (2 s) to have passed several times over
    wait_for("the job's bus bandwidth", lambda: run.query(f'{distributed.JOB_BUSBW}{{collective="all_reduce"}}'), run)
    time.sleep(8)
    now = time.time()
    ranks = run.query(f"{distributed.JOB_RANKS}")
    assert [r["value"][1] for r in ranks] == [str(WORLD)], ranks
    # every rank is its own target, with its node and GPU: the pod's GPU at the rank's local index
    placement = run.query(catalog.TRAINING_RANK_PLACEMENT_INFO.name)
    assert {(m["rank"], m["node"], m["uuid"]) for m in (r["metric"] for r in placement)} == {
        (str(r), f"local-node-{r // PER_NODE}", gpu_uuid(r // PER_NODE, r % PER_NODE)) for r in range(WORLD)
    }
    # bytes: DDP reduces the model's gradients once per step, plus the 4-byte stop flag
    width = ddp_trainer.WIDTH  # the trainer's model: Linear(w, w), ReLU, Linear(w, 1), float32
    gradient_bytes = 4 * (width * width + width + width + 1)
    per_step = run.query(
        f'sum by (rank) (increase({catalog.TRAINING_COLLECTIVE_BYTES_TOTAL.name}{{collective="all_reduce"}}[20s]))'
        f" / sum by (rank) (increase({catalog.TRAINING_STEPS_TOTAL.name}[20s]))",
        now,
    )
    assert len(per_step) == WORLD
    for r in per_step:
        assert float(r["value"][1]) == pytest.approx(gradient_bytes + 4, rel=0.05), r
    # bandwidth: the best rank's bytes over busy seconds; bus bandwidth 2(n-1)/n of it for all_reduce
    # (read at the evaluation that recorded them, where the raw rates see the same samples)
    evaluated = float(run.query(f'timestamp({distributed.JOB_ALGBW}{{collective="all_reduce"}})', now)[0]["value"][1])
    algbw = float(run.query(f'{distributed.JOB_ALGBW}{{collective="all_reduce"}}', evaluated)[0]["value"][1])
    busbw = float(run.query(f'{distributed.JOB_BUSBW}{{collective="all_reduce"}}', evaluated)[0]["value"][1])
    assert algbw > 0 and busbw == pytest.approx(algbw * 2 * (WORLD - 1) / WORLD, rel=1e-9)
    raw = run.query(
        f'max(sum by (rank) (rate({catalog.TRAINING_COLLECTIVE_BYTES_TOTAL.name}{{collective="all_reduce"}}[{WINDOW}]))'
        f' / sum by (rank) (rate({catalog.TRAINING_COLLECTIVE_BUSY_SECONDS_TOTAL.name}{{collective="all_reduce"}}[{WINDOW}])))',
        evaluated,
    )
    assert float(raw[0]["value"][1]) == pytest.approx(algbw, rel=0.25)
    # communication share: the exposed wait over the step time, between 0 and 1
    share = run.query(distributed.JOB_COMMUNICATION_SHARE, now)
    assert len(share) == 1 and 0 < float(share[0]["value"][1]) < 1, share
    # nothing fired from the start to now
    assert distributed_alerts(run, run.marks["started"], time.time()) == []
    run.marks["balanced_end"] = time.time()


def test_2_a_rank_30_percent_slower_in_compute_is_named_the_straggler(run: Run) -> None:
    slow = run.control / f"slow-{SLOW_RANK}"
    slow.write_text("")
    began = time.time()
    firing = wait_for("TrainingRankStraggler", lambda: run.firing("TrainingRankStraggler"), run)
    detected = time.time() - began
    assert [(a["rank"], a["job_id"], a["node"], a["uuid"]) for a in firing] == [
        (str(SLOW_RANK), JOB_ID, f"local-node-{SLOW_RANK // PER_NODE}", gpu_uuid(SLOW_RANK // PER_NODE, SLOW_RANK % PER_NODE))
    ]  # fmt: skip
    # 2 minutes at a 15 s scrape interval are 8 scrape intervals; this config scrapes every second
    # (twice that here for a loaded machine; the stack's own interval is measured in bench/)
    assert detected < 2 * 8 * CFG.scrape_interval_seconds, detected
    slow.unlink()
    wait_for("the straggler alert to resolve", lambda: not run.firing("TrainingRankStraggler"), run)
    seen = distributed_alerts(run, began, time.time())
    assert {(s["metric"]["alertname"], s["metric"].get("rank")) for s in seen} == {
        ("TrainingRankStraggler", str(SLOW_RANK))
    }
    run.marks["straggler_end"] = time.time()


def test_3_a_stopped_rank_hangs_the_job_and_is_named_until_it_continues(run: Run) -> None:
    time.sleep(2 * distributed.window_seconds(CFG))  # windows clean of the straggler phase
    pid = rank_pid(run.control, STOPPED_RANK)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    try:
        firing = wait_for("TrainingJobHung", lambda: run.firing("TrainingJobHung"), run)
        detected = time.time() - stopped
    finally:
        os.kill(pid, signal.SIGCONT)
    assert [(a["rank"], a["job_id"], a["node"]) for a in firing] == [
        (str(STOPPED_RANK), JOB_ID, f"local-node-{STOPPED_RANK // PER_NODE}")
    ], firing
    # the threshold, plus a scrape and an evaluation, plus slack for a loaded machine
    assert HANG_SECONDS - 1 <= detected < HANG_SECONDS + 10, detected
    resumed = time.time()
    wait_for("the hang alert to resolve", lambda: not run.firing("TrainingJobHung"), run, timeout=30)
    time.sleep(2 * distributed.window_seconds(CFG))
    seen = distributed_alerts(run, run.marks.get("straggler_end", stopped), time.time())
    assert {(s["metric"]["alertname"], s["metric"].get("rank")) for s in seen} == {
        ("TrainingJobHung", str(STOPPED_RANK))
    }, seen
    assert resumed - stopped < 60


def test_the_pod_emulation_refuses_a_field_it_does_not_know() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]}
    with pytest.raises(KeyError, match=r"status\.hostIP"):
        container_env(container, {})
