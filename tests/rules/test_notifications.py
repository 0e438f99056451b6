"""Native notifications end to end: a real Alertmanager 0.25 on 127.0.0.1 loads the rendered config
and template file, its Slack `api_url` and PagerDuty URL point at local HTTP sinks that record what
it sends (the payloads Slack's incoming webhooks and PagerDuty's Events API v2 receive), and alerts
carrying the rules' own annotations are posted through its API.

Only the routes' timings are cut (group_wait 5 s as the page route's, group_interval 1 s) so the test does not wait for
the production batching; receivers, channels, templates and credentials are as rendered.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from harness.alertmanager import alertmanager_tool, running_alertmanager
from harness.webhook_sink import WebhookSink
from observability import alertmanager as am
from observability.config import Notifications, ObservabilityConfig
from observability.notifications import SHOWN_ALERTS, TEMPLATE_FILE, template_text
from tests.rules.promtool_harness import alert_rule_dicts, render_template

NOTIFY = Notifications(
    critical="pagerduty",
    high="slack",
    warning="slack",
    info="slack",
    slack_channels=(("high", "#ml-alerts-high"), ("warning", "#ml-alerts"), ("info", "#ml-low-priority")),
)
CFG = ObservabilityConfig(grafana_url="https://grafana.test.invalid", notifications=NOTIFY)
RULES = alert_rule_dicts(CFG)
ROUTING_KEY = "R0UTINGKEY0123456789abcdefghijkl"


# What PagerDuty's Events API v2 answers an accepted event (202); Slack only needs a 200.
EVENTS_API_REPLY = b'{"status":"success","message":"Event processed","dedup_key":"x"}'


@pytest.fixture(scope="module")
def sink() -> Iterator[WebhookSink]:
    with WebhookSink(reply=EVENTS_API_REPLY, statuses={"/pagerduty": 202}) as server:
        yield server


def _fast(config: dict[str, Any]) -> dict[str, Any]:
    def cut(route: dict[str, Any]) -> None:
        route["group_wait"], route["group_interval"] = "5s", "1s"
        for child in route.get("routes", []):
            cut(child)

    cut(config["route"])
    return config


@pytest.fixture(scope="module")
def config_dir(sink: WebhookSink, tmp_path_factory: pytest.TempPathFactory) -> Path:
    receivers = am.ReceiverUrls(
        heartbeat=f"{sink.url}/heartbeat",
        slack_api_url=f"{sink.url}/slack",
        pagerduty_routing_key=ROUTING_KEY,
        pagerduty_url=f"{sink.url}/pagerduty",
    )
    directory: Path = tmp_path_factory.mktemp("alertmanager-native")
    config = _fast(am.alertmanager_config(CFG, receivers))
    (directory / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False, width=10_000))
    (directory / TEMPLATE_FILE).write_text(template_text())
    return directory


@pytest.fixture(scope="module")
def alertmanager(config_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("alertmanager-native-data")
    with running_alertmanager(config_dir / "alertmanager.yml", work) as server:
        yield server.url


def _alert(
    name: str, labels: dict[str, str], value: float, *, ends: datetime | None = None, ago: float = 180
) -> dict[str, Any]:
    """An alert as Prometheus sends it: the rule's labels and its annotations expanded for `labels`,
    active since `ago` seconds."""
    rule = RULES[name]
    annotations = {k: render_template(v, labels, value) for k, v in rule["annotations"].items()}
    alert: dict[str, Any] = {
        "labels": {"alertname": name, **rule["labels"], **labels},
        "annotations": annotations,
        "startsAt": (datetime.now(UTC) - timedelta(seconds=ago)).isoformat(),
        "generatorURL": "http://prometheus.test.invalid/graph",
    }
    if ends is not None:
        alert["endsAt"] = ends.isoformat()
    return alert


def _post(alertmanager: str, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{alertmanager}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _gpu(node: str, gpu_id: str) -> dict[str, str]:
    return {"node": node, "gpu_id": gpu_id, "uuid": f"GPU-{node}-{gpu_id}", "gpu_name": "NVIDIA H100 80GB HBM3"}


HOLDER = {"model_type": "dqn", "job_id": "job-42"}


def _dashboard_query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


@pytest.mark.slow
def test_amtool_checks_the_config_with_its_templates_and_routes_to_the_native_receivers(config_dir):
    config = config_dir / "alertmanager.yml"
    proc = subprocess.run(
        [alertmanager_tool("amtool"), "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 templates" in proc.stdout and "4 receivers" in proc.stdout, proc.stdout
    document = yaml.safe_load(config.read_text())
    kinds = {r["name"]: next(k for k in r if k.endswith("_configs")) for r in document["receivers"]}
    assert kinds == {
        am.PAGE: "pagerduty_configs",
        am.CHAT: "slack_configs",
        am.LOW_PRIORITY: "slack_configs",
        am.HEARTBEAT: "webhook_configs",
    }
    for severity, receiver in (
        ("critical", am.PAGE),
        ("high", am.CHAT),
        ("warning", am.CHAT),
        ("info", am.LOW_PRIORITY),
    ):
        proc = subprocess.run(
            [alertmanager_tool("amtool"), "config", "routes", "test", f"--config.file={config}", f"--verify.receivers={receiver}",
             "alertname=GPUErrorsDetected", f"severity={severity}", "node=gpu-node-1"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (severity, proc.stdout + proc.stderr)


def test_a_critical_gpu_alert_triggers_and_resolves_one_pagerduty_incident(alertmanager, sink):
    labels = {**_gpu("gpu-node-7", "3"), **HOLDER}
    _post(alertmanager, [_alert("GPUErrorsDetected", labels, 1)])
    (trigger,) = sink.received("/pagerduty", lambda b: b["event_action"] == "trigger" and "gpu-node-7" in json.dumps(b))
    assert trigger["routing_key"] == ROUTING_KEY
    payload = trigger["payload"]
    assert payload["severity"] == "critical"
    assert payload["summary"] == f"GPUErrorsDetected: {RULES['GPUErrorsDetected']['annotations']['summary']}"
    links = {link["text"]: link["href"] for link in trigger["links"]}
    assert links["Runbook"].endswith("#gpuerrorsdetected")
    dashboard = links["Grafana dashboard"]
    assert dashboard.startswith("https://grafana.test.invalid/d/foxhunt-training-cockpit?")
    query = _dashboard_query(dashboard)
    assert query["var-job_id"] == ["job-42"] and query["var-node"] == ["gpu-node-7"] and query["to"] == ["now"]
    started = datetime.fromisoformat(_alert("GPUErrorsDetected", labels, 1)["startsAt"])
    assert abs(int(query["from"][0]) / 1000 - (started - timedelta(hours=1)).timestamp()) < 120
    details = payload["custom_details"]
    assert "gpu-node-7" in details["alerts"] and details["runbook"] == links["Runbook"]

    _post(alertmanager, [_alert("GPUErrorsDetected", labels, 1, ends=datetime.now(UTC) - timedelta(seconds=1))])
    (resolve,) = sink.received(
        "/pagerduty", lambda b: b["event_action"] == "resolve" and b["dedup_key"] == trigger["dedup_key"]
    )
    assert resolve["routing_key"] == ROUTING_KEY


def test_a_warning_reaches_its_slack_channel_with_summary_description_runbook_and_dashboard(alertmanager, sink):
    labels = {**_gpu("gpu-node-8", "1"), **HOLDER}
    alert = _alert("GPUMemoryUsageHigh", labels, 0.93)
    _post(alertmanager, [alert])
    (message,) = sink.received("/slack", lambda b: "gpu-node-8" in json.dumps(b))
    assert message["channel"] == "#ml-alerts"
    (attachment,) = message["attachments"]
    assert attachment["title"] == "[FIRING:1] GPUMemoryUsageHigh (warning)"
    assert attachment["color"] == "danger"
    text = attachment["text"]
    assert alert["annotations"]["summary"] in text and alert["annotations"]["description"] in text
    assert f"<{alert['annotations']['runbook_url']}|Runbook>" in text
    query = _dashboard_query(attachment["title_link"])
    assert query["var-job_id"] == ["job-42"] and query["var-node"] == ["gpu-node-8"]


def test_fifty_alerts_make_one_readable_message_per_receiver(alertmanager, sink):
    # Alerts that started together (Alertmanager flushes a group at once when its first alert is older
    # than group_wait, and the rest of a batch would follow one group_interval later).
    warnings = [_alert("GPUMemoryUsageHigh", _gpu("gpu-node-9", str(i)), 0.95, ago=0) for i in range(50)]
    pages = [_alert("GPUErrorsDetected", _gpu("gpu-node-10", str(i)), 1, ago=0) for i in range(50)]
    _post(alertmanager, warnings + pages)
    time.sleep(8)  # past group_wait and a few group intervals: a second message would be sent by now
    slack = sink.received("/slack", lambda b: "gpu-node-9" in json.dumps(b))
    pagerduty = sink.received("/pagerduty", lambda b: "gpu-node-10" in json.dumps(b))
    assert len(slack) == 1 and len(pagerduty) == 1, (
        [m["attachments"][0]["title"] for m in slack],
        [(m["event_action"], m["payload"]["summary"]) for m in pagerduty],
    )
    text = slack[0]["attachments"][0]["text"]
    assert f"50 firing, 0 resolved; the first {SHOWN_ALERTS} of 50:" in text
    assert text.count("|Runbook>") == SHOWN_ALERTS and "|All 50 alerts in Alertmanager>" in text
    assert len(text) < 4000
    assert slack[0]["attachments"][0]["title"] == "[FIRING:50] GPUMemoryUsageHigh (warning)"
    assert pagerduty[0]["payload"]["summary"].endswith("(50 alerts)")
    assert pagerduty[0]["payload"]["custom_details"]["alerts"].count(" | ") == SHOWN_ALERTS
    assert "and 50 in all: http://127.0.0.1:" in pagerduty[0]["payload"]["custom_details"]["alerts"]
