"""Training job panels: the jobs' states, as the fleet overview and the job view show them."""

from __future__ import annotations

from dashboards.panels import Common, PanelBuilder, Query, stat, timeseries
from observability import catalog, promql


def jobs_by_status_now(*, w: int) -> PanelBuilder:
    """Running, pending and failed jobs now (a big number each)."""
    running = promql.gauge(catalog.TRAINING_JOBS_BY_STATUS, (promql.regex_matcher("status", "running|pending|failed"),))
    return stat(
        Common("Training Jobs by Status", "Running, pending and failed training jobs.", "short", w=w),
        [Query(promql.aggregate("sum", ("status",), running), "{{status}}")],
    )


def jobs_by_status_over_time(*, w: int) -> PanelBuilder:
    """Jobs in every state, stacked over time."""
    return timeseries(
        Common(
            "Training Jobs by Status",
            "Training jobs in each state (pending, running, completed, failed, ...).",
            "short",
            w=w,
            min=0,
        ),
        [Query(promql.aggregate("sum", ("status",), promql.gauge(catalog.TRAINING_JOBS_BY_STATUS)), "{{status}}")],
        stacked=True,
    )
