"""README says what Tempo and the log shipper must provide, in the names the project reads."""

from __future__ import annotations

from infra import REPO_ROOT
from observability import catalog
from observability.datasources import TRACE_TO_LOG_TAGS, TRACE_TO_METRIC_TAGS
from observability.instrument.logs import LOG_FORMATS
from observability.scrape_config import EXEMPLAR_STORAGE_FEATURE

README = (REPO_ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_configuration_section_names_every_tempo_series_and_label_the_dashboards_read() -> None:
    text = section("What Prometheus, Alertmanager and Grafana must be configured with")
    for metric in catalog.by_producer(catalog.Producer.TEMPO_METRICS_GENERATOR):
        assert f"`{metric.name}`" in text, metric.name
        assert all(f"`{label}`" in text for label in metric.labels), (metric.name, metric.labels)
    assert "`service-graphs`" in text and "`span-metrics`" in text and "remote_write" in text
    for attribute, label in (*TRACE_TO_LOG_TAGS, *TRACE_TO_METRIC_TAGS):
        assert f"`{attribute}`" in text and f"`{label}`" in text
    assert f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}" in text


def test_the_trainer_section_documents_the_log_formats() -> None:
    text = section("Trainer instrumentation and the synthetic trainer")
    assert all(f"`{fmt}`" in text for fmt in LOG_FORMATS)
    assert "trace_id=" in text and f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}" in text
