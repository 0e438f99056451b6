"""`init_observability`: OpenTelemetry tracing and trace-aware logging for a trainer.

With `OTEL_EXPORTER_OTLP_ENDPOINT` set (the training job template sets it to Tempo's OTLP gRPC
port), spans go there through the OTLP gRPC exporter; without it they are printed to the console,
so a trainer started by hand behaves as before and one started from the job template traces to
Tempo with no code change. `service.name` is `OTEL_SERVICE_NAME` when set, else the argument;
further resource attributes come from `OTEL_RESOURCE_ATTRIBUTES` (the SDK reads it).
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

from observability.instrument.logs import configure_logging

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"

log = logging.getLogger(__name__)


def service_name_from(service_name: str, environ: Mapping[str, str]) -> str:
    return environ.get(SERVICE_NAME_ENV) or service_name


def span_exporter(endpoint: str | None, console: TextIO) -> SpanExporter:
    """OTLP gRPC to `endpoint` when one is given, else the console exporter writing to `console`."""
    if endpoint:
        return OTLPSpanExporter(endpoint=endpoint)
    return ConsoleSpanExporter(out=console)


def build_tracer_provider(
    service_name: str,
    endpoint: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    console: TextIO | None = None,
) -> TracerProvider:
    """A provider exporting to `endpoint` (default `$OTEL_EXPORTER_OTLP_ENDPOINT`) or the console.

    Sets nothing global: `init_observability` installs it.
    """
    env = os.environ if environ is None else environ
    endpoint = endpoint if endpoint is not None else env.get(ENDPOINT_ENV) or None
    resource = Resource.create({SERVICE_NAME: service_name_from(service_name, env)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(span_exporter(endpoint, console or sys.stderr)))
    return provider


def init_observability(service_name: str, endpoint: str | None = None) -> TracerProvider:
    """Install tracing and trace-aware logging for this process; returns the tracer provider.

    Logging (`observability.instrument.logs`): stdout, one record a line, `LOG_FORMAT` (logfmt by
    default, json, text) at `LOG_LEVEL` (INFO by default); records inside a span carry its
    `trace_id` and `span_id`. A bad LOG_FORMAT or LOG_LEVEL raises before anything is installed.
    `endpoint` defaults to `$OTEL_EXPORTER_OTLP_ENDPOINT`; unset or empty means console spans
    (to stderr, leaving stdout to the logs). Spans still buffered are flushed at exit.
    """
    configure_logging()
    endpoint = endpoint if endpoint is not None else os.environ.get(ENDPOINT_ENV) or None
    provider = build_tracer_provider(service_name, endpoint)
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    exporter = f"OTLP gRPC to {endpoint}" if endpoint else "the console"
    log.info("tracing %s via %s", provider.resource.attributes.get(SERVICE_NAME), exporter)
    return provider
