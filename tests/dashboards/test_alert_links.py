"""Every alert's `dashboard_url` opens a dashboard that exists, filtered by variables it defines."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import pytest

from dashboards import build_all
from observability import alert_links
from observability.config import ObservabilityConfig
from observability.rules import alert_rules
from tests.rules.promtool_harness import render_template

CFG = ObservabilityConfig(grafana_url="https://grafana.test.invalid/")
DASHBOARDS = build_all(CFG)
ALERTS = {a.name: a for a in alert_rules(CFG)}


def _links(alert_name: str) -> tuple[str, str]:
    """The link with every locating label present, and without a job (a GPU no job holds)."""
    alert = ALERTS[alert_name]
    template = alert.to_rule(CFG)["annotations"]["dashboard_url"]
    every = {label: f"value-of-{label}" for label in alert.locating_labels}
    without_job = {k: v for k, v in every.items() if k != "job_id"}
    return render_template(template, every, None), render_template(template, without_job, None)


def _urls(alert_name: str) -> list[str]:
    return sorted(set(_links(alert_name)))


@pytest.mark.parametrize("alert_name", sorted(ALERTS))
def test_every_alert_links_an_existing_dashboard_filtered_by_its_own_labels(alert_name):
    alert = ALERTS[alert_name]
    for url in _urls(alert_name):
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == "https://grafana.test.invalid", url
        uid = re.fullmatch(r"/d/([A-Za-z0-9_-]+)", parts.path)
        assert uid and uid.group(1) in DASHBOARDS, url
        names = {v["name"] for v in DASHBOARDS[uid.group(1)]["templating"]["list"]}
        for key, value in parse_qsl(parts.query):
            if key.startswith("var-"):
                assert key.removeprefix("var-") in names, (url, key)
                label = value.removeprefix("value-of-")
                assert label in alert.locating_labels, (url, key, value)


def test_a_gpu_alert_links_the_job_holding_the_gpu_or_else_the_node():
    held, unheld = _links("GPUMemoryExhausted")
    assert f"/d/{alert_links.TRAINING_COCKPIT_UID}?" in held and "var-job_id=value-of-job_id" in held
    assert "var-node=value-of-node" in held
    assert f"/d/{alert_links.INFRA_COCKPIT_UID}?" in unheld and "var-node=value-of-node" in unheld
    assert "job_id" not in unheld


def test_a_job_alert_links_the_training_cockpit_of_its_job():
    url, _ = _links("TrainingNaNDetected")
    assert f"/d/{alert_links.TRAINING_COCKPIT_UID}?orgId=1" in url
    assert "var-job_id=value-of-job_id" in url and "var-model=value-of-model_type" in url
