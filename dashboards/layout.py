"""Assemble rows of panels into a classic Grafana dashboard and serialise it deterministically.

Rows are row panels (expanded, their panels following them at the top level, which is how
Grafana stores an open row). Panels flow left to right on the 24-column grid and wrap to a new
line when the next one does not fit; ids are assigned in reading order, rows included, so they
are unique and stable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as dashboard_model

from dashboards.panels import PanelBuilder
from dashboards.variables import VariableBuilder

GRID_WIDTH = 24
# Every dashboard of the project carries this tag; the dashboards link to each other through it.
PROJECT_TAG = "foxhunt"


@dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[PanelBuilder]


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    tags: Sequence[str]
    variables: Sequence[VariableBuilder]
    rows: Sequence[Row]
    # Minimum query interval of every panel: the scrape interval, or a variable.
    # Grafana derives `$__rate_interval` from it, so rate windows always span several scrapes.
    min_interval: str = "15s"
    refresh: str = "30s"
    time_from: str = "now-6h"
    links: Sequence[tuple[str, str]] = field(default_factory=tuple)  # (title, url) of external links

    def __post_init__(self) -> None:
        if not 1 <= len(self.uid) <= 40:
            raise ValueError(f"uid {self.uid!r} must have 1 to 40 characters")


def _grid_pos(x: int, y: int, w: int, h: int) -> dashboard_model.GridPos:
    return dashboard_model.GridPos(h=h, w=w, x=x, y=y)


def _place_rows(rows: Sequence[Row], min_interval: str) -> list[dashboard_model.Panel | dashboard_model.RowPanel]:
    placed: list[dashboard_model.Panel | dashboard_model.RowPanel] = []
    y = 0
    for row in rows:
        row_panel = dashboard_builder.Row(row.title).collapsed(False).build()
        row_panel.panels = []
        row_panel.grid_pos = _grid_pos(0, y, GRID_WIDTH, 1)
        placed.append(row_panel)
        y += 1
        x, line_height = 0, 0
        for builder in row.panels:
            panel = builder.build()
            size = panel.grid_pos or _grid_pos(0, 0, GRID_WIDTH // 2, 8)
            w, h = size.w, size.h
            if x + w > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panel.grid_pos = _grid_pos(x, y, w, h)
            panel.interval = min_interval
            placed.append(panel)
            x += w
            line_height = max(line_height, h)
        y += line_height
    for panel_id, placed_panel in enumerate(placed, start=1):
        placed_panel.id_val = panel_id
    return placed


def _builtin_annotations() -> dashboard_builder.AnnotationQuery:
    """Grafana's own "Annotations & Alerts" entry, which the UI adds to every dashboard."""
    return (
        dashboard_builder.AnnotationQuery()
        .name("Annotations & Alerts")
        .datasource(common_model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .type("dashboard")
        .built_in(1)
    )


def assemble(spec: DashboardSpec) -> dict[str, Any]:
    """The dashboard as a plain dict (bare classic dashboard JSON model)."""
    builder = (
        dashboard_builder.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(sorted({PROJECT_TAG, *spec.tags}))
        .editable()
        .tooltip(dashboard_model.DashboardCursorSync.CROSSHAIR)
        .time(spec.time_from, "now")
        .timezone("browser")
        .refresh(spec.refresh)
        .annotation(_builtin_annotations())
        .variables(list(spec.variables))
        .link(
            dashboard_builder.DashboardLink("Foxhunt dashboards")
            .type(dashboard_model.DashboardLinkType.DASHBOARDS)
            .tags([PROJECT_TAG])
            .as_dropdown(True)
            .include_vars(False)
            .keep_time(True)
        )
    )
    for title, url in spec.links:
        builder = builder.link(
            dashboard_builder.DashboardLink(title)
            .type(dashboard_model.DashboardLinkType.LINK)
            .url(url)
            .target_blank(True)
        )
    model = builder.build()
    model.panels = _place_rows(spec.rows, spec.min_interval)
    plain: dict[str, Any] = json.loads(json.dumps(model, cls=JSONEncoder))
    return plain


def to_json(dashboard: dict[str, Any]) -> str:
    """Deterministic JSON text: the SDK's encoder (for any SDK object left inside), sorted keys."""
    return json.dumps(dashboard, cls=JSONEncoder, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
