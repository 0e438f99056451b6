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


def _dashboard_modules() -> dict[str, Path]:
    """uid -> the module that builds that dashboard."""
    return {uid: Path(importlib.import_module(b.__module__).__file__ or "") for uid, b in dashboards.BUILDERS.items()}


TOPIC_NAMES = frozenset(p.stem for p in TOPICS)
# What building a panel in a dashboard module looks like: a panel factory or a panel's common part.
PANEL_BUILDERS = frozenset(
    {
        "Common",
        "timeseries",
        "stat",
        "gauge",
        "bar_gauge",
        "prometheus_table",
        "heatmap",
        "trace_table",
        "logs",
        "service_map",
    }
)


def _called_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _panel_imports(tree: ast.AST) -> set[str]:
    """What a module imports of the panel package other than its topic modules, and any SDK import."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dashboards.panels":
            found |= {alias.name for alias in node.names if alias.name not in TOPIC_NAMES}
        elif isinstance(node, ast.ImportFrom) and node.module == "dashboards":
            found |= {f"dashboards.{alias.name}" for alias in node.names if alias.name == "panels"}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found |= {m for m in modules if m.startswith("grafana_foundation_sdk") or m == "dashboards.panels"}
    return found


def _literals_outside_rows(tree: ast.AST) -> set[str]:
    """String literals of a module, except the titles given to its rows (`Row("GPU Resources", ...)`)."""
    row_titles = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Row" and node.args
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in row_titles
    }


def test_every_dashboard_module_only_composes_topic_panels() -> None:
    titles = _titles_by_dashboard()
    modules = _dashboard_modules()
    assert set(modules) == set(titles)
    for uid, path in modules.items():
        tree = ast.parse(path.read_text())
        built_here = _called_names(tree) & PANEL_BUILDERS
        assert not built_here, f"{path.name} builds panels inline ({sorted(built_here)}): move them to a topic module"
        imported = _panel_imports(tree)
        assert not imported, (
            f"{path.name} imports {sorted(imported)}: a dashboard composes topic modules of dashboards/panels/ only"
        )
        # A title written in the dashboard module is a panel defined there, even through a topic's shape.
        written_here = titles[uid] & _literals_outside_rows(tree)
        assert not written_here, f"{path.name} writes the panels {sorted(written_here)}: give each its topic function"
