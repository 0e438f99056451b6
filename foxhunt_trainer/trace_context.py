"""The IDs of the span that is current in this thread: for log records and metric exemplars.

Outside a span (or inside one that is not sampled: nothing of it reaches Tempo) there are no IDs,
and nothing is attached rather than zeros.
"""

from __future__ import annotations

from opentelemetry import trace

# The exemplar label Grafana's Prometheus datasource links to Tempo (`exemplarTraceIdDestinations`).
EXEMPLAR_TRACE_ID_LABEL = "trace_id"


def current_ids() -> tuple[str, str] | None:
    """(trace_id as 32 hex digits, span_id as 16) of the current sampled span, else None."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def trace_exemplar() -> dict[str, str] | None:
    """`{"trace_id": ...}` for an observation made inside a sampled span, else None (no exemplar)."""
    ids = current_ids()
    return None if ids is None else {EXEMPLAR_TRACE_ID_LABEL: ids[0]}
