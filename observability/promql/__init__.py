"""PromQL over the metric catalog: writing it (this module) and reading it (the submodules), for
the rules, the dashboards, the rule tiers and the runbooks alike.

Reading, with a real parser (promql-parser), never with regular expressions:
- `syntax`: which series an expression reads and in which context (`selector_uses`,
  `series_names`, `metric_name`), aggregations, and what the catalog says about a series name.
- `fleet_bound`: whether an expression can return one series per GPU or node (`fleet_sized`).
- `locality`: which scrape target each result comes from, for sharded scraping (`derive`).

Writing: each helper that takes a catalog metric checks its type, so a counter cannot end up outside
`rate`/`increase` or a histogram outside a quantile or a heatmap by accident: the mistake raises
`TypeError` while the rules or dashboards are built, long before a test reads the output.

- Durations and clauses: `duration`, `by`, `on`.
- Names in a text: `identifiers` (every name a text mentions, valid PromQL or not; to read
  an expression use `syntax.series_names`).
- Selectors: `matcher`, `regex_matcher`, `variable_matcher`, `any_of`, `selector`, `gauge`.
- Aggregations: `aggregate`, `gauge_by` (a gauge reduced to some labels).
- Counters: `rate`, `increase` (dashboards, Grafana's `$__rate_interval` by default),
  `counter_rate`, `counter_increased` (rules, a window in seconds).
- Histograms: `histogram_quantile`, `histogram_quantile_rate`, `bucket_increase`,
  `recorded_quantile`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from foxhunt_trainer.contract.catalog import Metric, MetricType

RATE_INTERVAL = "$__rate_interval"
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_UNITS: tuple[tuple[str, int], ...] = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def identifiers(expr: str) -> set[str]:
    """Every name `expr` mentions: series and records, but also functions, keywords and label names,
    so intersect it with the names you look for."""
    return set(_IDENTIFIER.findall(expr))


def duration(seconds: int) -> str:
    """Seconds as a Prometheus duration: 15 -> '15s', 90 -> '1m30s', 86400 -> '1d', 0 -> '0s'."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {seconds}")
    if seconds == 0:
        return "0s"
    parts = []
    rest = seconds
    for unit, size in _UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def by(labels: Sequence[str]) -> str:
    """The `by (...)` clause of an aggregation."""
    return f"by ({', '.join(labels)})"


def on(labels: Sequence[str]) -> str:
    """The `on (...)` clause of a binary operation's vector matching."""
    return f"on ({', '.join(labels)})"


# --- selectors -----------------------------------------------------------------------------------


def matcher(label: str, value: str) -> str:
    """`label="value"`."""
    return f'{label}="{value}"'


def regex_matcher(label: str, pattern: str) -> str:
    """`label=~"pattern"`."""
    return f'{label}=~"{pattern}"'


def variable_matcher(label: str, variable: str) -> str:
    """`label=~"$variable"`: works for single, multi and include-all variables alike."""
    return regex_matcher(label, f"${variable}")


def any_of(values: Sequence[str]) -> str:
    """A regex matching exactly one of `values` (Prometheus anchors label regexes)."""
    if not values:
        raise ValueError("any_of needs at least one value")
    return "|".join(sorted(set(values)))


def selector(series: str, matchers: Sequence[str] = ()) -> str:
    """`series{m1, m2}` or the bare series name."""
    return f"{series}{{{', '.join(matchers)}}}" if matchers else series


def _require(metric: Metric, *kinds: MetricType) -> None:
    if metric.type not in kinds:
        expected = " or ".join(kind.value for kind in kinds)
        raise TypeError(f"{metric.name} is a {metric.type.value}; this expression needs a {expected}")


def gauge(metric: Metric, matchers: Sequence[str] = ()) -> str:
    """The selector of a gauge or info metric (their values are meaningful on their own)."""
    _require(metric, MetricType.GAUGE, MetricType.INFO)
    return selector(metric.name, matchers)


# --- aggregations --------------------------------------------------------------------------------


def aggregate(operator: str, labels: Sequence[str], expr: str) -> str:
    """`operator by (labels) (expr)`, or `operator(expr)` without labels."""
    if not labels:
        return f"{operator}({expr})"
    return f"{operator} {by(labels)} ({expr})"


def gauge_by(metric: Metric, labels: Sequence[str], aggregation: str = "max") -> str:
    """A gauge reduced to `labels` (drops scrape-target labels like `pod`, `instance`)."""
    _require(metric, MetricType.GAUGE, MetricType.INFO)
    return f"{aggregation} {by(labels)} ({metric.name})"


# --- counters ------------------------------------------------------------------------------------


def rate(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`rate(counter{...}[window])`."""
    _require(metric, MetricType.COUNTER)
    return f"rate({selector(metric.name, matchers)}[{window}])"


def increase(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`increase(counter{...}[window])`."""
    _require(metric, MetricType.COUNTER)
    return f"increase({selector(metric.name, matchers)}[{window}])"


def counter_rate(metric: Metric, window_seconds: int, labels: Sequence[str]) -> str:
    """Per-second rate of a counter, summed per `labels`."""
    return f"sum {by(labels)} ({rate(metric, window=duration(window_seconds))})"


def counter_increased(metric: Metric, window_seconds: int, labels: Sequence[str]) -> str:
    """True (per `labels`) when the counter grew within the window, including its first appearance.

    `increase()` needs two samples, so a labelled counter that is created by its first increment
    (prometheus-client creates a child on `.labels(...).inc()`) would never be seen by it. The
    second branch catches a series group that is new within the window and already above zero.
    It matches by `labels` only, so a restarted exporter pod (new `pod`/`instance` labels, same
    counts) is not a new group and does not fire.

    Cost at fleet scale: both branches filter before they aggregate (counters and their increases
    are never negative, so `sum(x > 0)` selects the same groups as `sum(x) > 0` with the same
    value), and the "was it there a window ago" side is a set match (`unless on`) rather than a
    second aggregation; nearly every series of an error counter is an unchanged 0, so the sums
    see almost nothing.
    """
    _require(metric, MetricType.COUNTER)
    window = duration(window_seconds)
    agg = f"sum {by(labels)}"
    return (
        f"{agg} (increase({metric.name}[{window}]) > 0)\n"
        f"or\n"
        f"({agg} ({metric.name} > 0) unless {on(labels)} {metric.name} offset {window})"
    )


# --- histograms ----------------------------------------------------------------------------------


def histogram_quantile(quantile: float, buckets_by_le: str) -> str:
    """`histogram_quantile(q, buckets)`; `buckets_by_le` must keep the `le` label."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile {quantile} outside [0, 1]")
    return f"histogram_quantile({quantile:g}, {buckets_by_le})"


def histogram_quantile_rate(quantile: float, metric: Metric, window_seconds: int, labels: Sequence[str]) -> str:
    """The `quantile` of a histogram over the window, per `labels` (`le` is kept for the quantile)."""
    _require(metric, MetricType.HISTOGRAM)
    buckets = f"sum {by((*labels, 'le'))} (rate({metric.bucket}[{duration(window_seconds)}]))"
    return histogram_quantile(quantile, buckets)


def bucket_increase(metric: Metric, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    """`sum by (le) (increase(histogram_bucket{...}[window]))`: the input of a heatmap panel."""
    _require(metric, MetricType.HISTOGRAM)
    return aggregate("sum", ("le",), f"increase({selector(metric.bucket, matchers)}[{window}])")


def recorded_quantile(
    quantile: float, recorded_bucket_rate: str, matchers: Sequence[str] = (), labels: Sequence[str] = ()
) -> str:
    """A quantile over a recording rule that already holds per-`le` bucket rates."""
    if "_bucket:" not in recorded_bucket_rate:
        raise TypeError(f"{recorded_bucket_rate} is not a recorded bucket rate")
    return histogram_quantile(quantile, aggregate("sum", ("le", *labels), selector(recorded_bucket_rate, matchers)))
