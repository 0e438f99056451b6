"""Two jobs on one time-sliced GPU, end to end on Debian's Prometheus: the poller on the fake NVML
library (one H100 at 99% with 60 GB in use), two real PyTorch processes holding that GPU, each
reporting its own device memory (40 GB and 20 GB) and computing 90% and 5% of its time. Prometheus
loads the rendered rules with GPUUtilizationLow's `for` cut to 3 s (its 10 minutes are proven by
promtool in tests/rules)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from dashboards import build_all
from dashboards.queries import panel_queries, substitute_variables
from foxhunt_trainer.contract import catalog
from harness.ports import free_port
from harness.prometheus import PrometheusServer
from observability.config import ObservabilityConfig
from observability.rules import goodput, jobs, rule_groups
from observability.rules.render import dump_groups

from .conftest import load_harness
from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until

pytestmark = pytest.mark.slow  # starts a poller, two PyTorch processes and Prometheus

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
NODE = "e2e-shared-node"
SHARED = "GPU-e2e5a4ed-0000-0000-0000-000000000000"
JOBS = {"nb-busy": (40e9, 0.9), "nb-idle": (20e9, 0.05)}  # own memory, share of time computing


def rules_with_short_for() -> str:
    groups = rule_groups(CFG)
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") == "GPUUtilizationLow":
                rule["for"] = "3s"
    return dump_groups(groups)


@dataclass
class Shared:
    prometheus: PrometheusServer

    def by_job(self, expr: str) -> dict[str, float]:
        return {s["metric"]["job_id"]: float(s["value"][1]) for s in self.prometheus.api.query(expr)}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    work = tmp_path_factory.mktemp("e2e-shared-gpu")
    harness = load_harness()
    lib = harness.build_fake_nvml(work / "nvml-lib")
    config = work / "nvml.conf"
    gpu = harness.FakeGpu(uuid=SHARED, util_gpu=99, memory_used=60_000_000_000, memory_total=80_000_000_000)
    harness.FakeNvml(gpus=[gpu]).write(config)
    stoppers: list[Any] = []
    try:
        poller = harness.PollerProcess(lib, config, work, node=NODE)
        stoppers.append(poller.stop)
        targets = []
        for name, (reserved, share) in JOBS.items():
            port = free_port()
            command = [sys.executable, "-m", "tests.e2e.shared_gpu_job", "--port", str(port), "--job-id", name]
            command += ["--uuid", SHARED, "--reserved-bytes", str(reserved), "--compute-share", str(share)]
            trainer = harness.ServedProcess(name, command, work, {"LD_LIBRARY_PATH": "", **_env()}, port)
            stoppers.append(trainer.stop)
            trainer.wait_ready(60.0)
            targets.append(pod_target(port, "training", f"train-{name}", CFG.training_job_service))
        poller.wait_ready()
        targets.append(pod_target(poller.port, "monitoring", "gpu-poller-e2e", CFG.gpu_poller_service))
        prometheus = annotated_pods_prometheus(work, targets, rules_with_short_for())
        stoppers.append(prometheus.stop)
        prometheus.start()
        yield Shared(prometheus)
    finally:
        for stop in reversed(stoppers):
            stop()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAKE_NVML_", "NVIDIA_"))}


def test_the_gpu_is_marked_shared_by_two_jobs(shared: Shared) -> None:
    holders = f'{jobs.GPU_HOLDERS.record}{{uuid="{SHARED}"}} == 2'
    assert wait_until("two jobs holding the GPU", lambda: shared.prometheus.api.query(holders))
    assert wait_until("shared GPUs per job", lambda: shared.by_job(jobs.JOB_SHARED_GPUS.record)) == {
        "nb-busy": 1.0,
        "nb-idle": 1.0,
    }


def test_each_job_has_its_own_memory_and_share_of_the_gpu(shared: Shared) -> None:
    own = wait_until("each job's own memory", lambda: len(shared.by_job(jobs.JOB_GPU_RESERVED.record)) == 2)
    assert own
    assert shared.by_job(jobs.JOB_GPU_RESERVED.record) == {"nb-busy": 40e9, "nb-idle": 20e9}
    ratio = wait_until("each job's memory ratio", lambda: len(shared.by_job(jobs.HELD_MEMORY_RATIO.record)) == 2)
    assert ratio
    assert shared.by_job(jobs.HELD_MEMORY_RATIO.record) == {"nb-busy": 0.5, "nb-idle": 0.25}
    # the training cockpit's "Job's Own GPU Memory" panel, for each job
    for job, expected in (("nb-busy", 40e9), ("nb-idle", 20e9)):
        panel = f'{jobs.JOB_GPU_RESERVED.record}{{job_id="{job}"}}'
        assert [float(s["value"][1]) for s in shared.prometheus.api.query(panel)] == [expected]


def test_no_job_is_given_the_devices_utilization_and_the_idle_one_is_judged_by_its_own_time(shared: Shared) -> None:
    device = f'{catalog.GPU_UTILIZATION_PERCENT.name}{{uuid="{SHARED}"}}'
    wait_until("the device's utilization", lambda: shared.prometheus.api.query(device))
    assert float(shared.prometheus.api.query(device)[0]["value"][1]) == 99

    def settled() -> dict[str, float] | None:
        found = shared.by_job(jobs.JOB_UTILIZATION_AVG.record)
        return found if len(found) == 2 and found["nb-busy"] > 60 else None

    utilization = wait_until("each job's utilization from its time split", settled, timeout=120)
    assert 60 < utilization["nb-busy"] < 99 and utilization["nb-idle"] < 20, utilization
    assert shared.prometheus.api.query(jobs.HELD_UTILIZATION.record) == []  # the 99% is no one job's
    busy = wait_until("both jobs' GPU busyness", lambda: len(shared.by_job(goodput.GPU_BUSY.record)) == 2)
    assert busy
    sources = {s["metric"]["source"] for s in shared.prometheus.api.query(goodput.GPU_BUSY.record)}
    assert sources == {"job_time_split"}

    def low() -> list[str]:
        alerts = shared.prometheus.api.get("/api/v1/alerts")["alerts"]
        return [
            a["labels"]["job_id"]
            for a in alerts
            if a["labels"]["alertname"] == "GPUUtilizationLow" and a["state"] == "firing"
        ]

    assert wait_until("GPUUtilizationLow for the idle job", low, timeout=60) == ["nb-idle"]
    verdicts = {s["metric"]["job_id"]: s["metric"]["verdict"] for s in shared.prometheus.api.query(goodput.VERDICT)}
    assert verdicts.get("nb-idle") == goodput.VERDICT_UNDERUTILIZED


def _cockpit_panel(title: str, job: str) -> list[str]:
    """The training cockpit's queries of the panel `title`, with $job_id set to `job`."""
    (cockpit,) = [d for uid, d in build_all(CFG).items() if uid == "foxhunt-training-cockpit"]
    queries = [q for q in panel_queries(cockpit) if q.panel_title == title and q.datasource_type == "prometheus"]
    assert queries, title
    return [substitute_variables(q.expr, {**q.variables, "job_id": job, "model_type": ".*"}) for q in queries]


def test_the_cockpit_panels_show_each_job_its_own_share_and_say_the_gpu_is_shared(shared: Shared) -> None:
    wait_until("each job's memory ratio", lambda: len(shared.by_job(jobs.HELD_MEMORY_RATIO.record)) == 2)
    for job, (reserved, _) in JOBS.items():
        (own,) = _cockpit_panel("Job's Own GPU Memory", job)
        assert [float(s["value"][1]) for s in shared.prometheus.api.query(own)] == [reserved]
        (memory,) = _cockpit_panel("Job GPU Memory Used", job)
        assert [float(s["value"][1]) for s in shared.prometheus.api.query(memory)] == [reserved / 80e9]
        (count,) = _cockpit_panel("Shared GPUs (Time-Sliced)", job)
        assert [float(s["value"][1]) for s in shared.prometheus.api.query(count)] == [1.0]
        # the per-GPU utilization panel draws no line for the shared GPU: the device's 99% is no one job's
        (utilization,) = _cockpit_panel("Job GPU Utilization", job)
        assert shared.prometheus.api.query(utilization) == []


def test_the_rules_under_test_differ_from_the_rendered_ones_only_in_that_for() -> None:
    shortened = yaml.safe_load(rules_with_short_for())["groups"]
    for group, rendered in zip(shortened, rule_groups(CFG), strict=True):
        for rule, real in zip(group["rules"], rendered["rules"], strict=True):
            if rule.get("alert") == "GPUUtilizationLow":
                assert real.pop("for") != rule.pop("for")
            assert rule == real
