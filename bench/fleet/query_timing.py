"""Time PromQL queries against a running Prometheus: dashboard panels and rule groups."""

from __future__ import annotations

import http.client
import math
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dashboards.queries import PanelQuery, dashboard_variables, duration_seconds, substitute_variables
from harness.prometheus import PrometheusApi


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p95_ms: float
    series: int
    runs: int = 0
    error: str = ""  # the failure (timeout, Prometheus' error text) instead of timings

    @staticmethod
    def of(samples_s: Sequence[float], series: int) -> Timing:
        ordered = sorted(samples_s)
        rank = max(0, math.ceil(0.95 * len(ordered)) - 1)  # nearest-rank p95
        return Timing(statistics.median(ordered) * 1000, ordered[rank] * 1000, series, len(ordered))

    @staticmethod
    def failed(error: str) -> Timing:
        return Timing(math.nan, math.nan, 0, 0, error)


# Queries slower than this get fewer timed runs (at least MIN_REPEAT); slower than ONE_RUN_SECONDS,
# the warm-up run is the only one: a run of the benchmark stays within minutes.
SLOW_QUERY_SECONDS = 1.0
MIN_REPEAT = 3
ONE_RUN_SECONDS = 10.0
QUERY_TIMEOUT = "60s"  # Prometheus' own limit (its default is 2m)


class QueryFailed(Exception):
    pass


def run_query(api: PrometheusApi, path: str, params: dict[str, str]) -> int:
    """Run one query and return the number of series in the answer.

    The answer is not decoded: the time measured is Prometheus' (evaluation, JSON encoding,
    transfer to the last byte), not Python's JSON parser, which would dominate for big answers.
    """
    try:
        status, body = api.post_raw(path, {**params, "timeout": QUERY_TIMEOUT})
    except (OSError, http.client.HTTPException) as error:
        raise QueryFailed(f"{type(error).__name__}: {error}") from None
    if status != 200 or not body.startswith(b'{"status":"success"'):
        raise QueryFailed(f"HTTP {status}: {body[:300].decode(errors='replace')}")
    if b'"resultType":"scalar"' in body[:80]:
        return 1
    return body.count(b'{"metric":')


def time_call(call: Callable[[], int], repeat: int) -> Timing:
    """Median and p95 wall time of `call` over `repeat` runs after one warm-up run (fewer runs for
    slow queries, see SLOW_QUERY_SECONDS and ONE_RUN_SECONDS); a failure becomes the result."""
    try:
        started = time.perf_counter()
        series = call()
        first = time.perf_counter() - started
        if first > ONE_RUN_SECONDS:
            return Timing.of([first], series)
        if first > SLOW_QUERY_SECONDS:
            repeat = min(repeat, MIN_REPEAT)
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            series = call()
            samples.append(time.perf_counter() - started)
    except QueryFailed as error:
        return Timing.failed(str(error))
    return Timing.of(samples, series)


@dataclass(frozen=True)
class PanelTiming:
    query: PanelQuery
    expr: str  # substituted
    instant: Timing
    range: Timing

    @property
    def judged(self) -> Timing:
        """The query Grafana runs for this target: instant targets (tables, stats) only ever run
        as one instant query, every other target as a range query."""
        return self.instant if self.query.instant else self.range


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def first_label_values(dashboard: dict[str, Any], api: PrometheusApi) -> dict[str, str]:
    """What Grafana selects on load for each query variable that has neither "All" nor a saved
    value: the first of its label values (the variables here sort alphabetically), in the order
    the variables are listed, so a variable that filters by an earlier one sees its choice."""
    chosen = dashboard_variables(dashboard)
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query" or variable.get("includeAll") or variable["name"] in chosen:
            continue
        match = _LABEL_VALUES.match(str(variable.get("query", "")))
        if match is None:
            raise ValueError(f"variable {variable['name']}: not a label_values() query: {variable.get('query')!r}")
        selector = substitute_variables(match["selector"], chosen)
        values = api.get(f"/api/v1/label/{match['label']}/values", {"match[]": selector})
        if values:
            chosen[variable["name"]] = sorted(values)[0]
    return chosen


def time_panel(api: PrometheusApi, query: PanelQuery, at: float, repeat: int) -> PanelTiming:
    expr = query.substituted
    window = duration_seconds(query.time_range)
    instant = time_call(lambda: run_query(api, "/api/v1/query", {"query": expr, "time": f"{at:.3f}"}), repeat)
    range_params = {"query": expr, "start": f"{at - window:.3f}", "end": f"{at:.3f}", "step": query.step}
    ranged = time_call(lambda: run_query(api, "/api/v1/query_range", range_params), repeat)
    return PanelTiming(query, expr, instant, ranged)


@dataclass(frozen=True)
class GroupTiming:
    name: str
    rules: int
    total: Timing  # the group's evaluation time as Prometheus' rule manager measured it
    slowest_rule: str
    slowest_rule_ms: float
    rule_ms: tuple[tuple[str, float], ...] = ()  # each rule's mean evaluation time
    alerts_by_rule: tuple[tuple[str, int], ...] = ()  # active alerts of each alerting rule, last evaluation


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def recording_levels(groups: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Recording rules by dependency level: level 0 reads raw series only, level n reads level < n.

    Each level is a list of groups (same names and intervals) holding only that level's rules,
    the order in which `promtool tsdb create-blocks-from rules` must backfill them (it cannot
    see what it is writing in the same run).
    """
    recording = [(g, r) for g in groups for r in g["rules"] if "record" in r]
    names = {str(r["record"]) for _, r in recording}
    level: dict[str, int] = {}

    def level_of(rule: dict[str, Any], seen: frozenset[str]) -> int:
        record = str(rule["record"])
        if record in level:
            return level[record]
        deps = {t for t in _NAME.findall(str(rule["expr"])) if t in names and t != record}
        if deps & seen:
            raise ValueError(f"recording rules form a cycle through {sorted(deps & seen)}")
        by_name = {str(r["record"]): r for _, r in recording}
        value = 1 + max((level_of(by_name[d], seen | {record}) for d in deps), default=-1)
        level[record] = value
        return value

    for _, rule in recording:
        level_of(rule, frozenset())
    levels: list[list[dict[str, Any]]] = []
    for n in range(1 + max(level.values(), default=-1)):
        groups_at: dict[str, dict[str, Any]] = {}
        for group, rule in recording:
            if level[str(rule["record"])] == n:
                target = groups_at.setdefault(
                    str(group["name"]), {k: v for k, v in group.items() if k != "rules"} | {"rules": []}
                )
                target["rules"].append(rule)
        levels.append(list(groups_at.values()))
    return levels
