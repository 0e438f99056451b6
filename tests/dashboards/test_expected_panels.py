"""Every row and panel users expect exists on its dashboard, with the settings they expect.

The training cockpit, traces and infra cockpit dashboards; the ML training comprehensive dashboard
with its thresholds, colours, variables, refresh and legends.
"""

from __future__ import annotations

from typing import Any

import pytest

from dashboards.queries import panel_queries, substitute_variables
from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql.syntax import series_names
from observability.rules import dashboard_recording as rec

# (row, panel title) in the order users expect them.
TRAINING_COCKPIT = [
    ("Active Jobs", "Active Workers"),
    ("Active Jobs", "Fold Progress"),
    ("Training Progress", "Epoch Loss and Validation Loss"),
    ("Training Progress", "Batches per Second"),
    ("Training Progress", "Iteration Seconds"),
    ("GPU Resources", "GPU Utilization"),
    ("GPU Resources", "GPU Memory Used and Total"),
    ("GPU Resources", "GPU Temperature"),
    ("GPU Resources", "GPU Power Draw"),
    ("Model Quality", "Accuracy"),
    ("Model Quality", "F1 Score"),
    ("Model Quality", "Precision"),
    ("Model Quality", "Recall"),
    ("Checkpoints", "Checkpoint Saves"),
    ("Checkpoints", "Checkpoint Failures"),
    ("Checkpoints", "Checkpoint Save Duration"),
    ("Checkpoints", "Checkpoint Size"),
    ("Data Pipeline", "Batches Processed"),
    ("Data Pipeline", "Data Load Seconds"),
    ("Errors", "NaN Detected"),
    ("Errors", "Gradient Explosions"),
    ("Errors", "Feature Engineering Errors"),
    ("Timing", "Iteration Seconds Histogram"),
    ("Timing", "Data Load Seconds Histogram"),
]
TRAINING_COCKPIT_ROWS = [
    "Is the GPU Maxed Out?",  # added: the job's bottleneck verdict, MFU, goodput and badput first
    "Active Jobs",
    "Training Progress",
    "Steps and Time",  # added: per-rank steps and where the wall time goes
    "Distributed Ranks",  # added: stragglers, hangs, bandwidth and communication of distributed jobs
    "Optimization",  # added: per-step loss, learning rate, gradient norm, data wait vs compute, hyperparameters
    "This Job's GPUs",  # added: the GPUs of the selected job
    "GPU Resources",
    "Model Quality",
    "Reinforcement Learning (DQN, PPO)",  # added: the model-specific values of DQN and PPO
    "Hyperparameter Search",  # added: trials by state, best value, the trial in progress
    "Checkpoints",
    "Data Pipeline",
    "Errors",
    "Timing",
]
TRACES = [
    ("Service Map", "Service Map"),
    ("Trace Search", "Trace Search"),
    ("Trace Metrics", "Trace Duration Histogram"),
    ("Trace Metrics", "Error Rate by Service"),
    ("Logs for Trace", "Logs for Selected Trace"),
]
INFRA_COCKPIT = [
    ("Scrape Targets", "Platform Services Up"),
    ("Scrape Targets", "Training Job Targets"),
    ("GPU Poller Health", "NVML Up per Node"),
    ("GPU Poller Health", "Collection Duration"),
    ("GPU Poller Health", "Collection Failures"),
    ("Trace Health", "Spans per Second"),
    ("Trace Health", "Span Error Rate"),
]
# 19 panels in 8 rows; the fourth and fifth share a title (loss curves in the status row and the loss row).
COMPREHENSIVE = [
    ("High-Level Status", "Training Jobs by Status", "stat"),
    ("High-Level Status", "Training Speed", "gauge"),
    ("High-Level Status", "NaN Detection Count", "stat"),
    ("High-Level Status", "Training Loss Curves", "timeseries"),
    ("Loss Monitoring", "Training Loss Curves", "timeseries"),
    ("Loss Monitoring", "Validation Loss Curves", "timeseries"),
    ("GPU Monitoring", "GPU Utilization Timeline", "timeseries"),
    ("GPU Monitoring", "GPU Memory Usage", "stat"),
    ("Training Progress", "Training Progress Gauge", "gauge"),
    ("Training Progress", "Current Epoch", "stat"),
    ("Training Progress", "Model Accuracy Gauge", "gauge"),
    ("Performance Metrics", "GPU Temperature", "timeseries"),
    ("Performance Metrics", "Training Iteration Duration", "timeseries"),
    ("Checkpoint Management", "Checkpoint Creation Events", "timeseries"),
    ("Checkpoint Management", "Checkpoint Save Duration", "timeseries"),
    ("Advanced Metrics", "Model Convergence Rate", "timeseries"),
    ("Advanced Metrics", "Data Loading Performance", "timeseries"),
    ("Error Tracking", "Training Failures by Type", "stat"),
    ("Error Tracking", "GPU Errors", "stat"),
    ("GPU Cost and Energy", "GPU cost per model type (24 h)", "bargauge"),
    ("GPU Cost and Energy", "Energy per job", "bargauge"),
]
# Panels added since: real busyness (GPM) beside NVML utilization.
COMPREHENSIVE_ADDED = [
    ("GPU Monitoring", "True Utilization", "timeseries"),
    ("GPU Cost and Energy", "Badput cost per job", "bargauge"),
    ("GPU Cost and Energy", "Checkpoint storage cost per model type (24 h)", "bargauge"),
]


def rows_and_panels(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    row, found = "", []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        else:
            found.append((row, panel))
    return found


def panel(dashboard: dict[str, Any], row: str, title: str) -> dict[str, Any]:
    matches = [p for r, p in rows_and_panels(dashboard) if (r, p["title"]) == (row, title)]
    assert len(matches) == 1, f"{dashboard['uid']}: {len(matches)} panels {title!r} in row {row!r}"
    return matches[0]


def steps(p: dict[str, Any]) -> list[tuple[float | None, str]]:
    return [(s["value"], s["color"]) for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"]]


def reads(p: dict[str, Any], dashboard: dict[str, Any]) -> set[str]:
    return {
        n
        for q in panel_queries(dashboard)
        if q.panel_id == p["id"] and q.datasource_type == "prometheus"
        for n in series_names(q.substituted)
    }


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


@pytest.mark.parametrize(
    "uid, expected",
    [
        ("foxhunt-training-cockpit", TRAINING_COCKPIT),
        ("foxhunt-traces", TRACES),
        ("foxhunt-infra-cockpit", INFRA_COCKPIT),
        ("ml-training-comprehensive", [(r, t) for r, t, _ in COMPREHENSIVE]),
    ],
)
def test_every_expected_panel_is_on_its_dashboard(uid, expected, default_dashboards):
    dashboard = default_dashboards[uid]
    present = [(r, p["title"]) for r, p in rows_and_panels(dashboard)]
    for row, title in expected:
        assert (row, title) in present, f"{uid}: no panel {title!r} in row {row!r}"


def test_training_cockpit_has_the_expected_rows_in_order_and_its_variables(default_dashboards):
    d = default_dashboards["foxhunt-training-cockpit"]
    assert [p["title"] for p in d["panels"] if p["type"] == "row"] == TRAINING_COCKPIT_ROWS
    v = variables(d)
    assert v["model"]["type"] == "query" and "model_type)" in v["model"]["query"]
    assert v["fold"]["type"] == "query" and v["fold"]["query"].endswith(", fold)")
    assert v["interval"]["type"] == "interval"
    # The rate-interval variable drives every Prometheus panel's minimum interval.
    assert {p.get("interval") for _, p in rows_and_panels(d)} == {"$interval"}
    # Per-epoch loss from the first epoch on (a job that dies in fold 0 still shows it), the folds' best apart.
    epoch_panel = panel(d, "Training Progress", "Epoch Loss and Validation Loss")
    assert reads(epoch_panel, d) == {catalog.TRAINING_LOSS.name, catalog.TRAINING_VALIDATION_LOSS.name}
    fold_panel = panel(d, "Training Progress", "Best Loss per Fold")
    assert all('fold=~"$fold"' in t["expr"] and 'model_type=~"$model"' in t["expr"] for t in fold_panel["targets"])
    assert reads(fold_panel, d) == {catalog.TRAINING_FOLD_LOSS.name, catalog.TRAINING_FOLD_VALIDATION_LOSS.name}
    # CPU-only jobs are jobs too: the job list comes from a series every job's process exports.
    assert catalog.TRAINING_RANK_INFO.name in v["job_id"]["query"]
    # One job at a time: its GPUs only, never a node's.
    assert v["job_id"]["type"] == "query" and not v["job_id"].get("includeAll") and not v["job_id"].get("multi")
    for _, job_panel in (rp for rp in rows_and_panels(d) if rp[0] in ("This Job's GPUs", "Is the GPU Maxed Out?")):
        assert all('job_id=~"$job_id"' in t["expr"] for t in job_panel["targets"]), job_panel["title"]
    # It opens with the verdict in words: the stat shows the series' `verdict` label, not its value.
    verdict = panel(d, "Is the GPU Maxed Out?", "Verdict")
    assert verdict["options"]["textMode"] == "name" and verdict["targets"][0]["legendFormat"] == "{{verdict}}"
    assert [p["title"] for r, p in rows_and_panels(d) if r == "Is the GPU Maxed Out?"] == [
        "Verdict", "MFU", "Goodput", "GPU Busy", "Time by Phase", "MFU and Goodput"
    ]  # fmt: skip


def test_traces_dashboard_has_service_map_search_histogram_errors_and_logs_link(default_dashboards, dev_cfg):
    d = default_dashboards["foxhunt-traces"]
    service_map = panel(d, "Service Map", "Service Map")
    assert service_map["type"] == "nodeGraph"
    assert service_map["targets"][0]["queryType"] == "serviceMap"
    search = panel(d, "Trace Search", "Trace Search")
    assert search["type"] == "table" and search["targets"][0]["queryType"] == "traceql"
    query = substitute_variables(search["targets"][0]["query"], {"status": "status = error"})
    assert query == '{resource.service.name=~".*" && name=~".*" && duration >= .* && status = error}'
    histogram = panel(d, "Trace Metrics", "Trace Duration Histogram")
    assert histogram["type"] == "heatmap" and reads(histogram, d) == {catalog.SPANMETRICS_LATENCY.bucket}
    errors = panel(d, "Trace Metrics", "Error Rate by Service")
    assert reads(errors, d) == {rec.SPAN_ERROR_RATIO_RATE5M.record}
    # From a trace to its logs: the trace id column links to the trace (Tempo) and to the logs panel.
    links = search["fieldConfig"]["overrides"][0]["properties"][0]["value"]
    assert search["fieldConfig"]["overrides"][0]["matcher"] == {"id": "byName", "options": "traceID"}
    assert links[0]["internal"]["datasourceUid"] == dev_cfg.datasource_uids.tempo
    assert "var-trace_id=${__value.raw}" in links[1]["url"]
    logs = panel(d, "Logs for Trace", "Logs for Selected Trace")
    assert logs["type"] == "logs" and "$trace_id" in logs["targets"][0]["expr"]


def test_infra_cockpit_trace_health_and_scrape_targets_follow_the_stack(stack_dashboards, cfg):
    d = stack_dashboards["foxhunt-infra-cockpit"]
    trace_health = [p for r, p in rows_and_panels(d) if r == "Trace Health"]
    read = set().union(*(reads(p, d) for p in trace_health))
    assert read == {rec.SPAN_CALLS_RATE5M.record, rec.SPAN_ERRORS_RATE5M.record, rec.SPAN_ERROR_RATIO_RATE5M.record}
    platform = panel(d, "Scrape Targets", "Platform Services Up")["targets"][0]["expr"]
    assert platform == f'min by (service) (up{{service=~"{"|".join(sorted(cfg.platform_services))}"}})'
    job_targets = panel(d, "Scrape Targets", "Training Job Targets")["targets"][0]["expr"]
    assert f'service="{cfg.training_job_service}"' in job_targets
    nvml = panel(d, "GPU Poller Health", "NVML Up per Node")
    assert reads(nvml, d) == {catalog.GPU_POLLER_NVML_UP.name} and "by (node)" in nvml["targets"][0]["expr"]


def test_comprehensive_panels_have_the_expected_visualizations(default_dashboards):
    d = default_dashboards["ml-training-comprehensive"]
    for row, title, kind in COMPREHENSIVE + COMPREHENSIVE_ADDED:
        matches = [p for r, p in rows_and_panels(d) if (r, p["title"]) == (row, title)]
        assert [p["type"] for p in matches] == [kind], (row, title)
    assert len(rows_and_panels(d)) == len(COMPREHENSIVE) + len(COMPREHENSIVE_ADDED)


def test_comprehensive_thresholds_and_colours(default_dashboards):
    d = default_dashboards["ml-training-comprehensive"]
    th = ObservabilityConfig().thresholds  # the alert thresholds, as thresholds.yaml holds them
    slow, hot = th.training_slowdown_epochs_per_second.value, th.gpu_temperature_high_celsius.value
    nan = panel(d, "High-Level Status", "NaN Detection Count")
    assert steps(nan) == [(None, "green"), (1, "red")] and nan["options"]["colorMode"] == "background"
    assert nan["targets"][0]["expr"].startswith("ceil("), "integer counts make 1 the first value above 0"
    assert steps(panel(d, "High-Level Status", "Training Speed")) == [(None, "red"), (slow, "yellow"), (0.5, "green")]
    gpu = panel(d, "GPU Monitoring", "GPU Utilization Timeline")
    low, high = th.gpu_utilization_low_percent.value, th.gpu_utilization_high_percent.value
    assert steps(gpu) == [(None, "red"), (low, "yellow"), (60, "green"), (high, "red")]
    assert gpu["fieldConfig"]["defaults"]["custom"]["fillOpacity"] == 20
    memory = panel(d, "GPU Monitoring", "GPU Memory Usage")
    assert (
        steps(memory)[-1] == (th.gpu_memory_exhausted_ratio.percent, "red")
        and memory["options"]["colorMode"] == "background"
    )
    progress = panel(d, "Training Progress", "Training Progress Gauge")
    assert steps(progress) == [(None, "blue"), (50, "yellow"), (100, "green")]
    assert (progress["fieldConfig"]["defaults"]["min"], progress["fieldConfig"]["defaults"]["max"]) == (0, 100)
    accuracy = panel(d, "Training Progress", "Model Accuracy Gauge")
    assert steps(accuracy) == [(None, "red"), (0.85, "yellow"), (0.9, "green")]
    assert (accuracy["fieldConfig"]["defaults"]["min"], accuracy["fieldConfig"]["defaults"]["max"]) == (0, 1)
    temperature = panel(d, "Performance Metrics", "GPU Temperature")
    assert steps(temperature) == [(None, "green"), (hot - 10, "yellow"), (hot, "red")]
    assert temperature["fieldConfig"]["defaults"]["unit"] == "celsius"
    events = panel(d, "Checkpoint Management", "Checkpoint Creation Events")
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"] for o in events["fieldConfig"]["overrides"]
    }
    assert colours == {"A": "green", "B": "red"}
    assert steps(panel(d, "Error Tracking", "Training Failures by Type"))[-1] == (1, "red")
    assert steps(panel(d, "Error Tracking", "GPU Errors")) == [(None, "green"), (0.01, "red")]


def test_comprehensive_variables_refresh_range_and_legends(default_dashboards):
    d = default_dashboards["ml-training-comprehensive"]
    v = variables(d)
    assert v["model_type"]["multi"] is True and v["model_type"]["includeAll"] is True
    assert v["job_id"]["multi"] is False and v["job_id"]["includeAll"] is False
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    assert d["refresh"] == "10s" and d["time"] == {"from": "now-1h", "to": "now"}
    for _, p in rows_and_panels(d):
        if p["type"] == "timeseries":
            legend = p["options"]["legend"]
            assert legend["displayMode"] == "table" and legend["calcs"] == ["lastNotNull", "min"], p["title"]
