"""Alertmanager routing and inhibition, checked with amtool and a real Alertmanager."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.alertmanager import AlertmanagerServer, alertmanager_tool, running_alertmanager
from infra.settings import available_stacks, read_stack_config, validate_stack
from observability import alertmanager as am
from observability.alertmanager import (
    INHIBITIONS,
    ReceiverUrls,
    alertmanager_config,
    alertmanager_config_crd_spec,
    alertmanager_config_yaml,
    receiver_secret_data,
)
from observability.config import ObservabilityConfig
from observability.notifications import TEMPLATE_FILE, template_text
from observability.rules import alert_rules

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig()
RECEIVERS = ReceiverUrls(
    page="https://hooks.example.invalid/page",
    chat="https://hooks.example.invalid/chat",
    low_priority="https://hooks.example.invalid/low-priority",
    heartbeat="https://hooks.example.invalid/heartbeat",
)
EXPECTED_RECEIVER = {"critical": "page", "high": "chat", "warning": "chat", "info": "low-priority"}


def expected_receiver(alert_name: str, severity: str) -> str:
    return "heartbeat" if alert_name == "Watchdog" else EXPECTED_RECEIVER[severity]


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = tmp_path_factory.mktemp("alertmanager") / "alertmanager.yml"
    path.write_text(alertmanager_config_yaml(CFG, RECEIVERS), encoding="utf-8")
    return path


def _routes_test(config_file: Path, expected: str, labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            alertmanager_tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={config_file}",
            f"--verify.receivers={expected}",
            *(f"{k}={v}" for k, v in labels.items()),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_amtool_check_config_passes(config_file):
    proc = subprocess.run(
        [alertmanager_tool("amtool"), "check-config", str(config_file)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(am.INHIBITIONS)} inhibit rules" in proc.stdout and "4 receivers" in proc.stdout


def test_amtool_check_config_passes_for_every_stack(tmp_path):
    for stack in available_stacks():
        settings = validate_stack(read_stack_config(stack))
        alerting = settings.alerting
        receivers = ReceiverUrls(
            page=alerting.page_webhook_url,
            chat=alerting.chat_webhook_url,
            low_priority=alerting.low_priority_webhook_url,
            heartbeat=alerting.heartbeat_url,
            slack_api_url=alerting.slack_api_url,
            pagerduty_routing_key=alerting.pagerduty_routing_key,
        )
        path = tmp_path / f"{stack}.yml"
        path.write_text(alertmanager_config_yaml(settings.observability_config(), receivers), encoding="utf-8")
        (tmp_path / TEMPLATE_FILE).write_text(template_text(), encoding="utf-8")
        proc = subprocess.run(
            [alertmanager_tool("amtool"), "check-config", str(path)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, f"{stack}: {proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(("severity", "receiver"), [*EXPECTED_RECEIVER.items(), ("", "chat"), ("page-me", "chat")])
def test_routes_by_severity(config_file, severity, receiver):
    labels = {"alertname": "SomeAlert", "namespace": "foxhunt"} | ({"severity": severity} if severity else {})
    proc = _routes_test(config_file, receiver, labels)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == receiver


def test_routes_test_fails_on_a_wrong_receiver(config_file):
    proc = _routes_test(config_file, "page", {"alertname": "GPUUtilizationLow", "severity": "info"})
    assert proc.returncode != 0


@pytest.mark.parametrize("alert", alert_rules(CFG), ids=lambda a: a.name)
def test_every_alert_reaches_the_receiver_of_its_severity(config_file, alert):
    expected = expected_receiver(alert.name, alert.severity.value)
    labels = {"alertname": alert.name, "severity": alert.severity.value} | {k: "x" for k in alert.locating_labels}
    proc = _routes_test(config_file, expected, labels)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("severity", ["critical", "high", "warning", "info", ""])
def test_only_watchdog_reaches_the_heartbeat_receiver(config_file, severity):
    labels = {"severity": severity} if severity else {}
    watchdog = _routes_test(config_file, "heartbeat", {"alertname": "Watchdog", **labels})
    assert watchdog.returncode == 0 and watchdog.stdout.strip() == "heartbeat", watchdog.stdout + watchdog.stderr
    other = _routes_test(config_file, "heartbeat", {"alertname": "GPUPollerDown", **labels})
    assert other.returncode != 0, f"an alert other than Watchdog reached the heartbeat: {other.stdout}"


def test_heartbeat_repeats_every_minute_and_never_sends_resolved():
    config = alertmanager_config(CFG, RECEIVERS)
    first = config["route"]["routes"][0]
    assert first == {
        "receiver": "heartbeat",
        "matchers": ['alertname="Watchdog"'],
        "group_wait": "0s",
        "group_interval": "1m",
        "repeat_interval": "1m",
    }
    assert "continue" not in first
    (heartbeat,) = [r for r in config["receivers"] if r["name"] == "heartbeat"]
    assert heartbeat["webhook_configs"] == [{"url": RECEIVERS.heartbeat, "send_resolved": False}]
    assert not any("Watchdog" in str(rule) for rule in config["inhibit_rules"])


def test_a_down_poller_mutes_every_gpu_alert_of_its_node_including_new_ones():
    (poller,) = [i for i in INHIBITIONS if i.sources == ("GPUPollerDown",)]
    node_gpu_alerts = {
        a.name for a in alert_rules(CFG) if a.group == "ml_gpu_resources" and "node" in a.locating_labels
    }
    assert node_gpu_alerts and node_gpu_alerts <= set(poller.targets)
    assert poller.equal == ("node",)
    assert "GPUPollerDown" not in poller.targets


def test_inhibition_equal_labels_locate_both_alerts():
    located = {a.name: set(a.locating_labels) for a in alert_rules(CFG)}
    for inhibition in INHIBITIONS:
        for name in (*inhibition.sources, *inhibition.targets):
            assert set(inhibition.equal) <= located[name], (inhibition, name)


def test_inhibition_of_an_unknown_alert_is_rejected(monkeypatch):
    monkeypatch.setattr(am, "INHIBITIONS", (am.Inhibition(("NoSuchAlert",), ("GPUMemoryUsageHigh",), (), "x"),))
    with pytest.raises(ValueError, match="NoSuchAlert"):
        alertmanager_config(CFG, RECEIVERS)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "hooks.example.invalid/page",
        "ftp://hooks.example.invalid/x",
        "https://",
        "https://hooks.example.invalid/a b",
    ],
)
def test_receiver_urls_must_be_http_urls_and_are_never_echoed(bad):
    with pytest.raises(ValueError) as error:
        ReceiverUrls(page=bad, chat=RECEIVERS.chat, low_priority=RECEIVERS.low_priority, heartbeat=RECEIVERS.heartbeat)
    assert "ReceiverUrls.page" in str(error.value)
    if bad:
        assert bad not in str(error.value)
    with pytest.raises(ValueError) as error:
        ReceiverUrls(page=RECEIVERS.page, chat=RECEIVERS.chat, low_priority=RECEIVERS.low_priority, heartbeat=bad)
    assert "ReceiverUrls.heartbeat" in str(error.value)
    if bad:
        assert bad not in str(error.value)


def test_receiver_urls_come_only_from_the_arguments():
    config = alertmanager_config(CFG, RECEIVERS)
    urls = {c["url"] for r in config["receivers"] for c in r["webhook_configs"]}
    assert urls == {RECEIVERS.page, RECEIVERS.chat, RECEIVERS.low_priority, RECEIVERS.heartbeat}
    source = Path(am.__file__).read_text(encoding="utf-8")
    assert "://" not in source.replace("http(s)", "").replace('("http", "https")', "")


# --- operator mode ----------------------------------------------------------------------------


def _crd_matcher_to_text(matcher: dict[str, str]) -> str:
    return f'{matcher["name"]}{matcher["matchType"]}"{matcher["value"]}"'


def _crd_route_to_classic(route: dict[str, Any]) -> dict[str, Any]:
    classic: dict[str, Any] = {"receiver": route["receiver"]}
    for crd_key, key in (
        ("groupBy", "group_by"),
        ("groupWait", "group_wait"),
        ("groupInterval", "group_interval"),
        ("repeatInterval", "repeat_interval"),
    ):
        if crd_key in route:
            classic[key] = route[crd_key]
    if "matchers" in route:
        classic["matchers"] = [_crd_matcher_to_text(m) for m in route["matchers"]]
    if "routes" in route:
        classic["routes"] = [_crd_route_to_classic(r) for r in route["routes"]]
    return classic


def test_crd_spec_is_the_same_tree_as_the_classic_config():
    spec = alertmanager_config_crd_spec(CFG, RECEIVERS)
    classic = alertmanager_config(CFG, RECEIVERS)
    assert _crd_route_to_classic(spec["route"]) == classic["route"]
    inhibit = [
        {
            "source_matchers": [_crd_matcher_to_text(m) for m in r["sourceMatch"]],
            "target_matchers": [_crd_matcher_to_text(m) for m in r["targetMatch"]],
            **({"equal": r["equal"]} if "equal" in r else {}),
        }
        for r in spec["inhibitRules"]
    ]
    assert inhibit == classic["inhibit_rules"]
    assert [(r["name"], r["webhookConfigs"][0]["url"]) for r in spec["receivers"]] == [
        (r["name"], r["webhook_configs"][0]["url"]) for r in classic["receivers"]
    ]
    for matcher in [m for r in spec["route"]["routes"] for m in r["matchers"]]:
        assert matcher["matchType"] in ("=", "!=", "=~", "!~")


def test_crd_spec_can_reference_the_urls_from_a_secret():
    spec = alertmanager_config_crd_spec(CFG, RECEIVERS, url_secret="alertmanager-receivers")
    text = json.dumps(spec)
    assert "hooks.example.invalid" not in text
    data = receiver_secret_data(RECEIVERS)
    for receiver in spec["receivers"]:
        ref = receiver["webhookConfigs"][0]["urlSecret"]
        assert ref["name"] == "alertmanager-receivers"
        assert data[ref["key"]] == RECEIVERS.url_for(receiver["name"])


# --- a real Alertmanager: inhibition ---------------------------------------------------------


@pytest.fixture(scope="module")
def alertmanager_url(config_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_alertmanager(config_file, tmp_path_factory.mktemp("alertmanager-data")) as server:
        yield server.url


GPU_A = {"node": "gpu-node-1", "gpu_id": "0", "uuid": "GPU-a", "gpu_name": "NVIDIA H100"}
GPU_B = {"node": "gpu-node-1", "gpu_id": "1", "uuid": "GPU-b", "gpu_name": "NVIDIA H100"}
GPU_C = {"node": "gpu-node-2", "gpu_id": "0", "uuid": "GPU-c", "gpu_name": "NVIDIA H100"}
GPU_D = {"node": "gpu-node-3", "gpu_id": "0", "uuid": "GPU-d", "gpu_name": "NVIDIA H100"}
GPU_E = {"node": "gpu-node-4", "gpu_id": "2", "uuid": "GPU-e", "gpu_name": "NVIDIA H100"}
GPU_F = {"node": "gpu-node-2", "gpu_id": "1", "uuid": "GPU-f", "gpu_name": "NVIDIA H100"}
POLLER_D = {"namespace": "monitoring", "pod": "gpu-poller-d", "node": "gpu-node-3"}
JOB = {"namespace": "training", "model_type": "dqn", "job_id": "job-1"}
HOLDER_A = {"model_type": "dqn", "job_id": "job-1"}
HOLDER_C = {"model_type": "ppo", "job_id": "job-2"}
OTHER_JOB = {"model_type": "ppo", "job_id": "job-3"}
SEVERITY = {a.name: a.severity.value for a in alert_rules(CFG)}

# (alert name, labels, muted?)
SCENARIO = [
    ("GPUMemoryExhausted", {**GPU_A, **HOLDER_A}, False),
    ("GPUMemoryUsageHigh", {**GPU_A, **HOLDER_A}, True),  # same GPU as the critical one
    ("GPUMemoryExhaustionPredicted", {**GPU_A, **HOLDER_A}, True),  # it has run out: no need to predict it
    ("GPUMemoryUsageHigh", GPU_B, False),  # a neighbour GPU is not muted
    ("GPUMemoryExhaustionPredicted", GPU_B, False),
    ("GPUErrorsDetected", {**GPU_C, **HOLDER_C}, False),
    ("GPUUtilizationLow", HOLDER_C, True),  # the job holding the failing GPU
    ("GPUErrorsDetected", GPU_F, False),  # a failing GPU no job holds...
    ("GPUUtilizationCritical", OTHER_JOB, False),  # ...mutes no job's alert
    ("MLTrainingServiceDown", {"namespace": "foxhunt", "service": "ml-training-service"}, False),
    ("TrainingSlowdown", JOB, True),
    ("ModelLoadingFailures", {"namespace": "foxhunt", "service": "ml-inference-service", "model_type": "tft"}, True),
    ("ModelDriftDetected", {"namespace": "foxhunt", "service": "ml-inference-service", "model_type": "tft"}, False),
    ("TrainingNaNDetected", {**JOB, "tensor_type": "loss"}, False),  # critical alerts are never muted
    # A down poller mutes its node's GPU and poller alerts (a restarted one re-reports a lost GPU).
    ("GPUPollerDown", POLLER_D, False),
    ("GPUErrorsDetected", GPU_D, True),
    ("GPUTemperatureHigh", GPU_D, True),
    ("GPUPollerCollectionSlow", {"node": "gpu-node-3"}, True),
    ("GPUTemperatureHigh", GPU_E, False),  # another node
    # NVML down explains the node's GPUs not answering and its failing NVML calls.
    ("NVMLDown", {"node": "gpu-node-4"}, False),
    ("GPUsNotAnswering", {"node": "gpu-node-4"}, True),
    ("GPUPollerCollectionFailing", {"node": "gpu-node-4"}, True),
    ("Watchdog", {}, False),  # never muted
]


def test_a_real_alertmanager_applies_the_inhibitions(alertmanager_url):
    alerts = [
        {"labels": {"alertname": name, "severity": SEVERITY[name], **labels}, "annotations": {"summary": name}}
        for name, labels, _ in SCENARIO
    ]
    request = urllib.request.Request(
        f"{alertmanager_url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200

    def key(labels: dict[str, str]) -> tuple[str | None, ...]:
        return tuple(labels.get(k) for k in ("alertname", "gpu_id", "node", "job_id"))

    expected = {key({"alertname": name, **labels}): muted for name, labels, muted in SCENARIO}
    # Alertmanager's inhibitor sees new alerts asynchronously: read until it has caught up (or time out).
    deadline = time.monotonic() + 15
    while True:
        with urllib.request.urlopen(f"{alertmanager_url}/api/v2/alerts", timeout=5) as response:
            got = json.load(response)
        muted = {key(a["labels"]): bool(a["status"]["inhibitedBy"]) for a in got}
        if muted == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(got) == len(SCENARIO)
    for alert_key, should_be_muted in expected.items():
        assert muted[alert_key] is should_be_muted, alert_key


def test_an_alertmanager_that_cannot_start_fails_with_its_log(tmp_path):
    config = tmp_path / "alertmanager.yml"
    config.write_text("route:\n  receiver: nowhere\nreceivers: []\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match=r"(?s)exited with .*nowhere") as failure:
        AlertmanagerServer(config, tmp_path / "work")
    assert "Alertmanager on port" in str(failure.value)
