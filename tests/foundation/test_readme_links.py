"""The README starts with what to run and links the reference pages, every link resolves, and the
reference pages say what Tempo and the log shipper must provide, in the names the project reads."""

from __future__ import annotations

import re
from pathlib import Path

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.logs import LOG_FORMATS
from infra import REPO_ROOT
from observability.datasources import TRACE_TO_LOG_TAGS, TRACE_TO_METRIC_TAGS
from observability.scrape_config import EXEMPLAR_STORAGE_FEATURE

README = (REPO_ROOT / "README.md").read_text()
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
# The first screen of the README: what a newcomer sees before scrolling.
FIRST_SCREEN_LINES = 50
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def section(title: str, page: str) -> str:
    text = (REPO_ROOT / page).read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to '-')."""
    headings = re.findall(r"(?m)^#+ (.+)$", path.read_text())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_first_screen_says_what_each_audience_runs() -> None:
    first = "\n".join(README.splitlines()[:FIRST_SCREEN_LINES])
    # the platform team: render, preview, up (and where the rest of the deployment is)
    assert "make render STACK=" in first and "(#deploying-for-real-platform-team)" in first
    assert "pulumi preview --policy-pack policy" in first and "pulumi up --policy-pack policy" in first
    assert "## Deploying for real (platform team)" in README and "pulumi up --policy-pack policy" in section(
        "Deploying for real (platform team)", "README.md"
    )
    # the ML engineer: the wheel in the image, nothing in the cluster, foxhunt-run locally, where it shows
    assert "wheel in the training image" in first and "nothing to" in first and "`foxhunt-run`" in first
    assert "`foxhunt-run python train.py`" in first and "training cockpit" in first and "manual API" in first
    # the contributor, and the two set-up commands
    assert "`make check`" in first and "`make test`" in first
    assert "## Run it: two commands" in first and "make render  " in first and "make test  " in first


# The integrations table: each row's callable exists where docs/trainer.md says it lives.
INTEGRATION_CALLS = {
    "`watch(job, model, optimizer)`": ("torch.py", "def watch("),
    "`instrument_rank(job)`": ("torch_distributed.py", "def instrument_rank("),
    "`MetricsCallback(job)` in `Trainer(callbacks=...)`": ("lightning.py", "class MetricsCallback("),
    "`MetricsCallback(job)` in `learn(callback=...)`": ("sb3.py", "class MetricsCallback("),
    "`StudyMonitor(job, study)`": ("optuna.py", "class StudyMonitor"),
}


def test_the_integrations_table_names_every_framework_and_calls_that_exist() -> None:
    table = section("Integrations", "README.md")
    assert "| framework | what to call | what it reports |" in table
    for call, (module, definition) in INTEGRATION_CALLS.items():
        assert call in table, call
        source = (REPO_ROOT / "foxhunt_trainer" / "integrations" / module).read_text()
        assert definition in source, (module, definition)
    for name in ("plain PyTorch", "`torch.distributed`", "PyTorch Lightning", "Stable-Baselines3", "Optuna"):
        assert f"| {name}" in table, name


def test_every_relative_link_of_the_readme_and_the_docs_resolves() -> None:
    for page in (REPO_ROOT / "README.md", *DOCS):
        for target in _LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.relative_to(REPO_ROOT)}: link {target} points nowhere"
            if anchor and resolved.suffix == ".md" and resolved.name != "runbooks.md":
                assert anchor in _anchors(resolved), f"{page.relative_to(REPO_ROOT)}: no heading #{anchor} in {path}"
    linked = set(_LINK.findall(README))
    for page in DOCS:
        assert f"docs/{page.name}" in linked, f"the README does not link docs/{page.name}"


def test_the_configuration_section_names_every_tempo_series_and_label_the_dashboards_read() -> None:
    text = section("What Prometheus, Alertmanager and Grafana must be configured with", "docs/configuration.md")
    for metric in catalog.by_producer(catalog.Producer.TEMPO_METRICS_GENERATOR):
        assert f"`{metric.name}`" in text, metric.name
        assert all(f"`{label}`" in text for label in metric.labels), (metric.name, metric.labels)
    assert "`service-graphs`" in text and "`span-metrics`" in text and "remote_write" in text
    for attribute, label in (*TRACE_TO_LOG_TAGS, *TRACE_TO_METRIC_TAGS):
        assert f"`{attribute}`" in text and f"`{label}`" in text
    assert f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}" in text


def test_the_trainer_section_documents_the_log_formats() -> None:
    text = section("Trainer instrumentation and the synthetic trainer", "docs/trainer.md")
    assert all(f"`{fmt}`" in text for fmt in LOG_FORMATS)
    assert "trace_id=" in text and f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}" in text
