"""Shape of the rules: the expected groups and severities, annotations, labels, names, Prometheus 2.42."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from infra.settings import available_stacks, read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.partials import is_partial
from observability.rules import (
    ALERT_GROUP_NAMES,
    ALERT_NAMES,
    ALERTS_BY_GROUP,
    RECORDING_RULES,
    Severity,
    alert_rules,
    distributed,
    gpu,
    group_inputs,
    jobs,
    project_group_names,
    recording,
    rule_groups,
    rules_file_yaml,
    tier_rule_groups,
)
from observability.rules.tiers import Tier
from tests.rules.detection_cases import INTERVALS, variant_cfg
from tests.rules.promtool_harness import alert_rule_dicts, promtool

CFG = ObservabilityConfig()

# Alerts users expect in these groups, in this group order (their routing and paging depend on
# them). A floor, not the list: a new alert or group is added by its rule module alone, and the
# checks below enumerate the registry (ALERTS_BY_GROUP), never a count.
EXPECTED_GROUPS = {
    "ml_training_performance": ("TrainingNaNDetected", "TrainingSlowdown", "MLInferenceLatencyHigh"),
    "ml_training_availability": (
        "TrainingJobFailed",
        "MLTrainingServiceDown",
        "ModelLoadingFailures",
        "ModelCacheMissesHigh",
    ),
    "ml_gpu_resources": (
        "GPUUtilizationLow",
        "GPUUtilizationCritical",
        "GPUMemoryUsageHigh",
        "GPUMemoryExhausted",
        "GPUTemperatureHigh",
        "GPUErrorsDetected",
        "GPUMemoryExhaustionPredicted",  # beside the report's GPU alerts: predicted out-of-memory
    ),
    "ml_model_quality": (
        "ModelDriftDetected",
        "FeatureDistributionShift",
        "PredictionConfidenceLow",
        "MLModelAccuracyDegraded",
    ),
    "ml_data_pipeline": ("TrainingDataStale", "FeatureEngineeringErrors", "FeatureExtractionLatencyHigh"),
    "ml_storage": ("S3ConnectionErrors", "CheckpointSaveFailures", "ModelStorageUsageHigh"),
    # Beyond the report: a job losing its time to a cause it can fix.
    "ml_training_efficiency": ("TrainingInputBound", "TrainingCheckpointBound"),
    # the ranks of distributed jobs compared with each other
    "ml_training_distributed": ("TrainingRankStraggler", "TrainingJobHung", "TrainingCommunicationBound"),
}
# The severity each of these alerts must keep (pages and tickets are routed by it).
EXPECTED_SEVERITY = {
    **dict.fromkeys(
        ("TrainingNaNDetected", "GPUMemoryExhausted", "GPUTemperatureHigh", "CheckpointSaveFailures",
         "MLModelAccuracyDegraded", "GPUErrorsDetected"),
        Severity.CRITICAL,
    ),
    **dict.fromkeys(("MLTrainingServiceDown", "ModelLoadingFailures", "TrainingJobFailed"), Severity.HIGH),
    # optimisation opportunities, not problems
    **dict.fromkeys(
        ("GPUUtilizationLow", "GPUUtilizationCritical", "TrainingInputBound", "TrainingCheckpointBound"), Severity.INFO
    ),
    **dict.fromkeys(("TrainingSlowdown", "GPUMemoryUsageHigh", "ModelDriftDetected", "TrainingDataStale"),
                    Severity.WARNING),
    # a hung distributed job idles all its GPUs until the collective watchdog kills it: it pages
    "TrainingJobHung": Severity.CRITICAL,
    **dict.fromkeys(("TrainingRankStraggler", "TrainingCommunicationBound"), Severity.WARNING),
}  # fmt: skip
REQUIRED_ANNOTATIONS = ("summary", "description", "impact", "action", "runbook_url")
# The monitoring's own health: who watches the watchers (at least these, last of the groups).
HEALTH_GROUP = "ml_monitoring_health"
HEALTH_ALERTS = (
    "GPUPollerDown",
    "NVMLDown",
    "GPUsNotAnswering",
    "GPUPollerCollectionFailing",
    "GPUPollerCollectionSlow",
    "RuleGroupEvaluationFailures",
    "RuleGroupSlow",
    "Watchdog",
)
# Alerts that locate nothing (always firing): their description need not name a label.
UNLOCATED = {"Watchdog"}


def rule_problems(rule: dict[str, Any], cfg: ObservabilityConfig = CFG) -> list[str]:
    """What is missing or malformed in one rendered alerting rule (empty: nothing)."""
    problems = []
    severity = rule.get("labels", {}).get("severity")
    if severity not in {s.value for s in Severity}:
        problems.append(f"severity {severity!r} is not one of critical, high, warning, info")
    annotations = rule.get("annotations", {})
    for key in REQUIRED_ANNOTATIONS:
        if not str(annotations.get(key, "")).strip():
            problems.append(f"annotation {key} is missing")
    summary = str(annotations.get("summary", ""))
    if "{{" in summary or not summary.endswith(".") or summary.count(". ") > 0:
        problems.append("summary must be one static sentence")
    if "{{ $labels." not in str(annotations.get("description", "")) and rule.get("alert") not in UNLOCATED:
        problems.append("description must be a template naming the labels that locate the problem")
    if not str(annotations.get("runbook_url", "")).startswith(f"{cfg.runbook_base_url}#"):
        problems.append("runbook_url must point at a section of docs/runbooks.md")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]+", str(rule.get("alert", ""))):
        problems.append("alert name must be CamelCase")
    return problems


def test_the_expected_alerts_are_in_their_groups_in_order_then_the_health_group():
    for group, names in {**EXPECTED_GROUPS, HEALTH_GROUP: HEALTH_ALERTS}.items():
        missing = set(names) - set(ALERTS_BY_GROUP.get(group, ()))
        assert not missing, f"{group} lacks {sorted(missing)}"
    assert [g for g in ALERT_GROUP_NAMES if g in EXPECTED_GROUPS] == list(EXPECTED_GROUPS)
    assert ALERT_GROUP_NAMES[-1] == HEALTH_GROUP
    assert len(ALERT_NAMES) == len(set(ALERT_NAMES)), "an alert name in two groups"
    assert list(ALERTS_BY_GROUP) == list(ALERT_GROUP_NAMES)
    alert_groups = [g for g in rule_groups(CFG) if any("alert" in r for r in g["rules"])]
    assert [g["name"] for g in alert_groups] == list(ALERT_GROUP_NAMES)
    # an alert group holds alerts, except the inputs some groups record at their head
    for g in alert_groups:
        records = [r["record"] for r in g["rules"] if "record" in r]
        assert records == [r.record for r in group_inputs(g["name"], CFG)], g["name"]
        assert g["name"] not in (gpu.GROUP, distributed.GROUP) or records, g["name"]
        assert all("record" in r for r in g["rules"][: len(records)]), g["name"]


def test_severities_are_the_expected_ones():
    severity = {a.name: a.severity for a in alert_rules(CFG)}
    assert {name: severity[name] for name in EXPECTED_SEVERITY} == EXPECTED_SEVERITY


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_alert_has_severity_summary_description_and_runbook(alert):
    assert rule_problems(alert_rule_dicts(CFG)[alert]) == []


@pytest.mark.parametrize(
    ("broken", "problem"),
    [
        ({"labels": {}}, "severity None"),
        ({"labels": {"severity": "page"}}, "severity 'page'"),
        (
            {
                "annotations": {
                    "description": "x {{ $labels.node }}",
                    "impact": "i",
                    "action": "a",
                    "runbook_url": CFG.runbook_base_url + "#a",
                }
            },
            "summary is missing",
        ),
        (
            {
                "annotations": {
                    "summary": "S.",
                    "impact": "i",
                    "action": "a",
                    "runbook_url": CFG.runbook_base_url + "#a",
                }
            },
            "description is missing",
        ),
        (
            {
                "annotations": {
                    "summary": "S.",
                    "description": "static",
                    "impact": "i",
                    "action": "a",
                    "runbook_url": CFG.runbook_base_url + "#a",
                }
            },
            "description must be a template",
        ),
        (
            {"annotations": {"summary": "S.", "description": "{{ $labels.node }}", "impact": "i", "action": "a"}},
            "runbook_url is missing",
        ),
        (
            {
                "annotations": {
                    "summary": "On {{ $labels.node }}.",
                    "description": "{{ $labels.node }}",
                    "impact": "i",
                    "action": "a",
                    "runbook_url": CFG.runbook_base_url + "#a",
                }
            },
            "one static sentence",
        ),
    ],
)
def test_the_annotation_check_catches_a_broken_alert(broken, problem):
    rule = {**alert_rule_dicts(CFG)["GPUTemperatureHigh"], **broken}
    assert any(problem in p for p in rule_problems(rule))


@pytest.mark.parametrize("alert", alert_rules(CFG), ids=lambda a: a.name)
def test_description_names_every_locating_label_and_only_those(alert):
    used = set(re.findall(r"\$labels\.(\w+)", alert.description))
    assert used == set(alert.locating_labels)


@pytest.mark.parametrize("alert", alert_rules(CFG), ids=lambda a: a.name)
def test_aggregations_keep_the_locating_labels(alert):
    """Never `sum` away what locates the problem: every aggregation is `by` a superset of them.

    The job join (`jobs.HOLDER`, one series per job holding a GPU uuid) adds `model_type` and
    `job_id` to a per-GPU expression; the aggregations before it keep the GPU's labels; the
    conditions on who holds a GPU (`count by (uuid)` of the holders: shared or not) and on a job's
    own figures on it (`by (model_type, job_id, uuid)`) are matched `on` those labels. The rank
    placement join adds `node` and the rank's GPUs (named `uuid` in the alert) to a per-rank
    expression, whose job-level conditions (matched `on` the job) aggregate by the job."""
    expr = alert.expr.replace(jobs.HOLDER, "HOLDER")
    required = set(alert.locating_labels)
    conditions: list[set[str]] = []
    if "HOLDER\n* on (uuid) group_left (node, gpu_id, gpu_name)" in expr:
        required -= set(jobs.JOB_LABELS)
        conditions = [{"uuid"}, {"model_type", "job_id", "uuid"}]
    job_level: set[str] = set()
    placement = f"group_left (node, {distributed.GPUS_LABEL})\nmax by ({', '.join(distributed.RANK_PLACED)})"
    if placement in expr:
        required -= {"node", "uuid"}
        job_level = set(distributed.JOB)
    assert " without" not in expr
    bare = re.findall(r"\b(sum|max|min|avg|count)\s*\(", expr)
    assert not bare, f"aggregation without `by` in {alert.name}"
    for clause in re.findall(r"\bby \(([^)]*)\)", expr):
        kept = {label.strip() for label in clause.split(",")}
        assert required <= kept or kept == job_level or kept in conditions, (alert.name, clause)


def test_health_alerts_watch_exactly_the_projects_rule_groups():
    names = project_group_names(CFG)
    assert set(names) == {g["name"] for g in rule_groups(CFG)}
    for alert in alert_rules(CFG):
        if alert.name.startswith("RuleGroup"):
            for name in names:
                assert name.replace(".", "[.]") in alert.expr, (alert.name, name)


def test_kube_state_metrics_adds_the_capacity_checks():
    with_ksm = {a.name: a.expr for a in alert_rules(ObservabilityConfig(kube_state_metrics=True))}
    without = {a.name: a.expr for a in alert_rules(CFG)}
    for name in ("GPUPollerDown", "GPUsNotAnswering"):
        assert catalog.KUBE_NODE_STATUS_CAPACITY.name in with_ksm[name]
        assert catalog.KUBE_NODE_STATUS_CAPACITY.name not in without[name]
    assert all(catalog.KUBE_NODE_STATUS_CAPACITY.name not in expr for expr in without.values())


def test_gpu_alerts_locate_the_gpu_and_the_job_holding_it():
    for alert in alert_rules(CFG):
        if alert.group != "ml_gpu_resources":
            continue
        if alert.name in ("GPUUtilizationLow", "GPUUtilizationCritical"):  # judged per job
            assert set(alert.locating_labels) == {"model_type", "job_id"}, alert.name
            assert alert.expr.startswith(jobs.JOB_UTILIZATION_AVG.record), alert.name
        else:
            assert {"node", "gpu_id", "uuid", "gpu_name", "model_type", "job_id"} <= set(alert.locating_labels)
            # the join keeps the GPUs no job holds: `or on (uuid)` the unjoined expression
            assert "\nor on (uuid)\n" in alert.expr, alert.name


def test_training_alerts_locate_the_job():
    for name in (
        "TrainingNaNDetected",
        "TrainingSlowdown",
        "TrainingJobFailed",
        "MLModelAccuracyDegraded",
        "CheckpointSaveFailures",
    ):
        alert = next(a for a in alert_rules(CFG) if a.name == name)
        assert {"model_type", "job_id"} <= set(alert.locating_labels)


def test_training_service_down_uses_the_up_metric_and_the_configured_service():
    cfg = ObservabilityConfig(training_service="trainer-api")
    alert = next(a for a in alert_rules(cfg) if a.name == "MLTrainingServiceDown")
    assert f'{catalog.UP.name}{{service="trainer-api"}}' in alert.expr
    assert "ml-training-service" not in alert.expr


_SERIES_NAME = re.compile(
    r"(?<![\w:.\"])([a-z_][a-z0-9_]*(?::[a-z0-9_]+)*)(?=\s*[{\[)]|\s*$|\s+(?:offset|>|<|==|/|or|unless|\+))"
)
_PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "by",
    "rate",
    "increase",
    "offset",
    "or",
    "unless",
    "and",
    "absent",
    "time",
    "histogram_quantile",
    "max_over_time",
    "topk",
    "changes",
    "delta",
    "le",
    "predict_linear",
    "last_over_time",
    "sum_over_time",
    "clamp_min",
    "vector",
}


def _series_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\b(by|without|on|ignoring|group_left|group_right) \([^)]*\)", "", without_strings)
    without_matchers = re.sub(r"\{[^}]*\}", "{}", without_labels)
    return {n for n in _SERIES_NAME.findall(without_matchers) if n not in _PROMQL_WORDS and not n.isdigit()}


def test_rules_query_only_catalog_series_and_recorded_series():
    # The partials the shard tier records (the replica alerts read each replica's heartbeat).
    partials = {str(r["record"]) for g in tier_rule_groups(CFG)[Tier.SHARD] for r in g["rules"]
                if is_partial(str(r.get("record", "")))}  # fmt: skip
    known = {s for m in catalog.ALL_METRICS for s in m.series_names} | {r.record for r in RECORDING_RULES} | partials
    exprs = [a.expr for a in alert_rules(CFG)] + [r.expr for r in RECORDING_RULES]
    found = set().union(*(_series_names(e) for e in exprs))
    assert found, "the series-name scan found nothing: it is broken"
    assert found <= known, sorted(found - known)
    assert catalog.GPU_MEMORY_USED_BYTES.name in found
    assert recording.MODEL_CACHE_MISS_RATIO.record in found


def test_recording_rules_are_named_level_metric_operation_and_unique():
    records = [r["record"] for g in rule_groups(CFG) for r in g["rules"] if "record" in r]
    assert len(records) == len(set(records)), "a series recorded by two rules"
    for record in (r.record for r in RECORDING_RULES):
        level, metric, operation = record.split(":")
        assert level and operation
        assert metric.startswith("ml_"), record


def test_rules_file_is_deterministic_and_is_the_groups():
    text = rules_file_yaml(CFG)
    assert text == rules_file_yaml(ObservabilityConfig())
    assert yaml.safe_load(text) == {"groups": rule_groups(CFG)}
    names = [g["name"] for g in rule_groups(CFG)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("scrape", "evaluation", "budget"), INTERVALS)
def test_groups_run_at_the_evaluation_interval(scrape, evaluation, budget):
    for group in rule_groups(variant_cfg(scrape, evaluation, budget)):
        assert group["interval"] == f"{evaluation}s"


def test_nothing_newer_than_prometheus_2_42():
    text = rules_file_yaml(CFG)
    for group in rule_groups(CFG):
        assert set(group) <= {"name", "interval", "rules"}, group["name"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}
    for newer in ("query_offset", "limitk", "limit_ratio", "keep_firing_for"):
        assert newer not in text


def _stack_configs() -> dict[str, ObservabilityConfig]:
    stacks = {}
    for stack in available_stacks():
        settings = validate_stack(read_stack_config(stack))
        stacks[stack] = settings.observability_config()
    return stacks


@pytest.mark.slow
def test_promtool_check_rules_passes_for_every_stack_and_interval_variant(tmp_path):
    configs = {f"stack-{name}": cfg for name, cfg in _stack_configs().items()}
    assert {"stack-dev", "stack-staging", "stack-prod"} <= set(configs)
    configs |= {f"s{s}-e{e}-b{b}": variant_cfg(s, e, b) for s, e, b in INTERVALS}
    files = []
    for name, cfg in configs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(rules_file_yaml(cfg), encoding="utf-8")
        files.append(str(path))
    broken = tmp_path / "broken.yaml"
    hot = f"> {CFG.thresholds.gpu_temperature_high_celsius.promql}"
    broken.write_text(rules_file_yaml(CFG).replace(hot, f"> {hot}"), encoding="utf-8")
    ok = subprocess.run([promtool(), "check", "rules", *files], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("SUCCESS") == len(files)
    bad = subprocess.run([promtool(), "check", "rules", str(broken)], capture_output=True, text=True, check=False)
    assert bad.returncode != 0, "promtool accepted a broken expression: the check proves nothing"


def test_gpu_errors_alert_reads_only_the_errors_counter_not_the_per_code_xid_series():
    # At 8,000 GPUs the per-code series made this one rule cost seconds; the errors counter counts
    # every XID (any code), uncorrectable ECC error and lost GPU, so it alone is the signal.
    (errors,) = [a for a in alert_rules(CFG) if a.name == "GPUErrorsDetected"]
    # (through the records at the head of the group: its counters above zero, and the GPUs whose
    # counters grew; and the jobs' GPU info, to label the GPU with the job holding it)
    assert _series_names(errors.expr) == {gpu.ERRORS_INCREASED, catalog.TRAINING_JOB_GPU_INFO.name}
    inputs = {r.record: r.expr for r in gpu.input_rules(CFG)}
    assert _series_names(inputs[gpu.ERRORS_INCREASED]) == {gpu.ERRORS_NONZERO}
    assert _series_names(inputs[gpu.ERRORS_NONZERO]) == {catalog.GPU_ERRORS_TOTAL.name}
    assert catalog.GPU_XID_ERRORS_TOTAL.name in errors.description  # it still points at the codes


def test_no_alert_recording_rule_reads_the_gpu_pollers_series():
    # One recorded series per GPU every evaluation costs more than the alerts reading the poller's
    # series themselves (see recording.py).
    gpu_series = {s for m in catalog.by_producer(catalog.Producer.GPU_POLLER) for s in m.series_names}
    for group in recording.recording_groups(CFG):
        for rule in group["rules"]:
            assert not _series_names(rule["expr"]) & gpu_series, rule["record"]
