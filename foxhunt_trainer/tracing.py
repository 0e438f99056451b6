"""`init_observability`: OpenTelemetry tracing and trace-aware logging for a trainer.

With `OTEL_EXPORTER_OTLP_ENDPOINT` set (the training job template sets it to Tempo's OTLP gRPC
port), spans go there through the OTLP gRPC exporter; without it they are not exported, so a
trainer started by hand keeps its terminal for its own output (`OTEL_TRACES_EXPORTER=console`
prints the spans to stderr; `none` turns exporting off even with an endpoint), and one started
from the job template traces to Tempo with no code change. `service.name` is `OTEL_SERVICE_NAME`
when set, else the argument; further resource attributes come from `OTEL_RESOURCE_ATTRIBUTES`
(the SDK reads it).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from foxhunt_trainer.logs import configure_logging

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"  # OpenTelemetry's own variable: otlp, console or none
TRACES_EXPORTERS = ("otlp", "console", "none")
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"

log = logging.getLogger(__name__)


def service_name_from(service_name: str, environ: Mapping[str, str]) -> str:
    return environ.get(SERVICE_NAME_ENV) or service_name


def span_exporter(endpoint: str | None, console: TextIO) -> SpanExporter:
    """OTLP gRPC to `endpoint` when one is given, else the console exporter writing to `console`."""
    if endpoint:
        return OTLPSpanExporter(endpoint=endpoint)
    return ConsoleSpanExporter(out=console)


def exporter_choice(endpoint: str | None, environ: Mapping[str, str]) -> str:
    """`$OTEL_TRACES_EXPORTER` when set; else OTLP with an endpoint and no exporter without one."""
    chosen = (environ.get(TRACES_EXPORTER_ENV) or "").strip().lower()
    if chosen and chosen not in TRACES_EXPORTERS:
        raise ValueError(f"{TRACES_EXPORTER_ENV}={chosen!r}: expected one of {', '.join(TRACES_EXPORTERS)}")
    return chosen or ("otlp" if endpoint else "none")


def build_tracer_provider(
    service_name: str,
    endpoint: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    console: TextIO | None = None,
) -> TracerProvider:
    """A provider exporting to `endpoint` (default `$OTEL_EXPORTER_OTLP_ENDPOINT`), to the console
    (`OTEL_TRACES_EXPORTER=console`) or nowhere (no endpoint, or `OTEL_TRACES_EXPORTER=none`).

    Sets nothing global: `init_observability` installs it.
    """
    env = os.environ if environ is None else environ
    endpoint = endpoint if endpoint is not None else env.get(ENDPOINT_ENV) or None
    resource = Resource.create({SERVICE_NAME: service_name_from(service_name, env)})
    provider = TracerProvider(resource=resource)
    choice = exporter_choice(endpoint, env)
    if choice != "none":
        target = (endpoint or "http://localhost:4317") if choice == "otlp" else None
        provider.add_span_processor(BatchSpanProcessor(span_exporter(target, console or sys.stderr)))
    return provider


def init_observability(service_name: str, endpoint: str | None = None) -> TracerProvider:
    """Install tracing and trace-aware logging for this process; returns the tracer provider.

    Logging (`foxhunt_trainer.logs`): stdout, one record a line, `LOG_FORMAT` (logfmt by
    default, json, text) at `LOG_LEVEL` (INFO by default); records inside a span carry its
    `trace_id` and `span_id`. A bad LOG_FORMAT or LOG_LEVEL raises before anything is installed.
    `endpoint` defaults to `$OTEL_EXPORTER_OTLP_ENDPOINT`; unset or empty means spans are not
    exported unless `OTEL_TRACES_EXPORTER=console` asks for them on stderr (stdout stays the
    logs'). Spans still buffered are flushed at exit.
    """
    configure_logging()
    endpoint = endpoint if endpoint is not None else os.environ.get(ENDPOINT_ENV) or None
    provider = build_tracer_provider(service_name, endpoint)
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    exporter = {
        "otlp": f"OTLP gRPC to {endpoint or 'http://localhost:4317'}",
        "console": "the console (stderr)",
        "none": f"no exporter (set {ENDPOINT_ENV}, or {TRACES_EXPORTER_ENV}=console to print spans)",
    }[exporter_choice(endpoint, os.environ)]
    log.info("tracing %s via %s", provider.resource.attributes.get(SERVICE_NAME), exporter)
    return provider
