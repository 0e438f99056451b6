"""Panel factories: the repeated panel shapes of the dashboards, on grafana-foundation-sdk; the
topic modules beside this one (`gpu`, `gpm`, `training`, `checkpoint`, `traces`, ...) hold every
panel the dashboards show, one function per panel. A new panel goes into its topic module (a new
topic gets its own module) and the dashboards that show it compose it into their rows.

Every factory takes a title, a description and (for panels that show numbers) a Grafana unit, so
a panel without them cannot be written. Targets get their `refId` (A, B, ...) and a datasource
that points at a dashboard variable (`${datasource}`, `${tempo}`, `${loki}`) here, because the
SDK leaves both empty unless they are set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from grafana_foundation_sdk.builders import bargauge as bargauge_builder
from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import gauge as gauge_builder
from grafana_foundation_sdk.builders import heatmap as heatmap_builder
from grafana_foundation_sdk.builders import logs as logs_builder
from grafana_foundation_sdk.builders import loki as loki_builder
from grafana_foundation_sdk.builders import nodegraph as nodegraph_builder
from grafana_foundation_sdk.builders import prometheus as prometheus_builder
from grafana_foundation_sdk.builders import stat as stat_builder
from grafana_foundation_sdk.builders import table as table_builder
from grafana_foundation_sdk.builders import tempo as tempo_builder
from grafana_foundation_sdk.builders import timeseries as timeseries_builder
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as dashboard_model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import prometheus as prometheus_model
from grafana_foundation_sdk.models import tempo as tempo_model

from foxhunt_trainer.contract import catalog
from observability import promql
from observability.config import ObservabilityConfig

PanelBuilder = cogbuilder.Builder[dashboard_model.Panel]

# Datasource variables every dashboard declares (see dashboards.variables).
PROMETHEUS_VARIABLE = "datasource"
TEMPO_VARIABLE = "tempo"
LOKI_VARIABLE = "loki"
PROMETHEUS = common_model.DataSourceRef(type_val="prometheus", uid=f"${{{PROMETHEUS_VARIABLE}}}")
TEMPO = common_model.DataSourceRef(type_val="tempo", uid=f"${{{TEMPO_VARIABLE}}}")
LOKI = common_model.DataSourceRef(type_val="loki", uid=f"${{{LOKI_VARIABLE}}}")

# Legend of every time series: a table with the last and the minimum value.
LEGEND_CALCS = ("lastNotNull", "min")

# How a time series draws its thresholds (line, area, dashed, ...).
ThresholdStyle = common_model.GraphThresholdsStyleMode

# Colours Grafana names in its palette.
GREEN, YELLOW, ORANGE, RED, BLUE = "green", "yellow", "orange", "red", "blue"


@dataclass(frozen=True)
class Query:
    """A PromQL target."""

    expr: str
    legend: str = ""
    instant: bool = False
    format: Literal["time_series", "table", "heatmap"] = "time_series"
    # Ask Prometheus for the exemplars of the queried series too: Grafana draws them, and the
    # Prometheus datasource links their `trace_id` to Tempo (the trainers' duration histograms).
    exemplar: bool = False


@dataclass(frozen=True)
class TraceQuery:
    """A Tempo target: a TraceQL search or the service map."""

    query: str = ""
    query_type: Literal["traceql", "serviceMap"] = "traceql"
    limit: int = 20
    table_type: Literal["traces", "spans"] = "traces"


@dataclass(frozen=True)
class LogQuery:
    """A Loki (LogQL) target."""

    expr: str


@dataclass(frozen=True)
class ColourSteps:
    """A panel's colours by value (Grafana's absolute "thresholds"): a base colour, then (value,
    colour) from which the colour applies. The alert thresholds they often show are
    `observability.thresholds.Thresholds` (`dashboards.threshold_steps` turns one into the other)."""

    base: str
    steps: tuple[tuple[float, str], ...] = ()

    def builder(self) -> dashboard_builder.ThresholdsConfig:
        ordered = [dashboard_model.Threshold(value=None, color=self.base)]
        ordered += [dashboard_model.Threshold(value=v, color=c) for v, c in self.steps]
        values = [v for v, _ in self.steps]
        if values != sorted(values):
            raise ValueError(f"threshold steps must ascend: {values}")
        return dashboard_builder.ThresholdsConfig().mode(dashboard_model.ThresholdsMode.ABSOLUTE).steps(ordered)


NEUTRAL = ColourSteps(GREEN)


@dataclass(frozen=True)
class Common:
    """What every panel has: title, description, size, unit and value range."""

    title: str
    description: str
    unit: str = ""
    w: int = 12
    h: int = 8
    min: float | None = None
    max: float | None = None
    thresholds: ColourSteps = NEUTRAL
    decimals: int | None = None
    mappings: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # value -> (text, colour)

    def __post_init__(self) -> None:
        if not self.title or not self.description:
            raise ValueError("every panel needs a title and a description")
        if not 1 <= self.w <= 24 or self.h < 1:
            raise ValueError(f"{self.title}: bad size {self.w}x{self.h}")


def ref_id(index: int) -> str:
    """A, B, ..., Z, AA, AB, ... (Grafana's own refId sequence)."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return letters


def prometheus_targets(queries: Sequence[Query]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    targets: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        t = prometheus_builder.Dataquery().expr(q.expr).ref_id(ref_id(i)).datasource(PROMETHEUS)
        t = t.editor_mode(prometheus_model.QueryEditorMode.CODE)
        t = t.legend_format(q.legend or "__auto")
        t = t.instant() if q.instant else t.range()
        if q.format != "time_series":
            t = t.format(prometheus_model.PromQueryFormat(q.format))
        if q.exemplar:
            t = t.exemplar(True)
        targets.append(t)
    return targets


def tempo_targets(queries: Sequence[TraceQuery]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    targets: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        t = tempo_builder.Dataquery().ref_id(ref_id(i)).datasource(TEMPO).query_type(q.query_type)
        if q.query_type == "traceql":
            t = t.query(q.query).limit(q.limit).table_type(tempo_model.SearchTableType(q.table_type))
        targets.append(t)
    return targets


def loki_targets(queries: Sequence[LogQuery]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    return [
        loki_builder.Dataquery().expr(q.expr).ref_id(ref_id(i)).datasource(LOKI).query_type("range")
        for i, q in enumerate(queries)
    ]


def _value_mappings(mappings: Mapping[str, tuple[str, str]]) -> list[dashboard_model.ValueMapping]:
    if not mappings:
        return []
    options = {
        value: dashboard_model.ValueMappingResult(text=text, color=colour, index=i)
        for i, (value, (text, colour)) in enumerate(mappings.items())
    }
    return [dashboard_model.ValueMap(options=options)]


def _common(panel: Any, c: Common, datasource: common_model.DataSourceRef) -> Any:
    """Apply the shared settings to any of the SDK's panel builders (they share these methods)."""
    panel = panel.title(c.title).description(c.description).span(c.w).height(c.h).datasource(datasource)
    if c.unit:
        panel = panel.unit(c.unit)
    if c.min is not None:
        panel = panel.min(c.min)
    if c.max is not None:
        panel = panel.max(c.max)
    if c.decimals is not None:
        panel = panel.decimals(c.decimals)
    panel = panel.thresholds(c.thresholds.builder())
    if c.mappings:
        panel = panel.mappings(_value_mappings(c.mappings))
    return panel


def _legend(table: bool = True) -> common_builder.VizLegendOptions:
    legend = common_builder.VizLegendOptions().show_legend(True).placement(common_model.LegendPlacement.BOTTOM)
    if table:
        return legend.display_mode(common_model.LegendDisplayMode.TABLE).calcs(list(LEGEND_CALCS))
    return legend.display_mode(common_model.LegendDisplayMode.LIST).calcs([])


def _reduce(calcs: Sequence[str]) -> common_builder.ReduceDataOptions:
    return common_builder.ReduceDataOptions().calcs(list(calcs)).values(False).fields("")


def _fixed_colour(colour: str) -> list[dashboard_model.DynamicConfigValue]:
    return [dashboard_model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour})]


def timeseries(
    c: Common,
    queries: Sequence[Query],
    *,
    fill_opacity: float = 10,
    threshold_style: common_model.GraphThresholdsStyleMode | None = None,
    colours_by_ref: Mapping[str, str] | None = None,
    dashed_refs: Sequence[str] = (),
    stacked: bool = False,
    bars: bool = False,
    table_legend: bool = True,
) -> PanelBuilder:
    """A time series with a table legend (last, min); thresholds drawn when `threshold_style` is set."""
    panel = _common(timeseries_builder.Panel(), c, PROMETHEUS)
    panel = panel.targets(prometheus_targets(queries)).legend(_legend(table_legend)).fill_opacity(fill_opacity)
    panel = panel.tooltip(
        common_builder.VizTooltipOptions()
        .mode(common_model.TooltipDisplayMode.MULTI)
        .sort(common_model.SortOrder.DESCENDING)
    )
    if bars:
        panel = panel.draw_style(common_model.GraphDrawStyle.BARS)
    if stacked:
        panel = panel.stacking(common_builder.StackingConfig().mode(common_model.StackingMode.NORMAL))
    if threshold_style is not None:
        panel = panel.thresholds_style(common_builder.GraphThresholdsStyleConfig().mode(threshold_style))
        panel = panel.color_scheme(dashboard_builder.FieldColor().mode(dashboard_model.FieldColorModeId.THRESHOLDS))
    for ref, colour in (colours_by_ref or {}).items():
        panel = panel.override_by_query(ref, _fixed_colour(colour))
    for ref in dashed_refs:
        dashed = dashboard_model.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})
        panel = panel.override_by_query(ref, [dashed])
    built: PanelBuilder = panel
    return built


def stat(
    c: Common,
    queries: Sequence[Query],
    *,
    calcs: Sequence[str] = ("lastNotNull",),
    background: bool = False,
    sparkline: bool = False,
    name_only: bool = False,
) -> PanelBuilder:
    """A big number per series; `background` colours the whole panel from the thresholds;
    `name_only` shows each series' legend instead of its value (a verdict carried by a label)."""
    panel = _common(stat_builder.Panel(), c, PROMETHEUS).targets(prometheus_targets(queries))
    panel = panel.reduce_options(_reduce(calcs))
    panel = panel.color_mode(
        common_model.BigValueColorMode.BACKGROUND if background else common_model.BigValueColorMode.VALUE
    )
    panel = panel.graph_mode(common_model.BigValueGraphMode.AREA if sparkline else common_model.BigValueGraphMode.NONE)
    panel = panel.text_mode(
        common_model.BigValueTextMode.NAME if name_only else common_model.BigValueTextMode.VALUE_AND_NAME
    )
    panel = panel.color_scheme(dashboard_builder.FieldColor().mode(dashboard_model.FieldColorModeId.THRESHOLDS))
    built: PanelBuilder = panel
    return built


def gauge(c: Common, queries: Sequence[Query], *, calcs: Sequence[str] = ("lastNotNull",)) -> PanelBuilder:
    """A radial gauge between `min` and `max`, coloured by thresholds."""
    if c.min is None or c.max is None:
        raise ValueError(f"{c.title}: a gauge needs min and max")
    panel = _common(gauge_builder.Panel(), c, PROMETHEUS).targets(prometheus_targets(queries))
    panel = panel.reduce_options(_reduce(calcs)).show_threshold_markers(True).show_threshold_labels(False)
    panel = panel.color_scheme(dashboard_builder.FieldColor().mode(dashboard_model.FieldColorModeId.THRESHOLDS))
    built: PanelBuilder = panel
    return built


def bar_gauge(c: Common, queries: Sequence[Query], *, calcs: Sequence[str] = ("lastNotNull",)) -> PanelBuilder:
    """Horizontal bars, one per series (progress of many jobs at once)."""
    panel = _common(bargauge_builder.Panel(), c, PROMETHEUS).targets(prometheus_targets(queries))
    panel = panel.reduce_options(_reduce(calcs)).orientation(common_model.VizOrientation.HORIZONTAL)
    panel = panel.display_mode(common_model.BarGaugeDisplayMode.GRADIENT).show_unfilled(True)
    panel = panel.color_scheme(dashboard_builder.FieldColor().mode(dashboard_model.FieldColorModeId.THRESHOLDS))
    built: PanelBuilder = panel
    return built


def prometheus_table(c: Common, queries: Sequence[Query], *, hidden_columns: Sequence[str] = ()) -> PanelBuilder:
    """A table of instant results (info metrics, targets that are down)."""
    panel = _common(table_builder.Panel(), c, PROMETHEUS).targets(prometheus_targets(queries))
    panel = panel.show_header(True)
    excluded = {name: True for name in ("Time", *hidden_columns)}
    panel = panel.with_transformation(
        dashboard_model.DataTransformerConfig(id_val="organize", options={"excludeByName": excluded})
    )
    built: PanelBuilder = panel
    return built


def heatmap(c: Common, queries: Sequence[Query]) -> PanelBuilder:
    """A heatmap of pre-bucketed histogram data (`sum by (le) (increase(..._bucket[...]))`)."""
    if any(q.format != "heatmap" for q in queries):
        raise ValueError(f"{c.title}: heatmap targets must use format heatmap")
    panel = _common(heatmap_builder.Panel(), c, PROMETHEUS).targets(prometheus_targets(queries))
    panel = panel.calculate(False).cell_gap(1)
    panel = panel.rows_frame(heatmap_builder.RowsHeatmapOptions().layout(common_model.HeatmapCellLayout.LE))
    panel = panel.y_axis(heatmap_builder.YAxisConfig().unit(c.unit).decimals(0))
    panel = panel.color(
        heatmap_builder.HeatmapColorOptions()
        .mode(heatmap_model.HeatmapColorMode.SCHEME)
        .scheme("Oranges")
        .scale(heatmap_model.HeatmapColorScale.EXPONENTIAL)
        .exponent(0.5)
        .steps(64)
    )
    built: PanelBuilder = panel
    return built


def service_map(c: Common) -> PanelBuilder:
    """Tempo's service map (built by Grafana from the service-graph metrics) in a node graph."""
    panel = _common(nodegraph_builder.Panel(), c, TEMPO).targets(tempo_targets([TraceQuery(query_type="serviceMap")]))
    built: PanelBuilder = panel
    return built


def trace_table(
    c: Common, query: TraceQuery, column_links: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
) -> PanelBuilder:
    """A TraceQL search result table; `column_links` sets the data links of named columns."""
    panel = _common(table_builder.Panel(), c, TEMPO).targets(tempo_targets([query])).show_header(True)
    for column, links in (column_links or {}).items():
        value = [dict(link) for link in links]
        panel = panel.override_by_name(column, [dashboard_model.DynamicConfigValue(id_val="links", value=value)])
    built: PanelBuilder = panel
    return built


def logs(c: Common, query: LogQuery) -> PanelBuilder:
    """Log lines from Loki, newest first."""
    panel = _common(logs_builder.Panel(), c, LOKI).targets(loki_targets([query]))
    panel = panel.show_time(True).wrap_log_message(True).enable_log_details(True)
    panel = panel.sort_order(common_model.LogsSortOrder.DESCENDING).dedup_strategy(common_model.LogsDedupStrategy.NONE)
    built: PanelBuilder = panel
    return built


# --- what several topic modules' queries share ------------------------------------------------------
JOB_LEGEND = "{{model_type}} {{job_id}}"
# Red from the first error per second: any error is worth a look.
ERRORS = ColourSteps(GREEN, ((1e-3, RED),))


def legend_of(labels: Sequence[str]) -> str:
    """The legend naming each series by `labels`' values: `{{model_type}} {{job_id}}`."""
    return " ".join(f"{{{{{label}}}}}" for label in labels)


def sum_rate(metric: catalog.Metric, labels: tuple[str, ...], matchers: tuple[str, ...]) -> str:
    """The per-second rate of a counter, summed by `labels`."""
    return promql.aggregate("sum", labels, promql.rate(metric, matchers))


def currency_unit(cfg: ObservabilityConfig) -> str:
    """Grafana unit of the cost estimates: the stack's currency code after the number."""
    return f"suffix: {cfg.currency}"


def duration_heatmap(
    title: str, description: str, metric: catalog.Metric, matchers: tuple[str, ...], *, w: int, exemplar: bool = False
) -> PanelBuilder:
    """A duration histogram's buckets over time (seconds); `exemplar` links the samples' traces."""
    return heatmap(
        Common(title, description, "s", w=w),
        [Query(promql.bucket_increase(metric, matchers), "{{le}}", format="heatmap", exemplar=exemplar)],
    )


# Counts (nodes down, failures in a range): red from the first one.
RED_FROM_ONE = ColourSteps(GREEN, ((1, RED),))
# A 1/0 health gauge in words; ALL_UP colours the lowest of several green only when it is 1.
UP_DOWN = {"1": ("UP", GREEN), "0": ("DOWN", RED)}
ALL_UP = ColourSteps(RED, ((1, GREEN),))


def worst_now(title: str, description: str, unit: str, expr: str, top: int, *, w: int) -> PanelBuilder:
    """The `top` worst members of `expr` now: an instant `topk` table, bounded and free of the churn
    a range topk draws (every member that was in the top k at any step)."""
    return prometheus_table(
        Common(title, description, unit, w=w),
        [Query(f"topk({top}, {expr})", instant=True, format="table")],
        hidden_columns=("Time",),
    )
