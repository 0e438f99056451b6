"""Grafana datasource provisioning: fixed UIDs, cross-links by UID, `$$` escaping as Grafana reads it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from infra.offline import artifacts
from infra.offline.result import RenderResult
from observability.config import DatasourceUids, ObservabilityConfig
from observability.datasources import (
    TRACE_ID_REGEX,
    DatasourceEndpoints,
    datasources,
    datasources_yaml,
    escape_dollars,
)
from tests.infra.support import STACKS

ENDPOINTS = DatasourceEndpoints(prometheus="http://prom:9090", loki="http://loki:3100", tempo="http://tempo:3200")


def grafana_expand(text: str, env: dict[str, str] | None = None) -> str:
    """Grafana's provisioning interpolation: `$$` is a literal `$`, `$VAR`/`${VAR}` come from the env."""
    env = env or {}

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1) or match.group(2), "")

    return re.sub(r"\$\$|\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", replace, text)


def by_type(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["type"]: d for d in document["datasources"]}


def test_three_datasources_with_fixed_uids() -> None:
    cfg = ObservabilityConfig(datasource_uids=DatasourceUids(prometheus="p-uid", loki="l-uid", tempo="t-uid"))
    document = datasources(cfg, ENDPOINTS)
    assert document["apiVersion"] == 1
    sources = by_type(document)
    assert {t: s["uid"] for t, s in sources.items()} == {"prometheus": "p-uid", "loki": "l-uid", "tempo": "t-uid"}
    assert {t: s["url"] for t, s in sources.items()} == {
        "prometheus": ENDPOINTS.prometheus,
        "loki": ENDPOINTS.loki,
        "tempo": ENDPOINTS.tempo,
    }
    assert [s["isDefault"] for s in document["datasources"] if "isDefault" in s] == [True]
    assert sources["prometheus"]["jsonData"]["timeInterval"] == "15s"


def test_cross_links_refer_to_each_other_by_uid() -> None:
    cfg = ObservabilityConfig(datasource_uids=DatasourceUids(prometheus="p-uid", loki="l-uid", tempo="t-uid"))
    sources = by_type(datasources(cfg, ENDPOINTS))
    (derived,) = sources["loki"]["jsonData"]["derivedFields"]
    assert derived["datasourceUid"] == "t-uid"
    tempo = sources["tempo"]["jsonData"]
    logs = tempo["tracesToLogsV2"]
    assert logs["datasourceUid"] == "l-uid" and logs["filterByTraceID"] is True
    assert {t["key"] for t in logs["tags"]} == {"k8s.namespace.name", "k8s.pod.name"}
    assert tempo["tracesToMetrics"]["datasourceUid"] == "p-uid"
    assert tempo["serviceMap"] == {"datasourceUid": "p-uid"}
    assert tempo["nodeGraph"] == {"enabled": True}
    assert tempo["lokiSearch"] == {"datasourceUid": "l-uid"}
    exemplars = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert exemplars == [{"name": "trace_id", "datasourceUid": "t-uid"}]


def test_literal_dollars_survive_grafanas_env_expansion() -> None:
    text = datasources_yaml(ObservabilityConfig(), ENDPOINTS)
    # every `$` in the file is part of a `$$` pair: nothing is left for the env expansion to eat
    assert "$" not in text.replace("$$", "")
    expanded = yaml.safe_load(grafana_expand(text, {"__value": "WRONG", "__tags": "WRONG"}))
    sources = by_type(expanded)
    (derived,) = sources["loki"]["jsonData"]["derivedFields"]
    assert derived["url"] == "${__value.raw}"
    queries = sources["tempo"]["jsonData"]["tracesToMetrics"]["queries"]
    assert queries and all("{$__tags}" in q["query"] for q in queries)
    metrics = {catalog.SPANMETRICS_CALLS_TOTAL.name, catalog.SPANMETRICS_LATENCY.bucket}
    assert {m for m in metrics if any(m in q["query"] for q in queries)} == metrics
    # without the escaping Grafana would have blanked them
    assert grafana_expand("${__value.raw}") == ""
    assert escape_dollars("a $b ${c}") == "a $$b $${c}"


@pytest.mark.parametrize(
    ("line", "trace_id"),
    [
        ("level=info msg=\"epoch done\" trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ('{"level":"INFO","msg":"saved checkpoint","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}', "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("2026-01-01T00:00:00Z INFO train{fold=2}: traceID=00f067aa0ba902b7 step", "00f067aa0ba902b7"),
        ("no trace here, span_id=00f067aa0ba902b7", None),
    ],
)  # fmt: skip
def test_derived_field_regex_finds_the_trace_id(line: str, trace_id: str | None) -> None:
    derived = by_type(datasources(ObservabilityConfig(), ENDPOINTS))["loki"]["jsonData"]["derivedFields"][0]
    assert derived["matcherRegex"] == TRACE_ID_REGEX
    # Grafana runs it as Go RE2: no look-arounds or back-references, which Python's re agrees on.
    assert not re.search(r"\(\?[=!<]|\\[1-9]", TRACE_ID_REGEX)
    match = re.search(TRACE_ID_REGEX, line)
    assert (match.group(1) if match else None) == trace_id


@pytest.mark.parametrize("stack", STACKS)
def test_stack_datasources_point_at_the_stacks_endpoints(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    endpoints = result.settings.endpoints
    sources = by_type(yaml.safe_load(result.files[artifacts.DATASOURCES_PATH]))
    assert sources["prometheus"]["url"] == endpoints.prometheus
    assert sources["loki"]["url"] == endpoints.loki
    assert sources["tempo"]["url"] == endpoints.tempo_query
    assert (
        sources["prometheus"]["jsonData"]["timeInterval"] == f"{result.settings.observability.scrape_interval_seconds}s"
    )
