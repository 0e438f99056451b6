"""Traces: service map, trace search, span duration and errors by service.

For the engineer debugging a request or a slow service: from the service graph to one trace and its
logs. Every panel comes from `dashboards/panels/traces.py`; this module composes them into rows
and owns the search variables the trace search and its links read.

The service map and the search table query Tempo. Duration and error panels read Tempo's span
metrics and service-graph metrics from Prometheus (through the dashboard recording rules). From
a trace to its logs: a trace id in the search table opens the trace (whose spans link to Loki
through the Tempo datasource's trace-to-logs setting) or fills `$trace_id`, which the "Logs for
Selected Trace" panel searches in Loki.
"""

from __future__ import annotations

from typing import Any

from dashboards import variables
from dashboards.layout import DashboardSpec, Row, assemble
from dashboards.panels import traces as trace_panels
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig

UID = "foxhunt-traces"
TITLE = "Foxhunt Traces"

SERVICE = promql.variable_matcher("service", "service")
SERVER = promql.variable_matcher("server", "service")

# TraceQL over the search variables. `${var:pipe}` joins multi-value choices as `a|b` without
# escaping (a TraceQL string would reject regex escapes); "All" is the variables' `.*`.
# `$status` holds a whole TraceQL condition (see the variable's choices).
TRACE_SEARCH = (
    '{resource.service.name=~"${service:pipe}" && name=~"${operation:pipe}"'
    " && duration >= ${min_duration} && ${status}}"
)
STATUS_CHOICES = (
    ("any", "duration >= 0ms"),
    ("error", "status = error"),
    ("ok", "status = ok"),
    ("unset", "status = unset"),
)
MIN_DURATIONS = ("0ms", "10ms", "100ms", "500ms", "1s", "5s", "30s")


def _trace_id_links(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    """Links on a trace id: the trace itself (in Explore, where each span links to its logs
    through the Tempo datasource's trace-to-logs setting) and this dashboard's logs panel.

    Both are set because a column's `links` override replaces the link the datasource adds.
    """
    return [
        {
            "title": "Open trace",
            "url": "",
            "internal": {
                "datasourceUid": cfg.datasource_uids.tempo,
                "datasourceName": "Tempo",
                "query": {"queryType": "traceql", "query": "${__value.raw}"},
            },
        },
        {
            "title": "Logs for this trace",
            "url": f"/d/{UID}?var-trace_id=${{__value.raw}}&${{__url_time_range}}",
            "targetBlank": False,
        },
    ]


def _service_map() -> Row:
    return Row("Service Map", [trace_panels.service_graph(w=24, h=12)])


def _trace_search(cfg: ObservabilityConfig) -> Row:
    return Row("Trace Search", [trace_panels.trace_search(TRACE_SEARCH, _trace_id_links(cfg), w=24, h=10)])


def _trace_metrics() -> Row:
    return Row(
        "Trace Metrics",
        [
            trace_panels.span_duration_histogram((SERVICE,), w=12),
            trace_panels.error_rate_by_service((SERVICE,)),
            trace_panels.span_rate_by_service((SERVICE,), w=8),
            trace_panels.span_duration_p95_by_service((SERVICE,), w=8),
            trace_panels.requests_between_services((SERVER,), w=8),
            trace_panels.server_latency_p95_between_services((SERVER,), w=24),
        ],
    )


def _logs() -> Row:
    return Row("Logs for Trace", [trace_panels.logs_for_trace(w=24, h=10)])


def build(cfg: ObservabilityConfig) -> dict[str, Any]:
    return assemble(
        DashboardSpec(
            uid=UID,
            title=TITLE,
            description="Service map, trace search, span durations and error rates, and the logs of a trace.",
            tags=("traces", "tempo"),
            variables=[
                variables.prometheus_datasource(cfg.datasource_uids.prometheus),
                variables.tempo_datasource(cfg.datasource_uids.tempo),
                variables.loki_datasource(cfg.datasource_uids.loki),
                variables.label_values("service", "Service", catalog.SPANMETRICS_CALLS_TOTAL.name, "service"),
                variables.label_values(
                    "operation",
                    "Operation",
                    promql.selector(catalog.SPANMETRICS_CALLS_TOTAL.name, (SERVICE,)),
                    "span_name",
                ),
                variables.custom(
                    "min_duration",
                    "Min duration",
                    [(d, d) for d in MIN_DURATIONS],
                    "Shortest trace span duration the search returns.",
                ),
                variables.custom("status", "Status", STATUS_CHOICES, "Span status the search requires."),
                variables.textbox("trace_id", "Trace id", "Trace whose log lines the logs panel shows."),
            ],
            rows=[_service_map(), _trace_search(cfg), _trace_metrics(), _logs()],
            min_interval=f"{cfg.scrape_interval_seconds}s",
            refresh="1m",
            time_from="now-1h",
        )
    )
