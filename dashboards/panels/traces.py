"""Trace panels: Tempo's service map and trace search, the span and service-graph metrics of its
metrics generator (read through the dashboard recording rules) and the logs of one trace.
`services` filters the spans' services shown, `servers` the service-graph edges by their server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dashboards.panels import (
    GREEN,
    RED,
    YELLOW,
    ColourSteps,
    Common,
    LogQuery,
    PanelBuilder,
    Query,
    ThresholdStyle,
    TraceQuery,
    duration_heatmap,
    logs,
    service_map,
    timeseries,
    trace_table,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec

ERROR_SHARE = ColourSteps(GREEN, ((0.01, YELLOW), (0.05, RED)))


def _span_rate(title: str, description: str, services: tuple[str, ...], *, with_total: bool, w: int) -> PanelBuilder:
    """Spans per second per service; `with_total` adds the sum over every service."""
    calls = promql.selector(rec.SPAN_CALLS_RATE5M.record, services)
    total = [Query(f"sum({calls})", "all services")] if with_total else []
    return timeseries(Common(title, description, "cps", w=w, min=0), [Query(calls, "{{service}}"), *total])


def _span_error_ratio(title: str, description: str, services: tuple[str, ...], *, with_total: bool) -> PanelBuilder:
    """Share of spans with error status per service; `with_total` adds the share over every service."""
    calls = promql.selector(rec.SPAN_CALLS_RATE5M.record, services)
    errors = promql.selector(rec.SPAN_ERRORS_RATE5M.record, services)
    total = [Query(f"sum({errors}) / sum({calls})", "all services")] if with_total else []
    return timeseries(
        Common(title, description, "percentunit", w=12, min=0, max=1, thresholds=ERROR_SHARE),
        [Query(promql.selector(rec.SPAN_ERROR_RATIO_RATE5M.record, services), "{{service}}"), *total],
        threshold_style=ThresholdStyle.LINE,
    )


def spans_per_second(*, w: int) -> PanelBuilder:
    """Every service's span rate and their total (the trace pipeline's health)."""
    return _span_rate(
        "Spans per Second",
        "Spans Tempo's metrics generator received per second, per service.",
        (),
        with_total=True,
        w=w,
    )


def span_error_rate() -> PanelBuilder:
    return _span_error_ratio(
        "Span Error Rate", "Share of spans with error status, per service and overall.", (), with_total=True
    )


def span_rate_by_service(services: tuple[str, ...], *, w: int) -> PanelBuilder:
    return _span_rate(
        "Span Rate by Service",
        "Spans received per second, per service (5 minute window).",
        services,
        with_total=False,
        w=w,
    )


def error_rate_by_service(services: tuple[str, ...]) -> PanelBuilder:
    return _span_error_ratio(
        "Error Rate by Service",
        "Share of spans with error status, per service (5 minute window).",
        services,
        with_total=False,
    )


def service_graph(*, w: int, h: int) -> PanelBuilder:
    """The "Service Map": Tempo's service graph in a node graph."""
    return service_map(
        Common(
            "Service Map",
            "Services and the calls between them, from Tempo's service graph (request rate, errors, latency).",
            w=w,
            h=h,
        )
    )


def trace_search(query: str, trace_id_links: Sequence[Mapping[str, Any]], *, w: int, h: int) -> PanelBuilder:
    """The traces a TraceQL `query` (over the dashboard's filter variables) finds; a trace id
    carries `trace_id_links`."""
    return trace_table(
        Common(
            "Trace Search",
            "Traces matching the service, operation, minimum duration and status filters (TraceQL). "
            "A trace id opens the trace or its logs.",
            w=w,
            h=h,
        ),
        TraceQuery(query, limit=50),
        column_links={"traceID": trace_id_links},
    )


def span_duration_histogram(services: tuple[str, ...], *, w: int) -> PanelBuilder:
    return duration_heatmap(
        "Trace Duration Histogram",
        "Distribution of span durations of the selected services.",
        catalog.SPANMETRICS_LATENCY,
        services,
        w=w,
    )


def span_duration_p95_by_service(services: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Span Duration p95 by Service", "95th percentile span duration, per service (5 minute window).", "s", w=w
        ),
        [
            Query(
                promql.recorded_quantile(0.95, rec.SPAN_LATENCY_BUCKET_RATE5M.record, services, ("service",)),
                "{{service}}",
            )
        ],
    )


def requests_between_services(servers: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Requests Between Services",
            "Calls per second on each edge of the service graph (solid) and the failed ones (dashed).",
            "reqps",
            w=w,
            min=0,
        ),
        [
            Query(promql.selector(rec.SERVICE_GRAPH_REQUEST_RATE5M.record, servers), "{{client}} → {{server}}"),
            Query(
                promql.selector(rec.SERVICE_GRAPH_REQUEST_FAILED_RATE5M.record, servers),
                "{{client}} → {{server}} failed",
            ),
        ],
        dashed_refs=("B",),
    )


def server_latency_p95_between_services(servers: tuple[str, ...], *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Server Latency p95 Between Services",
            "95th percentile server-side duration of calls on each edge of the service graph.",
            "s",
            w=w,
        ),
        [
            Query(
                promql.recorded_quantile(
                    0.95, rec.SERVICE_GRAPH_REQUEST_SERVER_SECONDS_BUCKET_RATE5M.record, servers, ("client", "server")
                ),
                "{{client}} → {{server}}",
            )
        ],
    )


def logs_for_trace(*, w: int, h: int) -> PanelBuilder:
    """Loki's log lines carrying the trace id of the dashboard's `$trace_id` variable."""
    return logs(
        Common(
            "Logs for Selected Trace",
            "Log lines that carry the trace id in `$trace_id` (set it from the trace search table).",
            w=w,
            h=h,
        ),
        LogQuery('{namespace=~".+"} |= "$trace_id"'),
    )
