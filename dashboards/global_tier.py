"""What a sharded stack's global tier must receive for its rules and dashboards, and which panels
are per-GPU drill-downs that only the shards (or a query layer above them) can answer.

With `prometheus.remoteWrite: aggregates` the shards remote-write only `aggregates_series(cfg)`:
the partials the global rules combine (`observability.rules.pushdown`), the alerts (`ALERTS`),
and every series that the global rules or the dashboards' fleet-wide panels read themselves. A
panel that reads a series with one sample per GPU (the poller's per-GPU series, or a per-GPU
record of the shard tier such as a job's GPUs) is a *drill-down*: the global tier answers it
only with `remoteWrite: all`; with `aggregates` its description says to query the shard that
scrapes the node, or the query layer that sees every shard (Thanos Query, Mimir's query
frontend). `with_drilldown_notes(dashboard, cfg)` writes that note into every such panel of a
sharded stack.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from dashboards.queries import PanelQuery, panel_queries
from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig, RemoteWrite
from observability.partials import is_partial
from observability.promql.syntax import series_names
from observability.rules import Tier, rule_groups, tier_rule_groups
from observability.rules.tiers import recorded_localities

ALERTS_SERIES = "ALERTS"
# Labels that tell one GPU from another: a series keeping one of them has a sample per GPU.
PER_GPU_LABELS = frozenset({"uuid", "gpu_id"})


@functools.lru_cache(maxsize=8)
def per_gpu_series(cfg: ObservabilityConfig) -> frozenset[str]:
    """Series with one sample per GPU: the catalog's per-GPU metrics and the shard tier's per-GPU records."""
    raw = {n for m in catalog.ALL_METRICS if PER_GPU_LABELS & set(m.labels) for n in m.series_names}
    records = recorded_localities(rule_groups(cfg))
    recorded = {
        name
        for name, locality in records.items()
        if locality.local and any(label in PER_GPU_LABELS for label, _ in locality.keys)
    }
    return frozenset(raw | recorded)


def _query_names(query: PanelQuery) -> set[str]:
    return series_names(query.substituted)


def is_drilldown(query: PanelQuery, cfg: ObservabilityConfig) -> bool:
    """Whether a panel query reads a series with one sample per GPU."""
    return query.datasource_type == "prometheus" and bool(_query_names(query) & per_gpu_series(cfg))


def _global_records(cfg: ObservabilityConfig) -> set[str]:
    tiers = tier_rule_groups(cfg)
    return {str(r["record"]) for g in tiers[Tier.GLOBAL] for r in g["rules"] if "record" in r}


def aggregates_series(cfg: ObservabilityConfig, dashboards: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The series names (besides the partials) the shards remote-write in `aggregates` mode, sorted:
    what the global rules and the fleet-wide panels of `dashboards` read, and the alerts."""
    tiers = tier_rule_groups(cfg)
    own = _global_records(cfg)
    read: set[str] = {ALERTS_SERIES}
    for group in tiers[Tier.GLOBAL]:
        for rule in group["rules"]:
            read |= series_names(str(rule["expr"]))
    for dashboard in dashboards:
        for query in panel_queries(dashboard):
            if query.datasource_type == "prometheus" and not is_drilldown(query, cfg):
                read |= _query_names(query)
    return tuple(sorted(name for name in read - own if not is_partial(name)))


def drilldown_note(cfg: ObservabilityConfig) -> str:
    mode = (
        "the global tier receives every series (`prometheus.remoteWrite: all`), so it answers here"
        if cfg.remote_write is RemoteWrite.ALL
        else "the global tier receives aggregates only (`prometheus.remoteWrite: aggregates`): query the shard that "
        "scrapes the node, or a query layer that sees every shard (Thanos Query, Mimir's query frontend)"
    )
    return (
        "Per-GPU drill-down: it reads one series per GPU, which the global tier holds only with "
        f"`remoteWrite: all`; {mode}."
    )


def with_drilldown_notes(dashboard: Mapping[str, Any], cfg: ObservabilityConfig) -> dict[str, Any]:
    """The dashboard with the drill-down note in every per-GPU panel's description (sharded stacks only)."""
    out = copy.deepcopy(dict(dashboard))
    if cfg.shards == 1:
        return out
    drilldown = {q.panel_id for q in panel_queries(out) if is_drilldown(q, cfg)}
    note = drilldown_note(cfg)
    for panel in _panels(out["panels"]):
        if panel.get("id") in drilldown:
            description = str(panel.get("description") or "").rstrip()
            panel["description"] = f"{description}\n\n{note}" if description else note
    return out


def _panels(panels: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))
