"""Lint rules over rendered dashboard JSON (the monitoring mixins' and Grafana's linter's rules).

`problems(dashboard)` returns one line per violation; an empty list means the dashboard passes.
PromQL is read with a real parser after Grafana's variables are substituted; `$__rate_interval`
is substituted by a sentinel duration so the parser can tell which windows came from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from dashboards.queries import VARIABLE, builtin_values, dashboard_variables, panel_queries, substitute_variables
from observability.config import ObservabilityConfig
from observability.promql.fleet_bound import MAX_TOPK, FleetBound
from observability.promql.syntax import (
    SelectorUse,
    is_bucket_series,
    is_counter_series,
    keeps_le,
    quantile_depth,
    selector_uses,
)
from observability.rules import dashboard_recording, jobs, recording

Dashboard = Mapping[str, Any]
Rule = Callable[[Dashboard], list[str]]

UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
GRID_WIDTH = 24
# Panels whose content is numbers, so a unit must say what they count.
NUMERIC_PANELS = {"timeseries", "stat", "gauge", "bargauge", "heatmap", "state-timeline", "histogram", "barchart"}
RATE_FUNCTIONS = {"rate", "irate", "increase"}
DATASOURCE_VARIABLES = {"prometheus": "datasource", "tempo": "tempo", "loki": "loki"}
# Stands in for `$__rate_interval` when parsing; no dashboard writes this window itself.
RATE_INTERVAL_SENTINEL = "4321s"
_SENTINEL = timedelta(seconds=4321)
BUILTINS = {*builtin_values(), "__from", "__to", "__dashboard", "__org", "__user", "__name", "__value"}


def _panels(d: Dashboard) -> Iterator[Mapping[str, Any]]:
    for panel in d.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def _content_panels(d: Dashboard) -> Iterator[Mapping[str, Any]]:
    return (p for p in _panels(d) if p.get("type") != "row")


def dashboard_metadata(d: Dashboard) -> list[str]:
    found = []
    if not UID.match(str(d.get("uid", ""))):
        found.append(f"uid {d.get('uid')!r} must be 1-40 characters of letters, digits, - or _")
    for key in ("title", "tags", "description"):
        if not d.get(key):
            found.append(f"dashboard has no {key}")
    if not isinstance(d.get("schemaVersion"), int):
        found.append("dashboard has no schemaVersion")
    return found


def panel_descriptions(d: Dashboard) -> list[str]:
    return [
        f"panel {p.get('id')} {p.get('title')!r} has no description"
        for p in _content_panels(d)
        if not str(p.get("description", "")).strip() or not str(p.get("title", "")).strip()
    ]


def panel_units(d: Dashboard) -> list[str]:
    found = []
    for p in _content_panels(d):
        numeric = p.get("type") in NUMERIC_PANELS or (
            p.get("type") == "table" and (p.get("datasource") or {}).get("type") == "prometheus"
        )
        if numeric and not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            found.append(f"panel {p.get('id')} {p.get('title')!r} ({p.get('type')}) shows numbers without a unit")
    return found


def datasource_variables(d: Dashboard) -> list[str]:
    """Every target and panel names its datasource through the dashboard variable of its type."""
    declared = {v["name"]: v.get("query") for v in d.get("templating", {}).get("list", []) if v["type"] == "datasource"}
    found = []
    if declared.get("datasource") != "prometheus":
        found.append("no `datasource` variable of type prometheus")
    for p in _content_panels(d):
        refs = [p.get("datasource")] + [t.get("datasource") for t in p.get("targets", [])]
        for ref in refs:
            if not ref:
                found.append(f"panel {p.get('id')} {p.get('title')!r}: a target or the panel has no datasource")
                continue
            variable = DATASOURCE_VARIABLES.get(str(ref.get("type")))
            if variable is None or ref.get("uid") != f"${{{variable}}}":
                found.append(f"panel {p.get('id')} {p.get('title')!r}: datasource {ref} is not ${{{variable}}}")
            elif declared.get(variable) != ref.get("type"):
                found.append(f"panel {p.get('id')}: variable ${variable} of type {ref.get('type')} is not declared")
    return found


def target_ref_ids(d: Dashboard) -> list[str]:
    found = []
    for p in _content_panels(d):
        targets = p.get("targets", [])
        if not targets:
            found.append(f"panel {p.get('id')} {p.get('title')!r} has no targets")
        ref_ids = [t.get("refId") for t in targets]
        if any(not r for r in ref_ids) or len(set(ref_ids)) != len(ref_ids):
            found.append(f"panel {p.get('id')} {p.get('title')!r}: refIds {ref_ids} must be set and unique")
    return found


def panel_ids(d: Dashboard) -> list[str]:
    ids = [p.get("id") for p in _panels(d)]
    found = [
        f"panel {p.get('title')!r} has id {p.get('id')!r}"
        for p in _panels(d)
        if not isinstance(p.get("id"), int) or p["id"] < 1
    ]
    duplicates = sorted({i for i in ids if ids.count(i) > 1 and isinstance(i, int)})
    if duplicates:
        found.append(f"duplicate panel ids {duplicates}")
    return found


def grid_positions(d: Dashboard) -> list[str]:
    """Rectangles fit the 24 columns and do not overlap (collapsed rows' panels excluded)."""
    found = []
    cells: dict[tuple[int, int], Any] = {}
    for p in d.get("panels", []):
        g = p.get("gridPos") or {}
        x, y, w, h = (g.get(k) for k in ("x", "y", "w", "h"))
        if not all(isinstance(v, int) for v in (x, y, w, h)):
            found.append(f"panel {p.get('id')} {p.get('title')!r} has no complete gridPos")
            continue
        assert isinstance(x, int) and isinstance(y, int) and isinstance(w, int) and isinstance(h, int)
        if x < 0 or y < 0 or w < 1 or h < 1 or x + w > GRID_WIDTH:
            found.append(f"panel {p.get('id')} {p.get('title')!r} gridPos {g} does not fit the grid")
            continue
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                other = cells.setdefault((cx, cy), p.get("id"))
                if other != p.get("id"):
                    found.append(f"panels {other} and {p.get('id')} overlap at x={cx} y={cy}")
                    break
            else:
                continue
            break
    return found


def rows(d: Dashboard) -> list[str]:
    found = []
    for p in d.get("panels", []):
        if p.get("type") == "row" and not p.get("collapsed") and p.get("panels"):
            found.append(f"expanded row {p.get('title')!r} holds panels (Grafana drops them)")
    if d.get("panels") and d["panels"][0].get("type") != "row":
        found.append("the first panel is not a row")
    return found


def template_variables(d: Dashboard) -> list[str]:
    """Every variable a query or a panel interval uses is declared (or a Grafana built-in)."""
    declared = {v["name"] for v in d.get("templating", {}).get("list", [])}
    found = []
    for p in _content_panels(d):
        queries = [str(t.get("expr") or t.get("query") or "") for t in p.get("targets", [])]
        texts = [str(p.get("interval", "")), *queries]
        for text in texts:
            for match in VARIABLE.finditer(text):
                name = match.group("plain") or match.group("brackets") or match.group("braced")
                if name not in declared and name not in BUILTINS:
                    found.append(f"panel {p.get('id')} {p.get('title')!r} uses undeclared ${name}")
    return found


def _promql_uses(d: Dashboard) -> Iterator[tuple[str, Mapping[str, Any], SelectorUse]]:
    panels_by_id = {p.get("id"): p for p in _content_panels(d)}
    defaults = dashboard_variables(d)
    for q in panel_queries(d):
        if q.datasource_type != "prometheus":
            continue
        values = {**q.variables, **defaults, "__rate_interval": RATE_INTERVAL_SENTINEL}
        where = f"panel {q.panel_id} {q.panel_title!r} {q.ref_id}"
        try:
            uses = selector_uses(substitute_variables(q.expr, values))
        except ValueError as exc:
            yield where, {}, SelectorUse(f"<unparsable: {exc}>", (), None)
            continue
        targets = panels_by_id[q.panel_id].get("targets", [])
        target: Mapping[str, Any] = next((t for t in targets if t.get("refId") == q.ref_id), {})
        for use in uses:
            yield where, {**target, "panelType": panels_by_id[q.panel_id].get("type")}, use


def promql_parses(d: Dashboard) -> list[str]:
    return [f"{where}: {use.name}" for where, _, use in _promql_uses(d) if use.name.startswith("<unparsable")]


def rate_windows(d: Dashboard) -> list[str]:
    """`rate`, `irate` and `increase` take `$__rate_interval` as their window."""
    return [
        f"{where}: {use.direct_function()}({use.name}[{use.range}]) does not use $__rate_interval"
        for where, _, use in _promql_uses(d)
        if use.direct_function() in RATE_FUNCTIONS and use.range != _SENTINEL
    ]


def counters_under_rate(d: Dashboard) -> list[str]:
    """Counters (and histogram series) are only read through `rate`/`irate`/`increase`."""
    return [
        f"{where}: counter {use.name} outside rate/increase"
        for where, _, use in _promql_uses(d)
        if is_counter_series(use.name) and (use.direct_function() not in RATE_FUNCTIONS or use.range is None)
    ]


def histograms_by_le(d: Dashboard) -> list[str]:
    """Bucket series reach `histogram_quantile` (or a heatmap) with `le` kept by every aggregation."""
    found = []
    for where, target, use in _promql_uses(d):
        if not is_bucket_series(use.name):
            continue
        quantile_at = quantile_depth(use)
        heatmap = target.get("panelType") == "heatmap" and target.get("format") == "heatmap"
        if quantile_at is None and not heatmap:
            found.append(f"{where}: {use.name} is not under histogram_quantile nor in a heatmap")
        elif not keeps_le(use, 0 if quantile_at is None else quantile_at):
            found.append(f"{where}: an aggregation over {use.name} drops the le label")
    return found


def recorded_expressions() -> dict[str, str]:
    """record -> expression of every recording rule a dashboard may read (the alert engineer's
    groups, the per-job GPU group and the dashboards' own; the expressions' shapes do not depend on
    the config, only the prices in the cost rules do)."""
    cfg = ObservabilityConfig()
    groups = [
        *recording.recording_groups(cfg),
        *jobs.job_groups(cfg),
        *dashboard_recording.dashboard_recording_groups(cfg),
    ]
    return {str(r["record"]): str(r["expr"]) for g in groups for r in g["rules"] if "record" in r}


def fleet_bounded(d: Dashboard) -> list[str]:
    """No Prometheus target returns one series per GPU or node (see `observability.promql.fleet_bound`)."""
    bound = FleetBound(recorded_expressions())
    found = []
    for q in panel_queries(d):
        if q.datasource_type != "prometheus":
            continue
        try:
            kept = bound.member_labels(q.substituted)
        except ValueError:
            continue  # promql-parses reports it
        if kept:
            found.append(
                f"panel {q.panel_id} {q.panel_title!r} {q.ref_id}: one series per {'/'.join(sorted(kept))}; "
                f"aggregate it or use topk/bottomk (k <= {MAX_TOPK})"
            )
    return found


RULES: dict[str, Rule] = {
    "dashboard-metadata": dashboard_metadata,
    "panel-description": panel_descriptions,
    "panel-units": panel_units,
    "datasource-variable": datasource_variables,
    "target-refid": target_ref_ids,
    "panel-ids": panel_ids,
    "grid-positions": grid_positions,
    "rows": rows,
    "template-variables": template_variables,
    "promql-parses": promql_parses,
    "rate-interval": rate_windows,
    "counter-under-rate": counters_under_rate,
    "histogram-quantile-le": histograms_by_le,
    "fleet-bounded": fleet_bounded,
}


def problems(dashboard: Dashboard) -> list[str]:
    """Every violation of every rule, as `rule: message` lines."""
    return [f"{name}: {message}" for name, rule in RULES.items() for message in rule(dashboard)]
