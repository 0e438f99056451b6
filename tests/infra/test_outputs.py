"""Stack outputs (`pulumi stack output`), run under the mock engine for every stack: each names
what the render really produced (objects, images, dashboards), so a wrong or missing output fails."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from infra.offline import render
from infra.offline.render import STACK_OUTPUTS_PATH
from infra.offline.result import RenderResult
from infra.stacks import STACKS

EXPECTED = {"namespaces", "pollerImage", "dashboards", "rules", "alertmanager", "scrape", "trainingJobCommand"}


def _file(result: RenderResult, ref: dict[str, str]) -> dict[str, Any]:
    name = f"kubernetes/{ref['kind'].lower()}_{ref['namespace']}_{ref['name']}.yaml"
    assert name in result.files, f"the output names {ref}, but the render has no {name}"
    document: dict[str, Any] = yaml.safe_load(result.files[name])
    return document


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs_name_what_was_deployed_and_where(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings, outputs = result.settings, result.run.outputs
    assert set(outputs) == EXPECTED
    assert json.loads(result.files[STACK_OUTPUTS_PATH]) == outputs

    ns = settings.namespaces
    assert outputs["namespaces"] == {
        "platform": ns.platform, "monitoring": ns.monitoring, "training": ns.training,
        "grafana": settings.grafana.namespace,
    }  # fmt: skip

    (daemonset,) = [m for m in result.manifests.values() if m["kind"] == "DaemonSet"]
    images = {c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]}
    assert images == {outputs["pollerImage"]} and "@sha256:" in outputs["pollerImage"]

    uids = {
        name.removeprefix("dashboards/").removesuffix(".json")
        for name in result.files
        if name.startswith("dashboards/")
    }
    assert set(outputs["dashboards"]) == uids
    for uid, entry in outputs["dashboards"].items():
        assert entry["title"] == json.loads(result.files[f"dashboards/{uid}.json"])["title"]
        assert entry["url"] == f"{settings.grafana.url.rstrip('/')}/d/{uid}"

    rules = outputs["rules"]
    carried = _file(result, rules)
    groups = carried["spec"]["groups"] if carried["kind"] == "PrometheusRule" else yaml.safe_load(
        next(iter(carried["data"].values()))
    )["groups"]  # fmt: skip
    assert rules["alerts"] == sum(1 for g in groups for r in g["rules"] if "alert" in r) > 0
    assert rules["kind"] == ("PrometheusRule" if settings.scrape.mode == "operator" else "ConfigMap")

    kinds = [_file(result, ref)["kind"] for ref in outputs["alertmanager"]]
    # operator mode: the receivers' Secret, the message templates' ConfigMap, the AlertmanagerConfig
    assert kinds == (
        ["Secret", "ConfigMap", "AlertmanagerConfig"] if settings.scrape.mode == "operator" else ["Secret"]
    )

    scrape = outputs["scrape"]
    assert (
        scrape["mode"] == settings.scrape.mode
        and scrape["intervalSeconds"] == settings.observability.scrape_interval_seconds
    )
    assert _file(result, scrape["object"])["metadata"]["name"] == scrape["object"]["name"]

    (cronjob,) = [m for m in result.manifests.values() if m["kind"] == "CronJob"]
    assert outputs["trainingJobCommand"] == (
        f"kubectl -n {cronjob['metadata']['namespace']} create job <run-name> "
        f"--from=cronjob/{cronjob['metadata']['name']}"
    )


def test_grafana_url_setting_feeds_the_dashboard_links() -> None:
    result = render.render_stack("dev", overrides={"grafanaUrl": "https://grafana.example.invalid/"})
    assert result.run.outputs["dashboards"]["ml-training-comprehensive"]["url"] == (
        "https://grafana.example.invalid/d/ml-training-comprehensive"
    )
