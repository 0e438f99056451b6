"""Every query of a rendered dashboard, and Grafana's variable substitution, for tools and tests.

`panel_queries(dashboard)` lists each target with what is needed to run it outside Grafana
(datasource, expression, the step the panel would use); `substitute_variables(expr, values)`
turns an expression with template variables and Grafana built-ins into plain PromQL the way
Grafana would with the dashboard's defaults, so `promtool`, a parser or a live Prometheus can
take it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Grafana's own variable syntax: $var, ${var}, ${var:format}, ${var.field}, [[var]], [[var:format]].
VARIABLE = re.compile(
    r"\$(?P<plain>\w+)"
    r"|\[\[(?P<brackets>\w+?)(?::(?P<brackets_format>\w+))?\]\]"
    r"|\$\{(?P<braced>\w+)(?:\.(?P<field>[^:}]+))?(?::(?P<format>[^}]+))?\}"
)

# What a variable without a value becomes: in a label matcher, "anything".
ANY = ".*"

DURATION = re.compile(r"^(\d+)(ms|s|m|h|d|w|y)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

DEFAULT_STEP = "15s"
DEFAULT_RANGE = "1h"


def duration_seconds(duration: str) -> float:
    """Seconds in a single-unit Prometheus duration such as `15s` or `5m`."""
    match = DURATION.match(duration)
    if not match:
        raise ValueError(f"not a single-unit duration: {duration!r}")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest exact single-unit duration (`60` -> `1m`, `90` -> `90s`, `0.5` -> `500ms`)."""
    if seconds < 1 or seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    for unit in ("w", "d", "h", "m"):
        size = int(_SECONDS[unit])
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def builtin_values(
    step: str = DEFAULT_STEP, time_range: str = DEFAULT_RANGE, scrape_interval: str = ""
) -> dict[str, str]:
    """Grafana's built-in interval/range variables for a panel whose interval is `step`.

    `$__rate_interval` = max(`$__interval` + scrape interval, 4 x scrape interval), as Grafana
    computes it; the scrape interval defaults to the step (the panels' minimum interval).
    """
    step_s = duration_seconds(step)
    scrape_s = duration_seconds(scrape_interval or step)
    range_s = duration_seconds(time_range)
    rate_s = max(step_s + scrape_s, 4 * scrape_s)
    return {
        "__interval": format_duration(step_s),
        "__interval_ms": str(round(step_s * 1000)),
        "__rate_interval": format_duration(rate_s),
        "__rate_interval_ms": str(round(rate_s * 1000)),
        "__range": format_duration(range_s),
        "__range_s": str(round(range_s)),
        "__range_ms": str(round(range_s * 1000)),
    }


def substitute_variables(expr: str, values: Mapping[str, str] | None = None) -> str:
    """Replace template variables and Grafana built-ins in `expr` with concrete values.

    `values` maps variable names (without `$`) to their text; built-ins not given take the
    defaults of `builtin_values()` and any other variable becomes `.*` (the "All" of a label
    filter). Formats (`${var:regex}`, `${var:pipe}`, ...) take the value as given.
    """
    resolved = {**builtin_values(), **(values or {})}

    def replace(match: re.Match[str]) -> str:
        name = match.group("plain") or match.group("brackets") or match.group("braced")
        return resolved.get(name, ANY)

    return VARIABLE.sub(replace, expr)


def variable_names(expr: str) -> set[str]:
    """Names of the variables `expr` refers to (built-ins included)."""
    return {m.group("plain") or m.group("brackets") or m.group("braced") for m in VARIABLE.finditer(expr)}


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel, ready to be run outside Grafana."""

    dashboard_uid: str
    panel_id: int
    panel_title: str
    ref_id: str
    datasource_type: str  # prometheus, tempo or loki
    datasource_uid: str  # the concrete uid the dashboard's datasource variable selects
    expr: str  # PromQL, TraceQL or LogQL as written in the dashboard (with variables)
    step: str  # the panel's minimum interval (the dashboard default when a variable sets it)
    time_range: str  # the dashboard's default time range, e.g. 1h for now-1h
    instant: bool = False
    variables: Mapping[str, str] = field(default_factory=dict)  # defaults, built-ins included

    @property
    def substituted(self) -> str:
        """The expression with the dashboard's default variable values filled in."""
        return substitute_variables(self.expr, self.variables)


def _current_value(variable: Mapping[str, Any]) -> str | None:
    """The variable's default: its `current` value (a text box may be empty), else None."""
    current = variable.get("current")
    if not current:
        return None
    value = current.get("value")
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else "|".join(value)
    if value is None:
        return None
    if value == "$__all":
        return str(variable.get("allValue") or ANY)
    return str(value)


def dashboard_variables(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Each template variable's default value (its `current`, "All" as the variable's allValue)."""
    defaults: dict[str, str] = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        value = _current_value(variable)
        if value is not None:
            defaults[variable["name"]] = value
    return defaults


def _time_range(dashboard: Mapping[str, Any]) -> str:
    start = str(dashboard.get("time", {}).get("from", f"now-{DEFAULT_RANGE}"))
    return start.removeprefix("now-") if DURATION.match(start.removeprefix("now-")) else DEFAULT_RANGE


def _resolve(text: str, defaults: Mapping[str, str]) -> str:
    return VARIABLE.sub(lambda m: defaults.get(m.group("plain") or m.group("brackets") or m.group("braced"), ""), text)


def _panels(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    found: list[Mapping[str, Any]] = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def panel_queries(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    """Every target of every panel of a dashboard JSON model, in panel order."""
    defaults = dashboard_variables(dashboard)
    time_range = _time_range(dashboard)
    queries: list[PanelQuery] = []
    for panel in _panels(dashboard):
        interval = _resolve(str(panel.get("interval") or DEFAULT_STEP), defaults) or DEFAULT_STEP
        for target in panel.get("targets", []):
            datasource = target.get("datasource") or panel.get("datasource") or {}
            kind = str(datasource.get("type", ""))
            expr = target.get("expr") if kind in ("prometheus", "loki") else target.get("query")
            if expr is None and target.get("queryType") == "serviceMap":
                expr = ""
            if expr is None:
                continue
            queries.append(
                PanelQuery(
                    dashboard_uid=str(dashboard["uid"]),
                    panel_id=int(panel["id"]),
                    panel_title=str(panel.get("title", "")),
                    ref_id=str(target.get("refId", "")),
                    datasource_type=kind,
                    datasource_uid=_resolve(str(datasource.get("uid", "")), defaults),
                    expr=str(expr),
                    step=interval,
                    time_range=time_range,
                    instant=bool(target.get("instant", False)) and not bool(target.get("range", False)),
                    variables={**defaults, **builtin_values(interval, time_range)},
                )
            )
    return queries
