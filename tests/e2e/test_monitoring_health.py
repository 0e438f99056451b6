"""Monitoring the monitoring, end to end: Debian's Prometheus and Alertmanager, three pollers on the
fake NVML library, and local HTTP sinks standing for the receivers.

- poller A is stopped: GPUPollerDown fires, located on its node;
- poller B's driver goes away while it runs ("driver not loaded"): NVMLDown fires;
- poller C starts with GPU 1 lost from its first pass: GPUErrorsDetected fires for that GPU;
- Watchdog reaches the heartbeat sink, and nothing else does (the other receivers get the other
  alerts, never Watchdog).

The rules are the rendered rules with one change: the health alerts' `for` (5 and 10 minutes) is
cut to a few seconds so the test takes seconds, not minutes. The real durations are proven at
their edges by the promtool cases (tests/rules/health_cases.py: silent just before, firing at the
`for`, and a mutation test that fails when GPUPollerDown's `for` is changed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.alertmanager import AlertmanagerServer
from harness.prometheus import PrometheusServer
from harness.webhook_sink import WebhookSink
from observability.alertmanager import ReceiverUrls, alertmanager_config_yaml
from observability.config import ObservabilityConfig
from observability.rules import health, rule_groups
from observability.rules.render import dump_groups

from .conftest import load_harness
from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
SHORT_FOR = "3s"  # instead of 5m / 10m (see the module docstring)
WAIT = 60.0


def _short_for_rules() -> str:
    groups = rule_groups(CFG)
    for group in groups:
        if group["name"] == health.GROUP:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = SHORT_FOR
    return dump_groups(groups)


def start_alertmanager(work: Path, config_text: str) -> AlertmanagerServer:
    """A real Alertmanager serving `config_text`, its files under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "alertmanager.yml").write_text(config_text, encoding="utf-8")
    return AlertmanagerServer(work / "alertmanager.yml", work)


@dataclass
class Health:
    prometheus: PrometheusServer
    sink: WebhookSink
    pollers: dict[str, Any]  # node -> PollerProcess
    nvml_configs: dict[str, Any]  # node -> (FakeNvml, path)

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.prometheus.api.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]

    def wait_firing(self, name: str, **labels: str) -> dict[str, Any]:
        def firing() -> dict[str, Any] | None:
            for alert in self.alerts(name):
                if alert["state"] == "firing" and all(alert["labels"].get(k) == v for k, v in labels.items()):
                    return alert
            return None

        try:
            found: dict[str, Any] = wait_until(f"{name}{labels} firing", firing, WAIT)
        except AssertionError as error:
            raise AssertionError(f"{error}; alerts now: {self.alerts(name)}\n{self.prometheus.log_tail()}") from None
        return found


NODE_A, NODE_B, NODE_C = "gpu-node-a", "gpu-node-b", "gpu-node-c"


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Health]:
    work = tmp_path_factory.mktemp("e2e-health")
    harness = load_harness()
    lib = harness.build_fake_nvml(work / "nvml-lib")
    sink = WebhookSink()
    sink_url = sink.url
    stoppers: list[Any] = [sink.stop]
    try:
        configs: dict[str, Any] = {}
        pollers: dict[str, Any] = {}
        gpus = {NODE_A: 2, NODE_B: 1, NODE_C: 3}
        for node, count in gpus.items():
            config = harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(count)])
            if node == NODE_C:
                config.gpus[1].lost = True  # lost before the poller ever saw it
            path = work / f"{node}.conf"
            config.write(path)
            configs[node] = (config, path)
            poller = harness.PollerProcess(lib, path, work, node=node)
            stoppers.append(poller.stop)
            poller.wait_ready()
            pollers[node] = poller

        receivers = ReceiverUrls(
            page=f"{sink_url}/page",
            chat=f"{sink_url}/chat",
            low_priority=f"{sink_url}/low-priority",
            heartbeat=f"{sink_url}/heartbeat",
        )
        alertmanager = start_alertmanager(work / "alertmanager", alertmanager_config_yaml(CFG, receivers))
        stoppers.append(alertmanager.stop)

        targets = [
            pod_target(poller.port, "monitoring", f"gpu-poller-{node[-1]}", CFG.gpu_poller_service)
            for node, poller in pollers.items()
        ]
        prometheus = annotated_pods_prometheus(
            work, targets, _short_for_rules(), alertmanagers=[f"127.0.0.1:{alertmanager.port}"]
        )
        stoppers.append(prometheus.stop)
        prometheus.start()
        wait_until(
            "every poller scraped once with NVML up",
            lambda: len(prometheus.api.query("ml_gpu_poller_nvml_up == 1")) == len(pollers),
            WAIT,
        )
        yield Health(prometheus, sink, pollers, configs)
    finally:
        for stop in reversed(stoppers):
            stop()


def test_a_stopped_poller_fires_gpu_poller_down_on_its_node(monitored: Health) -> None:
    monitored.pollers[NODE_A].stop()
    alert = monitored.wait_firing(health.POLLER_DOWN, node=NODE_A)
    assert alert["labels"]["pod"] == "gpu-poller-a"
    assert alert["labels"]["severity"] == "high"
    assert {a["labels"]["node"] for a in monitored.alerts(health.POLLER_DOWN)} == {NODE_A}


def test_driver_not_loaded_while_the_poller_runs_fires_nvml_down(monitored: Health) -> None:
    harness = load_harness()
    config, path = monitored.nvml_configs[NODE_B]
    not_loaded = harness.NVML_ERROR_DRIVER_NOT_LOADED
    config.init_error = not_loaded  # re-initialisation fails too
    config.gpus[0].errors = {"utilization": not_loaded}  # the running session's next call fails
    config.write(path)
    alert = monitored.wait_firing(health.NVML_DOWN, node=NODE_B)
    assert alert["labels"]["severity"] == "high"
    assert {a["labels"]["node"] for a in monitored.alerts(health.NVML_DOWN)} == {NODE_B}


def test_a_gpu_lost_from_the_first_pass_fires_gpu_errors_detected(monitored: Health) -> None:
    alert = monitored.wait_firing("GPUErrorsDetected", node=NODE_C, gpu_id="1")
    assert alert["labels"]["severity"] == "critical"
    assert "uuid" not in alert["labels"]  # never identified: counted under its index alone
    assert "lost before its UUID was read" in alert["annotations"]["description"]
    assert [a["labels"]["gpu_id"] for a in monitored.alerts("GPUErrorsDetected")] == ["1"]
    missing = monitored.wait_firing(health.GPUS_NOT_ANSWERING, node=NODE_C)
    assert float(missing["value"]) == 1


def test_watchdog_reaches_the_heartbeat_receiver_and_nothing_else_does(monitored: Health) -> None:
    sink = monitored.sink
    wait_until("Watchdog at the heartbeat receiver", lambda: "heartbeat" in sink.receivers_of(health.WATCHDOG), WAIT)
    # Other notifications flow too (the critical route waits 10 s): the page receiver gets the lost GPU.
    wait_until("the lost GPU paged", lambda: "GPUErrorsDetected" in sink.alertnames("page"), WAIT)
    assert sink.receivers_of(health.WATCHDOG) == {"heartbeat"}
    assert sink.alertnames("heartbeat") == {health.WATCHDOG}
    assert all(status == "firing" for path, _, status in sink.alerts() if path == "heartbeat")
