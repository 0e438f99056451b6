"""Grafana datasource provisioning: Prometheus, Loki and Tempo with fixed UIDs, cross-linked.

- Loki `derivedFields`: a `trace_id` in a log line (logfmt `trace_id=...` or JSON
  `"trace_id":"..."`) becomes a link that opens the trace in Tempo.
- Tempo `tracesToLogsV2`: from a span to its logs in Loki, filtered by trace ID; `tracesToMetrics`
  and `serviceMap`: to Prometheus (the Tempo metrics generator's series); `nodeGraph` on.
- Prometheus `exemplarTraceIdDestinations`: exemplars with a `trace_id` link to Tempo.

Grafana expands environment variables (`$VAR`, `${VAR}`) in provisioning files, so every literal
`$` (Grafana's own `${__value.raw}`, `$__tags`) is written `$$` (`escape_dollars`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig

# The attribute keys the OTEL env sets on every span (infra: OTEL_RESOURCE_ATTRIBUTES) mapped to
# the Loki stream labels the log shipper sets on the same pod's logs.
TRACE_TO_LOG_TAGS = (("k8s.namespace.name", "namespace"), ("k8s.pod.name", "pod"))
# Span attribute -> Prometheus label on the span metrics series.
TRACE_TO_METRIC_TAGS = (("service.name", "service"),)
# RE2 (Grafana is Go): a 16-32 hex digit trace ID after `trace_id=`, `trace_id: ` or `"trace_id":"`.
TRACE_ID_REGEX = r"""(?:trace_id|traceID|traceId)"?\s*[=:]\s*"?([0-9a-fA-F]{16,32})"""
SHIFT = "5m"


@dataclass(frozen=True)
class DatasourceEndpoints:
    """In-cluster URLs Grafana's backend reaches the three datasources at."""

    prometheus: str
    loki: str
    tempo: str


def escape_dollars(text: str) -> str:
    """A literal `$` in Grafana provisioning YAML (which expands `$VAR` / `${VAR}`) is `$$`."""
    return text.replace("$", "$$")


def _rate_query(metric: catalog.Metric) -> str:
    # `$__tags` is filled in by Grafana from TRACE_TO_METRIC_TAGS.
    return escape_dollars(f"sum by (service) (rate({metric.name}{{$__tags}}[5m]))")


def _latency_query(metric: catalog.Metric) -> str:
    return escape_dollars(f"histogram_quantile(0.95, sum by (le, service) (rate({metric.bucket}{{$__tags}}[5m])))")


def datasources(cfg: ObservabilityConfig, endpoints: DatasourceEndpoints) -> dict[str, Any]:
    """The provisioning document (`apiVersion: 1`, `datasources: [...]`)."""
    uids = cfg.datasource_uids
    prometheus = {
        "name": "Prometheus",
        "uid": uids.prometheus,
        "type": "prometheus",
        "access": "proxy",
        "url": endpoints.prometheus,
        "isDefault": True,
        "editable": False,
        "jsonData": {
            "timeInterval": f"{cfg.scrape_interval_seconds}s",
            "httpMethod": "POST",
            "exemplarTraceIdDestinations": [{"name": "trace_id", "datasourceUid": uids.tempo}],
        },
    }
    loki = {
        "name": "Loki",
        "uid": uids.loki,
        "type": "loki",
        "access": "proxy",
        "url": endpoints.loki,
        "editable": False,
        "jsonData": {
            "maxLines": 1000,
            "derivedFields": [
                {
                    "name": "TraceID",
                    "matcherRegex": escape_dollars(TRACE_ID_REGEX),
                    "url": escape_dollars("${__value.raw}"),
                    "datasourceUid": uids.tempo,
                    "urlDisplayLabel": "Open trace in Tempo",
                }
            ],
        },
    }
    tempo = {
        "name": "Tempo",
        "uid": uids.tempo,
        "type": "tempo",
        "access": "proxy",
        "url": endpoints.tempo,
        "editable": False,
        "jsonData": {
            "tracesToLogsV2": {
                "datasourceUid": uids.loki,
                "spanStartTimeShift": f"-{SHIFT}",
                "spanEndTimeShift": SHIFT,
                "filterByTraceID": True,
                "filterBySpanID": False,
                "tags": [{"key": key, "value": label} for key, label in TRACE_TO_LOG_TAGS],
            },
            "tracesToMetrics": {
                "datasourceUid": uids.prometheus,
                "spanStartTimeShift": f"-{SHIFT}",
                "spanEndTimeShift": SHIFT,
                "tags": [{"key": key, "value": label} for key, label in TRACE_TO_METRIC_TAGS],
                "queries": [
                    {"name": "Span rate", "query": _rate_query(catalog.SPANMETRICS_CALLS_TOTAL)},
                    {"name": "Span latency p95", "query": _latency_query(catalog.SPANMETRICS_LATENCY)},
                ],
            },
            "serviceMap": {"datasourceUid": uids.prometheus},
            "nodeGraph": {"enabled": True},
            "lokiSearch": {"datasourceUid": uids.loki},
            "search": {"hide": False},
        },
    }
    return {"apiVersion": 1, "datasources": [prometheus, loki, tempo]}


def datasources_yaml(cfg: ObservabilityConfig, endpoints: DatasourceEndpoints) -> str:
    """The provisioning file: `rendered/<stack>/grafana/datasources.yaml` and the ConfigMap's key."""
    text: str = yaml.safe_dump(datasources(cfg, endpoints), sort_keys=False, default_flow_style=False, width=10_000)
    return text
