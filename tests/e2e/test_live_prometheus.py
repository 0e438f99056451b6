"""End to end on Debian's Prometheus: the poller on the fake NVML library and the synthetic trainer
scraped through the project's own scrape discovery rules, the rendered alert and recording rules,
and every dashboard query.

One Prometheus for the module (1 s scrape and evaluation, temporary TSDB), fed by: the poller with
a normal and a hot (90 C) fake GPU, a long-running trainer that gets a NaN and a failed checkpoint
by signal once it is scraped, a short trainer that has completed, and an (empty) target standing
for the ML training service. Targets come from a file-discovery group carrying the
`__meta_kubernetes_*` labels a pod would have, so `annotation_relabel_configs()` sets `namespace`,
`pod` and `service` exactly as in the cluster.
"""

from __future__ import annotations

import json
import math
import re
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dashboards import build_all
from dashboards.queries import PanelQuery, duration_seconds, panel_queries
from foxhunt_trainer import MetricsServer
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Producer
from foxhunt_trainer.trainer_env import FINAL_SCRAPE_WAIT_ENV
from harness.prometheus import PrometheusServer, config_yaml
from harness.trainer_process import TrainerProcess
from observability.config import ObservabilityConfig
from observability.rules import rule_groups, rules_file_yaml
from observability.scrape_config import (
    JOB_NAME,
    PATH_ANNOTATION,
    PORT_ANNOTATION,
    SCRAPE_ANNOTATION,
    SERVICE_LABEL,
    annotation_label,
    annotation_relabel_configs,
    pod_label,
)

from .conftest import load_harness

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
NODE = "e2e-node"
FAULTY_JOB = "e2e-faulty-job"
DONE_JOB = "e2e-done-job"
FED_BY = {Producer.GPU_POLLER, Producer.TRAINING_JOB, Producer.PROMETHEUS}
WAIT = 45.0  # seconds; generous for a loaded 2-core machine


def pod_target(port: int, namespace: str, pod: str, service: str) -> dict[str, Any]:
    """A file-discovery target group that looks like an annotated, running Kubernetes pod."""
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_ip": "127.0.0.1",
            "__meta_kubernetes_pod_phase": "Running",
            pod_label(SERVICE_LABEL): service,
            annotation_label(SCRAPE_ANNOTATION): "true",
            annotation_label(PORT_ANNOTATION): str(port),
            annotation_label(PATH_ANNOTATION): "/metrics",
        },
    }


@dataclass
class Stack:
    prometheus: PrometheusServer
    faulty: TrainerProcess
    pods: dict[str, str]  # pod -> service

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.prometheus.api.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]

    def wait_alert(self, name: str, state: str, **labels: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            seen = self.alerts(name)
            for alert in seen:
                if alert["state"] == state and all(alert["labels"].get(k) == v for k, v in labels.items()):
                    return alert
            time.sleep(0.5)
        raise AssertionError(f"{name}{labels} not {state} within {WAIT}s; saw {seen}\n{self.prometheus.log_tail()}")


def annotated_pods_prometheus(
    work: Path, targets: list[dict[str, Any]], rules_yaml: str, alertmanagers: Sequence[str] = ()
) -> PrometheusServer:
    """A Prometheus (not started) that scrapes `targets` every second through the rendered annotation
    relabelling and evaluates `rules_yaml` every second."""
    (work / "targets.json").write_text(json.dumps(targets))
    scrape = {
        "job_name": JOB_NAME,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "file_sd_configs": [{"files": [str(work / "targets.json")], "refresh_interval": "1s"}],
        "relabel_configs": annotation_relabel_configs(),
    }
    rules_path = work / "prometheus" / "rules.yml"
    config = config_yaml(
        [scrape], [str(rules_path)], scrape_interval="1s", evaluation_interval="1s", alertmanagers=alertmanagers
    )
    return PrometheusServer(work / "prometheus", config, {"rules.yml": rules_yaml})


def wait_until(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("e2e-live")
    harness = load_harness()
    lib = harness.build_fake_nvml(work / "nvml-lib")
    nvml_config = work / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu(), harness.hot_gpu(90)]).write(nvml_config)

    stoppers: list[Any] = []
    try:
        poller = harness.PollerProcess(lib, nvml_config, work, node=NODE)
        stoppers.append(poller.stop)
        faulty = TrainerProcess(
            work,
            "--job-id",
            FAULTY_JOB,
            "--model-type",
            "dqn",
            "--folds",
            "1000",
            "--epochs-per-fold",
            "4",
            "--epoch-seconds",
            "0.25",
            "--checkpoint-every",
            "1",
        )
        stoppers.append(faulty.stop)
        done = TrainerProcess(
            work,
            "--job-id",
            DONE_JOB,
            "--model-type",
            "ppo",
            "--folds",
            "2",
            "--epochs-per-fold",
            "2",
            "--epoch-seconds",
            "0.05",
            "--linger",
            "-1",
        )
        stoppers.append(done.stop)
        service = MetricsServer(CollectorRegistry(), 0, "127.0.0.1")  # stands for the ML training service
        stoppers.append(service.close)
        poller.wait_ready()
        faulty.wait_ready()
        done.wait_ready()

        pods = {
            "gpu-poller-e2e": CFG.gpu_poller_service,
            "train-e2e-faulty": CFG.training_job_service,
            "train-e2e-done": CFG.training_job_service,
            "ml-training-service-e2e": CFG.training_service,
        }
        targets = [
            pod_target(poller.port, "monitoring", "gpu-poller-e2e", CFG.gpu_poller_service),
            pod_target(faulty.port, "training", "train-e2e-faulty", CFG.training_job_service),
            pod_target(done.port, "training", "train-e2e-done", CFG.training_job_service),
            pod_target(service.port, "ml", "ml-training-service-e2e", CFG.training_service),
        ]
        prometheus = annotated_pods_prometheus(work, targets, rules_file_yaml(CFG))
        stoppers.append(prometheus.stop)
        prometheus.start()

        def all_up() -> bool:
            up = prometheus.api.query(catalog.UP.name)
            return len(up) == len(pods) and all(s["value"][1] == "1" for s in up)

        wait_until("every target's first `up` sample", all_up)
        # Scraped with its counters at 0: now the faults.
        faulty.signal(signal.SIGUSR1)
        faulty.signal(signal.SIGUSR2)
        yield Stack(prometheus, faulty, pods)
    finally:
        for stop in reversed(stoppers):
            stop()


def test_scrape_discovery_sets_namespace_pod_and_service(stack):
    up = stack.prometheus.api.query(catalog.UP.name)
    assert {s["metric"]["pod"]: s["metric"]["service"] for s in up} == stack.pods
    assert {s["metric"]["job"] for s in up} == {JOB_NAME}
    temperature = stack.prometheus.api.query(catalog.GPU_TEMPERATURE_CELSIUS.name)
    assert {(s["metric"]["node"], s["metric"]["gpu_id"], s["value"][1]) for s in temperature} == {
        (NODE, "0", "40"),
        (NODE, "1", "90"),
    }
    assert {s["metric"]["service"] for s in temperature} == {CFG.gpu_poller_service}
    loss = stack.prometheus.api.query(f'{catalog.TRAINING_LOSS.name}{{job_id="{FAULTY_JOB}"}}')
    assert [(s["metric"]["namespace"], s["metric"]["service"]) for s in loss] == [
        ("training", CFG.training_job_service)
    ]


def test_every_rule_is_loaded_and_healthy(stack):
    expected = {(g["name"], r.get("record") or r.get("alert")) for g in rule_groups(CFG) for r in g["rules"]}

    def evaluated() -> list[dict[str, Any]] | None:
        groups = stack.prometheus.api.get("/api/v1/rules")["groups"]
        rules = [dict(r, group=g["name"]) for g in groups for r in g["rules"]]
        return rules if all(not r["lastEvaluation"].startswith("0001") for r in rules) else None

    rules = wait_until("every rule evaluated once", evaluated)
    assert {(r["group"], r["name"]) for r in rules} == expected
    unhealthy = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert unhealthy == []


def test_an_injected_nan_fires_training_nan_detected(stack):
    alert = stack.wait_alert("TrainingNaNDetected", "firing", job_id=FAULTY_JOB, tensor_type="loss")
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["namespace"] == "training"


def test_a_failed_checkpoint_fires_checkpoint_save_failures(stack):
    alert = stack.wait_alert("CheckpointSaveFailures", "firing", job_id=FAULTY_JOB, error_type="io_error")
    assert alert["labels"]["severity"] == "critical"


def test_a_hot_gpu_makes_gpu_temperature_high_pending(stack):
    stack.wait_alert("GPUTemperatureHigh", "pending", node=NODE, gpu_id="1")
    assert {a["labels"]["gpu_id"] for a in stack.alerts("GPUTemperatureHigh")} == {"1"}


def test_healthy_things_raise_no_alert(stack):
    stack.wait_alert("TrainingNaNDetected", "firing", job_id=FAULTY_JOB)  # evaluation is under way
    assert stack.alerts("MLTrainingServiceDown") == []
    assert [a for a in stack.alerts("TrainingNaNDetected") if a["labels"]["job_id"] == DONE_JOB] == []
    assert stack.alerts("GPUMemoryExhausted") == []


# --- every dashboard query ---------------------------------------------------------------------
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A comparison without `bool` filters: an empty answer is what a healthy system gives.
_FILTER = re.compile(r"(==|!=|>=|<=|(?<![=!<>-])>(?!=)|(?<![=!<>])<(?![=-]))(?!\s*bool)")


def prometheus_queries() -> list[PanelQuery]:
    return [q for d in build_all(CFG).values() for q in panel_queries(d) if q.datasource_type == "prometheus"]


def raw_inputs(expr: str) -> set[str]:
    """The raw series names an expression reads, through the recording rules it uses."""
    recorded = {str(r["record"]): str(r["expr"]) for g in rule_groups(CFG) for r in g["rules"] if "record" in r}
    names: set[str] = set()
    pending = [expr]
    while pending:
        for token in _NAME.findall(pending.pop()):
            if token in recorded:
                pending.append(recorded.pop(token))
            else:
                try:
                    catalog.by_name(token)
                except KeyError:
                    continue
                names.add(token)
    return names


def test_raw_inputs_follow_recording_rules():
    expr = "histogram_quantile(0.95, sum by (le) (model_type:ml_checkpoint_save_duration_seconds_bucket:rate5m))"
    assert raw_inputs(expr) == {catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket}
    assert raw_inputs("sum(up)") == {"up"}


# Queries whose inputs the synthetic trainers export but whose answer needs what only a real
# training loop gives; tests/e2e/test_real_training.py runs real PyTorch jobs and checks them.
FED_BY_REAL_RUNS = {
    # optimizer steps and the loader's data wait (the PyTorch integration)
    ("foxhunt-training-cockpit", "Time per Step: Data Wait and Compute", "A"),
    # a job that ends after Prometheus first scraped it (the done trainer ends before)
    ("foxhunt-training-cockpit", "Training Job Duration", "B"),
    ("foxhunt-training-cockpit", "Training Job Duration", "C"),
    # a rank's compute and collective time per step, against the job's other ranks: the ranks of a DDP job
    # (tests/e2e/test_distributed_training.py)
    ("foxhunt-training-cockpit", "Compute per Step by Rank", "A"),
    ("foxhunt-training-cockpit", "Collective Wait by Rank", "A"),
    ("foxhunt-training-cockpit", "Straggler Status: Compute above the Median Rank", "A"),
    ("foxhunt-training-cockpit", "Ranks and Where They Run", "A"),
    ("foxhunt-training-cockpit", "Communication Share of the Step", "A"),
}


def fed(query: PanelQuery, present: set[str]) -> bool:
    """Whether the poller and trainers feed every input of the query (so it must return a series)."""
    inputs = raw_inputs(query.substituted)
    return (
        (query.dashboard_uid, query.panel_title, query.ref_id) not in FED_BY_REAL_RUNS
        and bool(inputs)
        and inputs <= present
        and all(catalog.by_name(n).producer in FED_BY for n in inputs)
        and not _FILTER.search(query.substituted)
    )


def with_data(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The series of a query answer that have at least one value that is not NaN."""
    return [
        series
        for series in result
        if any(not math.isnan(float(v)) for _, v in (series.get("values") or [series["value"]]))
    ]


def test_with_data_treats_nan_only_and_empty_answers_as_no_data():
    nan_only = [{"metric": {}, "values": [[1, "NaN"], [2, "NaN"]]}]
    assert with_data([]) == [] and with_data(nan_only) == []
    assert with_data([{"metric": {}, "value": [1, "NaN"]}, {"metric": {}, "value": [1, "0"]}]) == [
        {"metric": {}, "value": [1, "0"]}
    ]


def test_every_dashboard_query_runs_and_the_fed_ones_return_series(stack):
    api = stack.prometheus.api
    queries = prometheus_queries()
    assert len(queries) > 50
    present = set(api.get("/api/v1/label/__name__/values"))
    must_have_data = [q for q in queries if fed(q, present)]
    assert len(must_have_data) > 40, "the poller and the trainers should feed most panels"

    def run(query: PanelQuery) -> tuple[int, int]:
        """Series with data (a number that is not NaN: a NaN-only answer draws nothing) in the
        instant and the range answer."""
        now = time.time()
        instant = api.query(query.substituted, now)  # raises PrometheusError on any error
        ranged = api.query_range(query.substituted, now - 120, now, query.step)
        assert duration_seconds(query.step) > 0
        return len(with_data(instant)), len(with_data(ranged))

    empty = [q for q in queries if run(q) == (0, 0)]
    # Rates and recorded series need a few evaluations: give the fed ones time to fill.
    deadline = time.monotonic() + WAIT
    waiting = [q for q in empty if q in must_have_data]
    while waiting and time.monotonic() < deadline:
        time.sleep(1)
        waiting = [q for q in waiting if 0 in run(q)]
    assert [(q.dashboard_uid, q.panel_title, q.ref_id, q.substituted) for q in waiting] == []


def test_a_job_that_ends_between_scrapes_still_reports_its_duration(tmp_path):
    """The job template's final-scrape wait: a trainer that finishes long before Prometheus' next
    scrape (every 3 s here) stays until that scrape has read its duration and status, then exits."""
    trainer = TrainerProcess(
        tmp_path,
        "--job-id",
        "e2e-final",
        "--model-type",
        "tft",
        "--folds",
        "1",
        "--epochs-per-fold",
        "1",
        "--epoch-seconds",
        "0.01",
        env={FINAL_SCRAPE_WAIT_ENV: "20"},
    )
    try:
        trainer.wait_ready()
        target = pod_target(trainer.port, "training", "train-e2e-final", CFG.training_job_service)
        (tmp_path / "targets.json").write_text(json.dumps([target]))
        scrape = {
            "job_name": JOB_NAME,
            "scrape_interval": "3s",
            "file_sd_configs": [{"files": [str(tmp_path / "targets.json")], "refresh_interval": "1s"}],
            "relabel_configs": annotation_relabel_configs(),
        }
        with PrometheusServer(tmp_path / "prometheus", config_yaml([scrape], [])) as prometheus:
            assert trainer.process.wait(timeout=30) == 0  # exits once scraped, well within the wait
            duration = f'{catalog.TRAINING_JOB_DURATION_SECONDS.count}{{pod="train-e2e-final", status="completed"}}'
            answer = wait_until("the final scrape", lambda: prometheus.api.query(duration), timeout=10)
            assert answer[0]["value"][1] == "1"
    finally:
        trainer.stop()
