"""init_observability: OTLP gRPC when OTEL_EXPORTER_OTLP_ENDPOINT is set; otherwise nothing is
exported unless OTEL_TRACES_EXPORTER=console asks for the spans on the console."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from foxhunt_trainer import build_tracer_provider
from foxhunt_trainer.tracing import exporter_choice, span_exporter
from infra import REPO_ROOT


def test_without_an_endpoint_nothing_floods_the_terminal():
    out = io.StringIO()
    provider = build_tracer_provider("train_baseline_rl", environ={}, console=out)
    with provider.get_tracer("test").start_as_current_span("fold"):
        pass
    provider.force_flush()
    provider.shutdown()
    assert out.getvalue() == ""


def test_console_spans_when_asked():
    out = io.StringIO()
    provider = build_tracer_provider("train_baseline_rl", environ={"OTEL_TRACES_EXPORTER": "console"}, console=out)
    with provider.get_tracer("test").start_as_current_span("fold"):
        pass
    provider.force_flush()
    provider.shutdown()
    span = json.loads(out.getvalue())
    assert span["name"] == "fold"
    assert span["resource"]["attributes"]["service.name"] == "train_baseline_rl"


def test_the_exporter_follows_the_endpoint_and_otel_traces_exporter():
    assert exporter_choice(None, {}) == "none" and exporter_choice("", {}) == "none"
    assert exporter_choice("http://tempo:4317", {}) == "otlp"
    assert exporter_choice("http://tempo:4317", {"OTEL_TRACES_EXPORTER": "none"}) == "none"
    assert exporter_choice(None, {"OTEL_TRACES_EXPORTER": "Console"}) == "console"
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER='jaeger': expected one of otlp, console, none"):
        exporter_choice(None, {"OTEL_TRACES_EXPORTER": "jaeger"})
    assert isinstance(span_exporter(None, io.StringIO()), ConsoleSpanExporter)
    assert isinstance(span_exporter("", io.StringIO()), ConsoleSpanExporter)
    assert isinstance(span_exporter("http://tempo:4317", io.StringIO()), OTLPSpanExporter)


def test_with_the_endpoint_variable_spans_reach_an_otlp_grpc_collector(otlp_collector):
    collector, port = otlp_collector
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    provider = build_tracer_provider("train_baseline_rl", environ=environ)
    with provider.get_tracer("test").start_as_current_span("checkpoint_save"):
        pass
    assert provider.force_flush(10_000)
    attributes = collector.wait_for_span("checkpoint_save")
    assert attributes["service.name"] == "train_baseline_rl"
    provider.shutdown()


def test_an_explicit_endpoint_wins_and_otel_service_name_overrides_the_argument(otlp_collector):
    collector, port = otlp_collector
    environ = {"OTEL_SERVICE_NAME": "from-env", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    provider = build_tracer_provider("from-argument", f"http://127.0.0.1:{port}", environ=environ)
    with provider.get_tracer("test").start_as_current_span("epoch"):
        pass
    assert provider.force_flush(10_000)
    assert collector.wait_for_span("epoch")["service.name"] == "from-env"
    provider.shutdown()


def test_resource_attributes_come_from_otel_resource_attributes(otlp_collector, monkeypatch):
    collector, port = otlp_collector
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name=training,k8s.pod.name=train-1")
    provider = build_tracer_provider("trainer", f"http://127.0.0.1:{port}", environ={})
    with provider.get_tracer("test").start_as_current_span("data_load"):
        pass
    assert provider.force_flush(10_000)
    attributes = collector.wait_for_span("data_load")
    assert attributes["k8s.namespace.name"] == "training"
    assert attributes["k8s.pod.name"] == "train-1"
    provider.shutdown()


def test_init_observability_installs_the_global_provider(otlp_collector):
    """In a fresh process (the global provider can be set once): the job template's env is enough."""
    collector, port = otlp_collector
    code = (
        "from opentelemetry import trace\n"
        "from foxhunt_trainer import init_observability\n"
        "provider = init_observability('train_baseline_supervised')\n"
        "assert trace.get_tracer_provider() is provider\n"
        "with trace.get_tracer('t').start_as_current_span('hyperopt_trial'):\n"
        "    pass\n"
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # The startup log line, on stdout in logfmt; outside any span, so without trace IDs.
    assert f'msg="tracing train_baseline_supervised via OTLP gRPC to http://127.0.0.1:{port}"' in done.stdout
    assert "trace_id" not in done.stdout
    assert collector.wait_for_span("hyperopt_trial")["service.name"] == "train_baseline_supervised"
