"""Small PromQL building blocks shared by the rule modules (durations, aggregations, counters)."""

from __future__ import annotations

from collections.abc import Sequence

from observability.catalog import Metric, MetricType

_UNITS: tuple[tuple[str, int], ...] = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


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


def _require(metric: Metric, kind: MetricType) -> None:
    if metric.type is not kind:
        raise TypeError(f"{metric.name} is a {metric.type.value}; this expression needs a {kind.value}")


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


def counter_rate(metric: Metric, window_seconds: int, labels: Sequence[str]) -> str:
    """Per-second rate of a counter, summed per `labels`."""
    _require(metric, MetricType.COUNTER)
    return f"sum {by(labels)} (rate({metric.name}[{duration(window_seconds)}]))"


def histogram_quantile(quantile: float, metric: Metric, window_seconds: int, labels: Sequence[str]) -> str:
    """The `quantile` of a histogram over the window, per `labels` (`le` is kept for the quantile)."""
    _require(metric, MetricType.HISTOGRAM)
    keep = by((*labels, "le"))
    return f"histogram_quantile({quantile}, sum {keep} (rate({metric.bucket}[{duration(window_seconds)}])))"


def gauge(metric: Metric, labels: Sequence[str], aggregation: str = "max") -> str:
    """A gauge reduced to `labels` (drops scrape-target labels like `pod`, `instance`)."""
    if metric.type not in (MetricType.GAUGE, MetricType.INFO):
        raise TypeError(f"{metric.name} is a {metric.type.value}, not a gauge")
    return f"{aggregation} {by(labels)} ({metric.name})"
