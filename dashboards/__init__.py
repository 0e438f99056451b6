"""Grafana dashboards as code (grafana-foundation-sdk), every query built from the metric catalog.

`build_all(cfg)` returns the four dashboards as plain dicts (bare classic dashboard JSON models)
keyed by uid, with a `$cluster` variable when the global tier holds several clusters
(`dashboards.clusters`), every query reading one copy of what several Prometheus replicas wrote
(`dashboards.replicas`); `to_json(dashboard)` is the deterministic text the infra program writes to
`rendered/<stack>/dashboards/<uid>.json` and ships in one ConfigMap per dashboard. On a sharded
stack, every per-GPU drill-down panel says where it can be queried, and `global_tier_series(cfg)`
is what the global tier must receive for the rest (`dashboards.global_tier`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

# The SDK warns on import that the classic dashboard model is deprecated in favour of the v2
# schema. The classic model is the one Grafana 11/12 provisioning loads, so it is deliberate.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Prefer using dashboardv2", DeprecationWarning)
    import grafana_foundation_sdk.builders.dashboard
    import grafana_foundation_sdk.models.dashboardv2beta1  # noqa: F401

from dashboards import infra_cockpit, ml_training_comprehensive, traces, training_cockpit
from dashboards.clusters import with_cluster_variable
from dashboards.global_tier import aggregates_series, with_drilldown_notes
from dashboards.layout import to_json
from dashboards.replicas import with_replica_dedup
from observability.config import ObservabilityConfig

__all__ = ["BUILDERS", "build_all", "global_tier_series", "to_json"]

# uid -> builder, in the order the README lists them.
BUILDERS: dict[str, Callable[[ObservabilityConfig], dict[str, Any]]] = {
    training_cockpit.UID: training_cockpit.build,
    traces.UID: traces.build,
    infra_cockpit.UID: infra_cockpit.build,
    ml_training_comprehensive.UID: ml_training_comprehensive.build,
}


def build_all(cfg: ObservabilityConfig) -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON model (plain dict) for the four dashboards; deterministic."""
    built = {
        uid: with_replica_dedup(with_drilldown_notes(with_cluster_variable(build(cfg), cfg), cfg), cfg)
        for uid, build in BUILDERS.items()
    }
    for uid, dashboard in built.items():
        if dashboard["uid"] != uid:
            raise ValueError(f"dashboard registered as {uid} has uid {dashboard['uid']}")
    return built


@functools.lru_cache(maxsize=8)
def global_tier_series(cfg: ObservabilityConfig) -> tuple[str, ...]:
    """What the shards remote-write besides the partials with `prometheus.remoteWrite: aggregates`
    (`dashboards.global_tier`)."""
    return aggregates_series(cfg, build_all(cfg).values())
