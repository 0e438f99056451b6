"""Jobs own their GPUs, end to end on Debian's Prometheus 2.42.

The poller runs on the fake NVML library with two GPUs; the synthetic trainer is given the first
one's UUID the way the NVIDIA device plugin does it (`NVIDIA_VISIBLE_DEVICES`, no NVML in its
environment) and keeps it at low utilization. Prometheus loads the rendered rules, with the `for`
of GPUUtilizationLow and GPUTemperatureHigh cut to 3 s so the test does not wait 10 minutes (their
durations are proven by promtool in tests/rules); the join, the labels and the silence of the
unheld GPU are what this proves on a real server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from harness.prometheus import PrometheusServer
from harness.trainer_process import TrainerProcess
from observability.config import ObservabilityConfig
from observability.rules import jobs, rule_groups
from observability.rules.render import dump_groups

from .conftest import load_harness
from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
NODE = "e2e-attribution-node"
JOB_ID = "e2e-held-job"
HELD = "GPU-e2e00000-0000-0000-0000-000000000000"
UNHELD = "GPU-e2e00000-0000-0000-0000-000000000001"
SHORT_FOR = {"GPUUtilizationLow": "3s", "GPUTemperatureHigh": "3s"}


def rules_with_short_for() -> str:
    groups = rule_groups(CFG)
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") in SHORT_FOR:
                rule["for"] = SHORT_FOR[rule["alert"]]
    return dump_groups(groups)


@dataclass
class Attribution:
    prometheus: PrometheusServer
    harness: ModuleType
    nvml_config: Path

    def alerts(self, name: str) -> list[dict[str, Any]]:
        alerts = self.prometheus.api.get("/api/v1/alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == name]

    def firing(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts(name) if a["state"] == "firing"]

    def value(self, expr: str) -> float | None:
        answer = self.prometheus.api.query(expr)
        return float(answer[0]["value"][1]) if len(answer) == 1 else None

    def gpus(self, held_util: int, unheld_util: int, held_temp: int, unheld_temp: int) -> None:
        gpu = self.harness.FakeGpu
        self.harness.FakeNvml(
            gpus=[
                gpu(uuid=HELD, util_gpu=held_util, temperature=held_temp, power_mw=250_000),
                gpu(uuid=UNHELD, util_gpu=unheld_util, temperature=unheld_temp, power_mw=60_000),
            ]
        ).write(self.nvml_config)


@pytest.fixture(scope="module")
def attribution(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attribution]:
    work = tmp_path_factory.mktemp("e2e-attribution")
    harness = load_harness()
    lib = harness.build_fake_nvml(work / "nvml-lib")
    nvml_config = work / "nvml.conf"
    stoppers: list[Any] = []
    try:
        state = Attribution(None, harness, nvml_config)  # type: ignore[arg-type]
        state.gpus(held_util=12, unheld_util=0, held_temp=50, unheld_temp=45)
        poller = harness.PollerProcess(lib, nvml_config, work, node=NODE)
        stoppers.append(poller.stop)
        trainer = TrainerProcess(
            work,
            "--job-id",
            JOB_ID,
            "--model-type",
            "dqn",
            "--folds",
            "1000",
            "--epoch-seconds",
            "0.5",
            env={"NVIDIA_VISIBLE_DEVICES": HELD, "LD_LIBRARY_PATH": ""},
        )
        stoppers.append(trainer.stop)
        poller.wait_ready()
        trainer.wait_ready()
        targets = [
            pod_target(poller.port, "monitoring", "gpu-poller-e2e", CFG.gpu_poller_service),
            pod_target(trainer.port, "training", "train-e2e-held", CFG.training_job_service),
        ]
        prometheus = annotated_pods_prometheus(work, targets, rules_with_short_for())
        stoppers.append(prometheus.stop)
        prometheus.start()
        state.prometheus = prometheus
        yield state
    finally:
        for stop in reversed(stoppers):
            stop()


def test_the_rules_under_test_differ_from_the_rendered_ones_only_in_those_two_fors():
    shortened = yaml.safe_load(rules_with_short_for())["groups"]
    original = rule_groups(CFG)
    for group, rendered in zip(shortened, original, strict=True):
        for rule, real in zip(group["rules"], rendered["rules"], strict=True):
            if rule.get("alert") in SHORT_FOR:
                assert real["for"] != rule.pop("for") and real.pop("for")
            assert rule == real


def test_the_trainer_exports_the_gpu_it_was_given(attribution: Attribution) -> None:
    info = wait_until(
        "the job's GPU info",
        lambda: attribution.prometheus.api.query(catalog.TRAINING_JOB_GPU_INFO.name),
    )
    assert [(s["metric"]["job_id"], s["metric"]["model_type"], s["metric"]["uuid"]) for s in info] == [
        (JOB_ID, "dqn", HELD)
    ]


def test_the_jobs_recorded_utilization_is_its_gpus(attribution: Attribution) -> None:
    job = f'{jobs.JOB_UTILIZATION_AVG.record}{{job_id="{JOB_ID}"}}'
    gpu = f'{catalog.GPU_UTILIZATION_PERCENT.name}{{uuid="{HELD}"}}'
    wait_until("the job's recorded utilization", lambda: attribution.value(job) is not None)
    assert attribution.value(job) == attribution.value(gpu) == 12
    assert attribution.value(f'{jobs.JOB_GPUS.record}{{job_id="{JOB_ID}"}}') == 1
    held = attribution.prometheus.api.query(jobs.HELD_UTILIZATION.record)
    assert [(s["metric"]["uuid"], s["metric"]["node"], s["metric"]["job_id"]) for s in held] == [(HELD, NODE, JOB_ID)]
    assert attribution.value(jobs.FLEET_HELD.record) == 1
    assert attribution.value(jobs.FLEET_UNHELD.record) == 1
    assert attribution.value(jobs.FLEET_HELD_IDLE) == 1
    # The energy counter grows with the held GPU's 250 W, and the job's energy rate is its GPU's.
    energy = f'{catalog.GPU_ENERGY_JOULES_TOTAL.name}{{uuid="{HELD}"}}'
    watts = wait_until("two energy samples", lambda: attribution.value(f"irate({energy}[10s])"))
    assert watts == pytest.approx(250, rel=0.2)
    recorded = f'{jobs.JOB_ENERGY_RATE.record}{{job_id="{JOB_ID}"}}'
    wait_until("the job's energy rate", lambda: attribution.prometheus.api.query(recorded))
    time.sleep(4)
    at = time.time() - 3  # settled: the last evaluation before it is at most 1 s older
    (job_rate,) = attribution.prometheus.api.query(recorded, at)
    (gpu_rate,) = attribution.prometheus.api.query(f"rate({energy}[{jobs.ENERGY_RATE_WINDOW}])", at)
    # While the 2m window fills, the rate grows by about 250 W / 120 s each second.
    assert float(job_rate["value"][1]) == pytest.approx(float(gpu_rate["value"][1]), abs=5)
    assert float(job_rate["value"][1]) > 0


def test_utilization_low_fires_for_the_job_and_never_for_the_idle_unheld_gpu(attribution: Attribution) -> None:
    (alert,) = wait_until("GPUUtilizationLow firing", lambda: attribution.firing("GPUUtilizationLow"), timeout=60)
    assert {k: v for k, v in alert["labels"].items() if k != "severity"} == {
        "alertname": "GPUUtilizationLow",
        "model_type": "dqn",
        "job_id": JOB_ID,
    }
    description = alert["annotations"]["description"]
    assert f"Job {JOB_ID} (dqn)" in description and f"{NODE}: 1 GPU(s);" in description
    # The unheld GPU idles at 0% the whole time: no utilization alert names it, pending or firing.
    assert len(attribution.alerts("GPUUtilizationLow")) == 1
    assert attribution.alerts("GPUUtilizationCritical") == []


def test_temperature_high_fires_for_a_hot_gpu_held_or_not(attribution: Attribution) -> None:
    attribution.gpus(held_util=12, unheld_util=0, held_temp=91, unheld_temp=92)

    def both() -> list[dict[str, Any]] | None:
        firing = attribution.firing("GPUTemperatureHigh")
        return firing if len(firing) == 2 else None

    alerts = {a["labels"]["uuid"]: a["labels"] for a in wait_until("GPUTemperatureHigh on both GPUs", both, 60)}
    assert alerts[HELD]["job_id"] == JOB_ID and alerts[HELD]["model_type"] == "dqn"
    assert "job_id" not in alerts[UNHELD] and alerts[UNHELD]["node"] == NODE
    assert alerts[UNHELD]["gpu_id"] == "1"
    time.sleep(2)
    assert len(attribution.alerts("GPUUtilizationLow")) == 1  # still only the job's
