"""Tracing of an auto-instrumented job, from the OTEL environment the job template sets.

With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_TRACES_EXPORTER`) set and no tracer provider of the
program's own, the job gets `foxhunt_trainer.tracing.build_tracer_provider`'s provider (the same
exporter choice as `init_observability`) and one `training_job` span from its start to its end,
current in the thread that started it, so the checkpoint and iteration exemplars carry its trace
ID. Log records get `trace_id` and `span_id` attributes inside a sampled span (a formatter shows
them with `%(trace_id)s`); the program's handlers and formats are left as they are.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider

from foxhunt_trainer.autolog.job import script_name
from foxhunt_trainer.trace_context import current_ids
from foxhunt_trainer.tracing import ENDPOINT_ENV, TRACES_EXPORTER_ENV, build_tracer_provider
from foxhunt_trainer.training import JobMetrics


def _stamp_trace_ids() -> None:
    make = logging.getLogRecordFactory()
    if getattr(make, "__foxhunt_autolog__", False):
        return

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = make(*args, **kwargs)
        ids = current_ids()
        if ids is not None:
            made.trace_id, made.span_id = ids
        return made

    record.__foxhunt_autolog__ = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(record)


class JobSpan:
    """The job's span; `end()` ends it and flushes the provider made for it."""

    def __init__(self, span: trace.Span, provider: TracerProvider | None) -> None:
        self.span, self.provider = span, provider

    def end(self) -> None:
        self.span.end()
        if self.provider is not None:
            self.provider.shutdown()


def start(job: JobMetrics) -> JobSpan | None:
    """The job's span, started and made current, when the environment asks for tracing."""
    if not (os.environ.get(ENDPOINT_ENV) or os.environ.get(TRACES_EXPORTER_ENV)):
        return None
    provider = None
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):  # none of the program's
        provider = build_tracer_provider(script_name())
        trace.set_tracer_provider(provider)
    span = trace.get_tracer("foxhunt_trainer.autolog").start_span(
        "training_job", attributes={"job_id": job.job_id, "model_type": job.model_type, "rank": job.rank.rank}
    )
    context.attach(trace.set_span_in_context(span))
    _stamp_trace_ids()
    return JobSpan(span, provider)
