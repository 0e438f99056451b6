"""Trace panels from Tempo's metrics generator (span metrics, read through the dashboard recording
rules): span rate and error share per service. `services` filters the services shown; `with_total`
adds the sum over every service."""

from __future__ import annotations

from dashboards.panels import GREEN, RED, YELLOW, ColourSteps, Common, PanelBuilder, Query, ThresholdStyle, timeseries
from observability import promql
from observability.rules import dashboard_recording as rec

ERROR_SHARE = ColourSteps(GREEN, ((0.01, YELLOW), (0.05, RED)))


def span_rate(title: str, description: str, services: tuple[str, ...], *, with_total: bool, w: int) -> PanelBuilder:
    calls = promql.selector(rec.SPAN_CALLS_RATE5M.record, services)
    total = [Query(f"sum({calls})", "all services")] if with_total else []
    return timeseries(Common(title, description, "cps", w=w, min=0), [Query(calls, "{{service}}"), *total])


def span_error_ratio(title: str, description: str, services: tuple[str, ...], *, with_total: bool) -> PanelBuilder:
    calls = promql.selector(rec.SPAN_CALLS_RATE5M.record, services)
    errors = promql.selector(rec.SPAN_ERRORS_RATE5M.record, services)
    total = [Query(f"sum({errors}) / sum({calls})", "all services")] if with_total else []
    return timeseries(
        Common(title, description, "percentunit", w=12, min=0, max=1, thresholds=ERROR_SHARE),
        [Query(promql.selector(rec.SPAN_ERROR_RATIO_RATE5M.record, services), "{{service}}"), *total],
        threshold_style=ThresholdStyle.LINE,
    )
