"""Panels by topic: a panel that more than one dashboard shows is written once, in its topic module
under dashboards/panels/, and the dashboards compose it; every dashboard says whom it is for."""

from __future__ import annotations

import ast
import collections
import importlib
from pathlib import Path

import dashboards
from observability.config import ObservabilityConfig

PACKAGE = Path(dashboards.__file__).parent
TOPICS = sorted(p for p in (PACKAGE / "panels").glob("*.py") if p.name != "__init__.py")


def _titles_by_dashboard() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for uid, board in dashboards.build_all(ObservabilityConfig()).items():
        inner = [q for p in board["panels"] for q in (p.get("panels") or [p])]
        out[uid] = {p["title"] for p in inner if p["type"] != "row"}
    return out


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_a_panel_on_several_dashboards_is_written_once_in_a_topic_module() -> None:
    shown = collections.Counter(t for titles in _titles_by_dashboard().values() for t in titles)
    shared = {title for title, count in shown.items() if count > 1}
    assert shared, "no panel is shared: the topic modules compose nothing"
    in_topics = set().union(*(_string_literals(p) for p in TOPICS))
    dashboard_modules = [
        PACKAGE / f"{builder.__module__.rsplit('.', 1)[-1]}.py" for builder in dashboards.BUILDERS.values()
    ]
    for title in sorted(shared):
        assert title in in_topics, (
            f"{title!r} is on several dashboards but no topic module in dashboards/panels/ builds it"
        )
        for module in dashboard_modules:
            assert title not in _string_literals(module), f"{title!r} is written in {module.name} as well as its topic"


def test_every_dashboard_says_whom_it_is_for() -> None:
    for builder in dashboards.BUILDERS.values():
        doc = importlib.import_module(builder.__module__).__doc__ or ""
        assert "\nFor " in doc, f"{builder.__module__}: the docstring does not say whom the dashboard is for"


# Dashboards whose modules only compose rows: every panel they show is a topic function.
COMPOSED_ONLY = ("training_cockpit",)
# What building a panel in a dashboard module looks like: a panel factory or a panel's common part.
PANEL_BUILDERS = frozenset(
    {"Common", "timeseries", "stat", "gauge", "bar_gauge", "prometheus_table", "heatmap", "trace_table", "logs"}
)


def _called_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "panels":
                names.add(func.attr)
    return names


def test_the_training_cockpit_builds_no_panel_itself() -> None:
    for module in COMPOSED_ONLY:
        built_here = _called_names(PACKAGE / f"{module}.py") & PANEL_BUILDERS
        assert not built_here, f"{module}.py builds panels inline ({sorted(built_here)}): move them to a topic module"
