"""Dashboards over a global tier that receives every series from more than one Prometheus replica.

With `prometheus.replicas` > 1 on a sharded stack, the global tier holds each shard's series once
per replica, told apart by the replica label (`cfg.replica_label`). `with_replica_dedup(dashboard,
cfg)` rewrites every Prometheus query to read one copy (`observability.promql.replicas`): no panel
sums a shard twice, and the replica label never reaches a legend (it is aggregated away). A query
the deduplication cannot keep, or a legend naming the replica label, fails the build with how to
write it. Other stacks' dashboards are left exactly as they are.
"""

from __future__ import annotations

import copy
from typing import Any

from dashboards.clusters import is_prometheus, panels, rewrite_query
from observability.config import ObservabilityConfig
from observability.promql.replicas import deduplicate, replica_problems


class ReplicaQueryError(ValueError):
    """A dashboard query or legend that would show the replicas' copies."""


def with_replica_dedup(dashboard: dict[str, Any], cfg: ObservabilityConfig) -> dict[str, Any]:
    """The dashboard with every Prometheus query reading one copy of each series (a copy), or the
    dashboard itself when the global tier has one writer per series."""
    if not cfg.replicated:
        return dashboard
    label = cfg.replica_label
    out = copy.deepcopy(dashboard)
    problems = []
    for panel in panels(out):
        for target in panel.get("targets", []):
            datasource = target.get("datasource") or panel.get("datasource") or {}
            expr = target.get("expr")
            if not (is_prometheus(datasource) and isinstance(expr, str) and expr):
                continue
            where = f"{out.get('uid')}/{panel.get('title')}"
            if f"{{{{{label}}}}}" in str(target.get("legendFormat", "")):
                problems.append(f"{where}: the legend names {label}, which the deduplication aggregates away")
            found: list[str] = []

            def dedup(text: str, found: list[str] = found) -> str:
                found += replica_problems(text, label)
                return deduplicate(text, label)

            target["expr"] = rewrite_query(expr, dedup)
            problems += [f"{where}: {problem}" for problem in found]
    if problems:
        raise ReplicaQueryError("dashboard queries that would show each replica's copy:\n" + "\n".join(problems))
    return out
