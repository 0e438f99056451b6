"""The `$cluster` variable: dashboards over a global tier that holds more than one cluster.

Every Prometheus server of a stack carries the stack's cluster name as the external label
`cluster`, so at the global tier (Thanos Query, Mimir, or a Prometheus that several clusters
remote-write to) every series, recorded ones included, says which cluster it came from (the
global tier's own records carry it as a rule label: `observability.rules.tier_rule_groups`). With
more than one cluster (`cfg.clusters`), `with_cluster_variable(dashboard, cfg)` adds a `cluster`
query variable (this stack's cluster selected, "All" available) and filters every vector selector
of every Prometheus query, and of every `label_values()` variable, by `cluster=~"$cluster"`.

The filter is added with a real PromQL parser (promql-parser): each query is parsed, every
vector selector gets the matcher, and the expression is printed again. Grafana variables outside
string literals (only `$__rate_interval` and its kind, in range brackets) are swapped for
placeholder durations while the query is parsed and put back afterwards. With one cluster the
dashboards are left exactly as they are.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import promql_parser as pp

from dashboards.panels import PROMETHEUS_VARIABLE
from dashboards.queries import VARIABLE
from observability.config import ObservabilityConfig

CLUSTER_LABEL = "cluster"
CLUSTER_VARIABLE = "cluster"
CLUSTER_MATCHER = f'{CLUSTER_LABEL}=~"${CLUSTER_VARIABLE}"'
# The series the variable lists clusters from: every scraped target has `up`.
CLUSTER_SOURCE = "up"
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>\w+)\)$", re.DOTALL)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_PLACEHOLDER_BASE_SECONDS = 8_000_000


def multi_cluster(cfg: ObservabilityConfig) -> bool:
    return len(cfg.clusters) > 1


def _protect(expr: str) -> tuple[str, dict[str, str]]:
    """`expr` with each Grafana variable outside string literals replaced by a unique duration."""
    spans = [m.span() for m in _STRING.finditer(expr)]
    originals: dict[str, str] = {}
    out, last = [], 0
    for match in VARIABLE.finditer(expr):
        if any(start <= match.start() < end for start, end in spans):
            continue
        name = match.group(0)
        seconds = _PLACEHOLDER_BASE_SECONDS + list(dict.fromkeys([*originals.values(), name])).index(name)
        printed = pp.display_duration(timedelta(seconds=seconds))
        originals[printed] = name
        out.append(expr[last : match.start()])
        out.append(f"{seconds}s")
        last = match.end()
    out.append(expr[last:])
    return "".join(out), originals


def _with_matcher(node: pp.Expr) -> pp.Expr | None:
    if not isinstance(node, pp.VectorSelector):
        return None
    if any(m.name == CLUSTER_LABEL for m in node.matchers.matchers):
        return None
    text = str(node)
    name = node.name or ""
    rest = text[len(name) :]
    if rest.startswith("{"):
        inner, _, after = rest[1:].partition("}")
        matchers = f"{inner}, {CLUSTER_MATCHER}" if inner.strip() else CLUSTER_MATCHER
        return pp.parse(f"{name}{{{matchers}}}{after}")
    return pp.parse(f"{name}{{{CLUSTER_MATCHER}}}{rest}")


def rewrite_query(expr: str, rewrite: Callable[[str], str]) -> str:
    """`rewrite` applied to a dashboard query, its Grafana variables protected while it runs."""
    protected, originals = _protect(expr)
    printed = rewrite(protected)
    for placeholder, variable in originals.items():
        printed = printed.replace(placeholder, variable)
    return printed


def filter_by_cluster(expr: str) -> str:
    """`expr` with `cluster=~"$cluster"` on every vector selector (Grafana variables kept)."""
    return rewrite_query(expr, lambda text: str(pp.transform(pp.parse(text), post_visit=_with_matcher)))


def _variable(cfg: ObservabilityConfig) -> dict[str, Any]:
    query = f"label_values({CLUSTER_SOURCE}, {CLUSTER_LABEL})"
    current = cfg.cluster or cfg.clusters[0]
    return {
        "type": "query",
        "name": CLUSTER_VARIABLE,
        "label": "Cluster",
        "description": "The cluster whose series every panel shows (the global tier holds several).",
        "datasource": {"type": "prometheus", "uid": f"${{{PROMETHEUS_VARIABLE}}}"},
        "query": query,
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": False,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": current, "value": current},
        "options": [],
    }


def _rewrite_variable_query(variable: dict[str, Any]) -> None:
    query = variable.get("query")
    text = query.get("query") if isinstance(query, dict) else query
    if not isinstance(text, str):
        return
    match = _LABEL_VALUES.match(text.strip())
    if match is None:
        return
    rewritten = f"label_values({filter_by_cluster(match['selector'])}, {match['label']})"
    if isinstance(query, dict):
        query["query"] = rewritten
    else:
        variable["query"] = rewritten
    if variable.get("definition"):
        variable["definition"] = rewritten


def with_cluster_variable(dashboard: dict[str, Any], cfg: ObservabilityConfig) -> dict[str, Any]:
    """The dashboard with a `$cluster` variable and every Prometheus query filtered by it (a copy),
    or the dashboard itself with one cluster."""
    if not multi_cluster(cfg):
        return dashboard
    out = copy.deepcopy(dashboard)
    variables = out.setdefault("templating", {}).setdefault("list", [])
    for variable in variables:
        if variable.get("type") == "query" and _is_prometheus(variable.get("datasource")):
            _rewrite_variable_query(variable)
    datasources = [i for i, v in enumerate(variables) if v.get("type") == "datasource"]
    variables.insert(datasources[-1] + 1 if datasources else 0, _variable(cfg))
    for panel in _panels(out):
        for target in panel.get("targets", []):
            datasource = target.get("datasource") or panel.get("datasource") or {}
            if _is_prometheus(datasource) and isinstance(target.get("expr"), str) and target["expr"]:
                target["expr"] = filter_by_cluster(target["expr"])
    return out


def is_prometheus(datasource: Any) -> bool:
    return _is_prometheus(datasource)


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside rows included."""
    return _panels(dashboard)


def _is_prometheus(datasource: Any) -> bool:
    return isinstance(datasource, dict) and datasource.get("type") == "prometheus"


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found
