"""foxhunt_trainer.contract.exposition: format negotiation, both formats written from one registry, exemplars,
the catalog counter without `_total`, and the HTTP server both the poller and the trainer run."""

from __future__ import annotations

import http.client
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import format_trace_id
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.openmetrics.parser import text_string_to_metric_families as _parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.exposition import (
    OPENMETRICS,
    TEXT,
    TEXT_AND_OPENMETRICS,
    TEXT_ONLY,
    CollectorPage,
    Format,
    MetricsHTTPServer,
    negotiate,
    render_openmetrics,
    render_text,
)


def parse_openmetrics(text: str) -> list[Any]:
    """prometheus-client's strict OpenMetrics parser (it rejects what Prometheus would)."""
    return list(_parse_openmetrics(text))  # type: ignore[no-untyped-call]


PROMETHEUS_2_42_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, TEXT),
        ("", TEXT),
        (PROMETHEUS_2_42_ACCEPT, OPENMETRICS),
        ("application/openmetrics-text; version=1.0.0", OPENMETRICS),
        ("text/plain;version=0.0.4", TEXT),
        ("*/*", TEXT),
        ("application/json", TEXT),
        ("text/plain;q=0.9,application/openmetrics-text;q=0.5", TEXT),
        ("application/openmetrics-text;q=0,text/plain;q=0.1", TEXT),
        ("application/openmetrics-text;q=0.3,*/*;q=0.2", OPENMETRICS),
    ],
)
def test_negotiation_follows_the_accept_header(accept: str | None, expected: Format) -> None:
    assert negotiate(accept, TEXT_AND_OPENMETRICS) is expected


def test_a_text_only_page_answers_openmetrics_scrapers_with_text() -> None:
    assert negotiate(PROMETHEUS_2_42_ACCEPT, TEXT_ONLY) is TEXT


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    yield provider
    provider.shutdown()


def exercised_in_spans(provider: TracerProvider) -> tuple[TrainingMetrics, str, str]:
    """A job whose iteration and checkpoint are recorded inside spans: (metrics, trace IDs)."""
    metrics = TrainingMetrics()
    job = metrics.start_job("dqn", "job-1")
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("epoch") as epoch:
        job.record_training_iteration(1, 0.9, 1.0, 0.3)
    with tracer.start_as_current_span("checkpoint_save") as save:
        job.record_checkpoint_save(True, 1.5, 1024)
    job.record_nan_detection("loss")
    job.phases.stop()  # the phase seconds stop moving, so two renders hold the same values
    return (
        metrics,
        format_trace_id(epoch.get_span_context().trace_id),
        format_trace_id(save.get_span_context().trace_id),
    )


def test_openmetrics_carries_the_trace_id_exemplars_of_both_histograms(tracer_provider: TracerProvider) -> None:
    metrics, epoch_trace, save_trace = exercised_in_spans(tracer_provider)
    families = {f.name: f for f in parse_openmetrics(render_openmetrics(metrics.registry).decode())}
    exemplars = {
        name: {(s.labels["le"], s.exemplar.labels["trace_id"]) for s in families[name].samples if s.exemplar}
        for name in (catalog.TRAINING_ITERATION_SECONDS.name, catalog.CHECKPOINT_SAVE_DURATION_SECONDS.name)
    }
    assert exemplars == {
        catalog.TRAINING_ITERATION_SECONDS.name: {("0.5", epoch_trace)},
        catalog.CHECKPOINT_SAVE_DURATION_SECONDS.name: {("2.5", save_trace)},
    }
    assert len(epoch_trace) == 32 and epoch_trace != save_trace


def test_no_exemplar_outside_a_span_or_in_an_unsampled_one() -> None:
    metrics = TrainingMetrics()
    job = metrics.start_job("dqn", "job-1")
    job.record_training_iteration(1, 0.9, 1.0, 0.3)
    unsampled = TracerProvider(sampler=ALWAYS_OFF)
    with unsampled.get_tracer("test").start_as_current_span("epoch"):
        job.record_training_iteration(2, 0.8, 0.9, 0.3)
    assert " # {" not in render_openmetrics(metrics.registry).decode()


def test_the_text_format_has_no_exemplars_and_both_formats_store_the_same_series(
    tracer_provider: TracerProvider,
) -> None:
    metrics, _, _ = exercised_in_spans(tracer_provider)
    text = render_text(metrics.registry).decode()
    assert "trace_id" not in text

    def series(families: Iterable[Any]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}

    # The text parser adds `_total` to counter samples that lack it; undo that to compare names as exposed.
    from_text = {
        (name.removesuffix("_total") if name.startswith(catalog.TRAINING_NAN_COUNT.name) else name, labels): v
        for (name, labels), v in series(parse_text(text)).items()
    }
    from_openmetrics = series(parse_openmetrics(render_openmetrics(metrics.registry).decode()))
    assert from_openmetrics == from_text
    assert (
        catalog.TRAINING_NAN_COUNT.name,
        frozenset({("model_type", "dqn"), ("job_id", "job-1"), ("tensor_type", "loss")}),
    ) in from_openmetrics


def test_the_counter_without_total_is_an_unknown_family_in_openmetrics_under_its_exact_name() -> None:
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "job-1").record_nan_detection("gradient")
    page = render_openmetrics(metrics.registry).decode()
    name = catalog.TRAINING_NAN_COUNT.name
    assert f"# TYPE {name} unknown\n" in page
    assert f'{name}{{job_id="job-1",model_type="dqn",tensor_type="gradient"}} 1.0\n' in page
    assert f"{name}_total" not in page
    saves = catalog.CHECKPOINT_SAVES_TOTAL.name
    assert f"# TYPE {saves.removesuffix('_total')} counter\n" in page
    assert f"# TYPE {name} counter\n" in render_text(metrics.registry).decode()
    assert page.endswith("# EOF\n") and "_created" not in page


def test_client_style_counters_and_escaping_in_both_formats() -> None:
    registry = CollectorRegistry()
    Counter("requests", 'Requests "served"\nby path \\ method.', ["path"], registry=registry).labels('/a"b\\c\n').inc()
    Histogram("latency_seconds", "Latency.", buckets=(0.1,), registry=registry).observe(0.05, {"trace_id": "ab" * 16})
    text = render_text(registry).decode()
    assert '# HELP requests_total Requests "served"\\nby path \\\\ method.\n# TYPE requests_total counter\n' in text
    assert 'requests_total{path="/a\\"b\\\\c\\n"} 1.0\n' in text
    page = render_openmetrics(registry).decode()
    assert '# HELP requests Requests \\"served\\"\\nby path \\\\ method.\n# TYPE requests counter\n' in page
    families = {f.name: f for f in parse_openmetrics(page)}
    assert families["requests"].samples[0].labels == {"path": '/a"b\\c\n'}
    bucket = next(s for s in families["latency_seconds"].samples if s.labels.get("le") == "0.1")
    assert bucket.exemplar.labels == {"trace_id": "ab" * 16} and bucket.exemplar.value == 0.05
    assert {f.name for f in parse_text(text)} == {"requests", "latency_seconds"}


class FailingPage:
    formats = TEXT_ONLY

    def render(self, fmt: Format, requested_at: float | None = None) -> bytes:
        raise RuntimeError("broken")


def fetch(port: int, path: str, accept: str | None = None) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers={"Accept": accept} if accept else {})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type") or ""
    finally:
        connection.close()


def test_the_server_negotiates_serves_health_an_index_and_numbers_scrapes() -> None:
    registry = CollectorRegistry()
    Counter("things", "Things.", registry=registry).inc()
    server = MetricsHTTPServer(("127.0.0.1", 0), CollectorPage(registry), index_page=b"<html>hi</html>").start()
    try:
        assert fetch(server.port, "/metrics", PROMETHEUS_2_42_ACCEPT)[2] == OPENMETRICS.content_type
        assert fetch(server.port, "/metrics?x=1")[1:] == (render_text(registry), TEXT.content_type)
        assert fetch(server.port, "/healthz")[:2] == (200, b"ok\n")
        assert fetch(server.port, "/")[:2] == (200, b"<html>hi</html>")
        assert fetch(server.port, "/other")[0] == 404
        assert server.scrapes.start() == 3  # two scrapes answered before this one
    finally:
        server.stop()


def test_a_page_that_fails_answers_500_and_the_server_keeps_serving() -> None:
    server = MetricsHTTPServer(("127.0.0.1", 0), FailingPage()).start()
    try:
        assert fetch(server.port, "/metrics")[:2] == (500, b"internal error\n")
        assert fetch(server.port, "/healthz")[0] == 200
        assert fetch(server.port, "/")[0] == 404  # no index page given
    finally:
        server.stop()
