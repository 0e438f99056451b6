"""What the dashboards read exists: catalog metrics and recording rules, found with a PromQL parser.

Also: every catalog metric of the GPU poller and the training jobs is on some dashboard, and the
dashboards' recording rules are well named and read only catalog metrics.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dashboards.queries import panel_queries
from foxhunt_trainer.contract import catalog
from observability.promql.syntax import selector_uses, series_names
from observability.rules import dashboard_recording, distributed, goodput, jobs, recording
from observability.rules.dashboard_recording import dashboard_recording_groups

RECORD_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
# Target labels scrape discovery adds to every scraped series (see observability/config.py).
TARGET_LABELS = {"namespace", "pod", "service", "instance", "job"}
CATALOG_SERIES = {s for m in catalog.ALL_METRICS for s in m.series_names}
CATALOG_FAMILIES = {m.name for m in catalog.ALL_METRICS}


def recording_rules(cfg) -> dict[str, str]:
    """record -> expr of every recording rule a dashboard may read: its own and the alert engineer's,
    the goodput group's, and the distributed group's inputs (complete per rank and job, unlike the
    GPU group's subsets)."""
    groups = [
        *dashboard_recording_groups(cfg),
        *recording.recording_groups(cfg),
        *jobs.job_groups(cfg),
        *goodput.goodput_groups(cfg),
    ]
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    return {**records, **{r.record: r.expr for r in distributed.input_rules(cfg)}}


def prometheus_exprs(dashboards: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (f"{q.dashboard_uid} panel {q.panel_id} {q.panel_title!r} {q.ref_id}", q.substituted)
        for d in dashboards.values()
        for q in panel_queries(d)
        if q.datasource_type == "prometheus"
    ]


def catalog_metrics_read(names: set[str], rules: dict[str, str]) -> set[str]:
    """Catalog family names behind `names`, following recording rules to their inputs."""
    found: set[str] = set()
    pending, seen = list(names), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in rules:
            pending.extend(series_names(rules[name]))
        else:
            found.add(catalog.by_name(name).name)
    return found


def test_every_series_a_dashboard_reads_is_in_the_catalog_or_a_recording_rule(cfg, stack_dashboards):
    rules = recording_rules(cfg)
    unknown = [
        f"{where}: {name}"
        for where, expr in prometheus_exprs(stack_dashboards)
        for name in series_names(expr)
        if name not in CATALOG_SERIES and name not in rules
    ]
    assert unknown == []


def test_every_recording_rule_a_dashboard_reads_exists_in_the_rule_groups(cfg, stack_dashboards):
    rules = recording_rules(cfg)
    used = {n for _, expr in prometheus_exprs(stack_dashboards) for n in series_names(expr) if ":" in n}
    assert used, "the dashboards read no recording rule"
    assert used <= set(rules), used - set(rules)
    own = {r.record for r in dashboard_recording.ALL_RULES}
    assert used & own, "expected the dashboards' own recording rules in use"


def test_matchers_use_labels_the_metric_has(stack_dashboards):
    wrong = []
    for where, expr in prometheus_exprs(stack_dashboards):
        for use in selector_uses(expr):
            if use.name not in CATALOG_SERIES:
                continue
            metric = catalog.by_name(use.name)
            allowed = set(metric.labels) | TARGET_LABELS | ({"le"} if use.name.endswith("_bucket") else set())
            wrong += [
                f"{where}: {use.name} has no label {label}" for label in use.matcher_labels if label not in allowed
            ]
    assert wrong == []


@pytest.mark.parametrize("producer", [catalog.Producer.GPU_POLLER, catalog.Producer.TRAINING_JOB])
def test_every_poller_and_training_job_metric_is_on_a_dashboard(producer, default_dashboards):
    from observability.config import ObservabilityConfig

    rules = recording_rules(ObservabilityConfig())
    names = {n for _, expr in prometheus_exprs(default_dashboards) for n in series_names(expr)}
    shown = catalog_metrics_read(names, rules)
    missing = sorted(m.name for m in catalog.by_producer(producer) if m.name not in shown)
    assert missing == []


def test_coverage_check_notices_a_missing_metric(default_dashboards):
    """Drop every panel that reads the poller's devices gauge: the coverage check must see it."""
    from observability.config import ObservabilityConfig

    infra = default_dashboards["foxhunt-infra-cockpit"]
    readers = (catalog.GPU_POLLER_DEVICES.name, jobs.FLEET_UNHELD.record)  # the free-GPU count reads it too
    infra["panels"] = [p for p in infra["panels"] if not any(r in str(p.get("targets", "")) for r in readers)]
    names = {n for _, expr in prometheus_exprs(default_dashboards) for n in series_names(expr)}
    assert catalog.GPU_POLLER_DEVICES.name not in catalog_metrics_read(names, recording_rules(ObservabilityConfig()))


def test_dashboard_recording_rules_are_named_level_metric_operation(cfg):
    for group in dashboard_recording_groups(cfg):
        assert group["interval"] == f"{cfg.evaluation_interval_seconds}s"
        for rule in group["rules"]:
            assert RECORD_NAME.match(rule["record"]), rule["record"]
            _level, metric, _operation = rule["record"].split(":")
            # The metric part is a catalog series or histogram family (a quantile of it), or a
            # counter without `_total` (a rate of it), possibly narrowed by a suffix (`_errors`:
            # spans with error status).
            candidates = {metric, f"{metric}_total", f"{metric.removesuffix('_errors')}_total"}
            assert candidates & (CATALOG_SERIES | CATALOG_FAMILIES), rule["record"]


def test_dashboard_recording_rules_read_only_catalog_metrics_and_earlier_records(cfg):
    for group in dashboard_recording_groups(cfg):
        earlier: set[str] = set()
        for rule in group["rules"]:
            for use in selector_uses(rule["expr"]):
                assert use.name in CATALOG_SERIES or use.name in earlier, (rule["record"], use.name)
                if use.name in CATALOG_SERIES and catalog.by_name(use.name).type is not catalog.MetricType.GAUGE:
                    # Counters and histogram series only through rate().
                    assert use.direct_function() == "rate" and use.range is not None, rule
            earlier.add(rule["record"])


def test_dashboard_recording_constants_match_the_groups(cfg):
    records = [r["record"] for g in dashboard_recording_groups(cfg) for r in g["rules"]]
    assert records == [r.record for r in dashboard_recording.ALL_RULES]
    assert len(records) == len(set(records))
    alert_records = {r["record"] for g in recording.recording_groups(cfg) for r in g["rules"]}
    assert not alert_records & set(records), "a dashboard record collides with an alert record"
