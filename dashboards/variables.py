"""Template variables: datasource pickers, label-value filters, the rate interval, free text."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dashboard_model

from dashboards.panels import LOKI_VARIABLE, PROMETHEUS, PROMETHEUS_VARIABLE, TEMPO_VARIABLE

VariableBuilder = cogbuilder.Builder[dashboard_model.VariableModel]

# The value Grafana substitutes for "All" in a regex matcher.
ALL_VALUE = ".*"
ALL = "$__all"


def _datasource(name: str, plugin: str, label: str, uid: str) -> VariableBuilder:
    variable = dashboard_builder.DatasourceVariable(name).type(plugin).label(label)
    variable = variable.current(dashboard_model.VariableOption(selected=True, text=uid, value=uid))
    description = f"The {plugin} datasource every {plugin} query of this dashboard uses."
    built: VariableBuilder = variable.description(description)
    return built


def prometheus_datasource(uid: str) -> VariableBuilder:
    return _datasource(PROMETHEUS_VARIABLE, "prometheus", "Prometheus", uid)


def tempo_datasource(uid: str) -> VariableBuilder:
    return _datasource(TEMPO_VARIABLE, "tempo", "Tempo", uid)


def loki_datasource(uid: str) -> VariableBuilder:
    return _datasource(LOKI_VARIABLE, "loki", "Loki", uid)


def label_values(
    name: str, label_text: str, metric_selector: str, label: str, *, multi: bool = True, include_all: bool = True
) -> VariableBuilder:
    """`label_values(selector, label)` from Prometheus, refreshed when the time range changes.

    With `include_all` the "All" choice becomes `.*` in queries, so `label=~"$name"` matches
    every value including series that appeared after the dashboard loaded.
    """
    query = f"label_values({metric_selector}, {label})"
    variable = dashboard_builder.QueryVariable(name).label(label_text).datasource(PROMETHEUS).query(query)
    variable = variable.definition(query).refresh(dashboard_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
    variable = variable.sort(dashboard_model.VariableSort.ALPHABETICAL_ASC).multi(multi).include_all(include_all)
    variable = variable.description(f"Filters panels by the `{label}` label.")
    if include_all:
        variable = variable.all_value(ALL_VALUE)
        current = dashboard_model.VariableOption(
            selected=True, text=["All"] if multi else "All", value=[ALL] if multi else ALL
        )
        variable = variable.current(current)
    built: VariableBuilder = variable
    return built


def interval(name: str, label_text: str, values: Sequence[str], description: str) -> VariableBuilder:
    """A fixed list of intervals; the first one is selected."""
    if not values:
        raise ValueError("an interval variable needs values")
    options = [dashboard_model.VariableOption(selected=i == 0, text=v, value=v) for i, v in enumerate(values)]
    variable = dashboard_builder.IntervalVariable(name).label(label_text).values(",".join(values)).options(options)
    variable = variable.current(dashboard_model.VariableOption(selected=True, text=values[0], value=values[0]))
    built: VariableBuilder = variable.auto(False).description(description)
    return built


def custom(name: str, label_text: str, choices: Sequence[tuple[str, str]], description: str) -> VariableBuilder:
    """A fixed list of `text : value` choices; the first one is selected."""
    if not choices:
        raise ValueError("a custom variable needs choices")
    for text, value in choices:
        if "," in text or "," in value:
            raise ValueError(f"custom variable {name}: commas separate choices: {text!r} {value!r}")
    query = ",".join(f"{text} : {value}" for text, value in choices)
    options = [dashboard_model.VariableOption(selected=i == 0, text=t, value=v) for i, (t, v) in enumerate(choices)]
    first_text, first_value = choices[0]
    variable = dashboard_builder.CustomVariable(name).label(label_text).values(query).options(options)
    variable = variable.current(dashboard_model.VariableOption(selected=True, text=first_text, value=first_value))
    built: VariableBuilder = variable.description(description)
    return built


def textbox(name: str, label_text: str, description: str, default: str = "") -> VariableBuilder:
    variable = dashboard_builder.TextBoxVariable(name).label(label_text).default_value(default)
    variable = variable.current(dashboard_model.VariableOption(selected=True, text=default, value=default))
    built: VariableBuilder = variable.description(description)
    return built


def rate_intervals(scrape_interval_seconds: int) -> list[str]:
    """Choices for the minimum query interval: the scrape interval first, then coarser steps."""
    first = f"{scrape_interval_seconds}s"
    coarser = [s for s in ("30s", "1m", "5m", "15m", "1h") if _seconds(s) > scrape_interval_seconds]
    return [first, *coarser]


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(duration[:-1]) * units[duration[-1]]
