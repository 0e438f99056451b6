"""Rule tiers: every rule is placed, cross-target rules never on a shard, the two files are the whole.

The live proof (two shards and a global Prometheus answer like one server) is in
tests/e2e/test_sharded_prometheus.py; these tests pin the derivation itself, rule by rule.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.partials import is_partial
from observability.promql.locality import Locality, derive
from observability.rules import (
    CRITICAL_DETECTION_ALERTS,
    Tier,
    rule_groups,
    rules_file_yaml,
    tier_rule_groups,
    tier_rules_yaml,
)
from observability.rules.pushdown import push_down
from observability.rules.tiers import (
    DECLARED,
    Declared,
    TierError,
    place,
    rule_name,
    shard_tier_problems,
    split_groups,
)
from tests.rules.detection_cases import INTERVALS, variant_cfg

CFG = ObservabilityConfig()
GPU = catalog.GPU_UTILIZATION_PERCENT.name
MEM_USED, MEM_TOTAL = catalog.GPU_MEMORY_USED_BYTES.name, catalog.GPU_MEMORY_TOTAL_BYTES.name
LOSS = catalog.TRAINING_LOSS.name
NAN = catalog.TRAINING_NAN_COUNT.name
ITER = catalog.TRAINING_ITERATION_SECONDS.bucket
CACHE = catalog.MODEL_CACHE_MISSES_TOTAL.name
CALLS = catalog.SPANMETRICS_CALLS_TOTAL.name
UP = catalog.UP.name
# A training job's info series naming the GPUs it holds, as a job exposes it (its own target).
JOB_INFO = "ml_training_job_gpu_info"
JOB_INFO_LOCALITY = Locality(frozenset({("job_id", "training_job"), ("instance", "target"), ("pod", "target")}))

CROSS_TARGET = {
    "fleet median": f"quantile(0.5, {GPU})",
    "fleet sum": f"sum({catalog.GPU_POWER_WATTS.name})",
    "fleet minimum": f"min({catalog.GPU_SM_CLOCK_HERTZ.name})",
    "top-k": f"topk(5, {GPU})",
    "bottom-k per GPU model": f"bottomk by (gpu_name) (5, {GPU})",
    "allocation total": f"sum({MEM_TOTAL})",
    "allocated GPUs per model": f"count by (model_type) ({JOB_INFO})",
    "per-model aggregate": f"histogram_quantile(0.95, sum by (model_type, le) (rate({ITER}[5m])))",
    "per-model loss": f"avg by (model_type) ({LOSS})",
    "per-service aggregate over replicas": f"sum by (namespace, service) (rate({CACHE}[5m]))",
    "job info joined with the poller's GPU series": (f"{JOB_INFO} * on (node, gpu_id) group_left {GPU}"),
    "GPU series joined with the job info": (
        f"max by (node, gpu_id, job_id) ({GPU} * on (node, gpu_id) group_left (job_id) {JOB_INFO})"
    ),
    "absent": f'absent({UP}{{service="ml-training-service"}})',
    "constant vector": "vector(1)",
    "or with a constant": f"sum by (node) ({GPU}) or vector(0)",
    "services down": f"max by (service) ({UP}) == 0",
    "span metrics (remote-written by Tempo)": f"sum by (service) (rate({CALLS}[5m]))",
    "scalar of a fleet": f"{GPU} > scalar(avg({GPU}))",
    "label_replace over the pinning label": f'label_replace(sum by (node) ({GPU}), "node", "x", "", "")',
}
ONE_TARGET = {
    "per-GPU alert": f"max by (node, gpu_id, uuid, gpu_name) ({GPU} > 95)",
    "per-GPU ratio": f"max by (node, gpu_id) ({MEM_USED} / {MEM_TOTAL} > 0.9)",
    "per-job counter": f"sum by (model_type, job_id) (increase({NAN}[5m]) > 0)",
    "per-job quantile": f"histogram_quantile(0.5, sum by (job_id, le) (rate({ITER}[5m])))",
    "per-pod service series": f"sum by (pod) (rate({CACHE}[5m]))",
    "a target down": f"{UP} == 0",
    "per-node join of the poller's own series": f"{GPU} * on (node, gpu_id) group_left {catalog.GPU_POWER_WATTS.name}",
    "per-job or with new series": (
        f"sum by (job_id) (increase({NAN}[5m]) > 0) or (sum by (job_id) ({NAN} > 0) unless on (job_id) {NAN} offset 5m)"
    ),
}


@pytest.mark.parametrize("expr", CROSS_TARGET.values(), ids=CROSS_TARGET.keys())
def test_cross_target_expressions_derive_the_global_tier(expr: str) -> None:
    locality, unknown = derive(expr, {JOB_INFO: JOB_INFO_LOCALITY})
    assert not unknown
    assert not locality.local, expr


@pytest.mark.parametrize("expr", ONE_TARGET.values(), ids=ONE_TARGET.keys())
def test_one_target_expressions_derive_the_shard_tier(expr: str) -> None:
    locality, unknown = derive(expr)
    assert not unknown
    assert locality.local, (expr, locality)


def _group(*rules: dict[str, str]) -> dict[str, object]:
    return {"name": "g", "interval": "15s", "rules": list(rules)}


@pytest.mark.parametrize("expr", CROSS_TARGET.values(), ids=CROSS_TARGET.keys())
def test_a_cross_target_rule_in_the_shard_file_is_reported(expr: str) -> None:
    """The check the render runs on rules-shard.yaml catches each kind of cross-target rule."""
    info = _group({"record": JOB_INFO, "expr": f"max by (job_id, node, gpu_id, instance, pod) ({LOSS})"})
    shard_file = [_group({"alert": "Misplaced", "expr": expr})]
    problems = shard_tier_problems(shard_file, [info, *shard_file])
    assert len(problems) == 1 and "belongs in the global tier" in problems[0]


@pytest.mark.parametrize(
    "config",
    [CFG, *(variant_cfg(*i) for i in INTERVALS)],
    ids=lambda c: f"s{c.scrape_interval_seconds}-e{c.evaluation_interval_seconds}",
)
def test_every_rule_gets_a_tier_and_the_shard_file_holds_only_one_target_rules(config: ObservabilityConfig) -> None:
    groups = rule_groups(config)
    placements = place(groups)
    assert len(placements) == sum(len(g["rules"]) for g in groups)
    tiers = tier_rule_groups(config)
    assert shard_tier_problems(tiers[Tier.SHARD], groups) == []


def test_the_known_cross_target_rules_are_global_and_the_per_target_alerts_are_on_the_shards() -> None:
    tier = {p.name: p.tier for p in place(rule_groups(CFG))}
    for name, want in {
        "fleet:ml_gpu_utilization_percent:p50": Tier.GLOBAL,
        "node_gpu:ml_gpu_utilization_percent:top5": Tier.GLOBAL,
        "fleet:ml_gpu_power_watts:sum": Tier.GLOBAL,
        "model_type:ml_training_data_loading_seconds_bucket:rate5m": Tier.GLOBAL,
        "namespace_service_model_type:ml_inference_latency_seconds:p99_rate5m": Tier.GLOBAL,
        "MLTrainingServiceDown": Tier.GLOBAL,
        "MLInferenceLatencyHigh": Tier.GLOBAL,  # reads a record of the global tier
        "GPUMemoryExhausted": Tier.SHARD,
        "GPUErrorsDetected": Tier.SHARD,
        "TrainingNaNDetected": Tier.SHARD,
        "model_type_job_id:ml_training_iteration_seconds:p95_rate5m": Tier.SHARD,
    }.items():
        assert tier[name] is want, name


def test_the_two_tier_files_hold_every_rule_once_in_order_and_the_partials_on_the_shards() -> None:
    groups = rule_groups(CFG)
    tiers = tier_rule_groups(CFG)
    for tier_groups in tiers.values():
        names = [g["name"] for g in tier_groups]
        assert len(names) == len(set(names))
        assert all(g["rules"] for g in tier_groups)
    partials = [r for g in tiers[Tier.SHARD] for r in g["rules"] if is_partial(rule_name(r))]
    assert len(partials) > 40 and not any(is_partial(rule_name(r)) for g in groups for r in g["rules"])
    assert not any(is_partial(rule_name(r)) for g in tiers[Tier.GLOBAL] for r in g["rules"])
    tiers = {t: [{**g, "rules": [r for r in g["rules"] if not is_partial(rule_name(r))]} for g in tier_groups]
             for t, tier_groups in tiers.items()}  # fmt: skip
    tiers = {t: [g for g in tier_groups if g["rules"]] for t, tier_groups in tiers.items()}
    split = Counter((g["name"], rule_name(r)) for t in tiers.values() for g in t for r in g["rules"])
    whole = Counter((g["name"], rule_name(r)) for g in groups for r in g["rules"])
    assert split == whole and set(split.values()) == {1}
    for group in groups:
        parts = [
            r for t in (Tier.SHARD, Tier.GLOBAL) for g in tiers[t] if g["name"] == group["name"] for r in g["rules"]
        ]
        order = {rule_name(r): i for i, r in enumerate(group["rules"])}
        for tier in tiers.values():
            for part in (g for g in tier if g["name"] == group["name"]):
                assert [order[rule_name(r)] for r in part["rules"]] == sorted(
                    order[rule_name(r)] for r in part["rules"]
                )
        assert len(parts) == len(group["rules"])


def test_a_rule_over_series_outside_the_catalog_must_declare_its_tier() -> None:
    groups = [_group({"alert": "SelfMonitoring", "expr": "prometheus_tsdb_head_series > 1e7"})]
    with pytest.raises(TierError, match=r"g/SelfMonitoring reads prometheus_tsdb_head_series.*DECLARED"):
        place(groups, {})
    declared = {"SelfMonitoring": Declared(Tier.SHARD, "every Prometheus watches its own head")}
    assert [p.tier for p in place(groups, declared)] == [Tier.SHARD]


def test_a_cross_target_rule_cannot_be_declared_onto_the_shards() -> None:
    groups = [_group({"record": "fleet:x:sum", "expr": f"sum({GPU})"})]
    with pytest.raises(TierError, match="declared for the shards but sum"):
        place(groups, {"fleet:x:sum": Declared(Tier.SHARD, "wrong")})
    assert [p.tier for p in place(groups, {"fleet:x:sum": Declared(Tier.GLOBAL, "fine")})] == [Tier.GLOBAL]


def test_declarations_name_rules_that_exist() -> None:
    names = {rule_name(r) for g in rule_groups(CFG) for r in g["rules"]}
    assert set(DECLARED) <= names


def test_a_rule_reading_a_global_record_is_global_and_one_reading_a_shard_record_may_stay() -> None:
    groups = [
        _group(
            {"record": "fleet:gpu:sum", "expr": f"sum({GPU})"},
            {"record": "node:gpu:max", "expr": f"max by (node) ({GPU})"},
            {"alert": "FleetHot", "expr": "fleet:gpu:sum > 10"},
            {"alert": "NodeHot", "expr": "node:gpu:max > 90"},
            {"alert": "NodesHot", "expr": "count(node:gpu:max > 90) > 3"},
        )
    ]
    assert [p.tier for p in place(groups, {})] == [Tier.GLOBAL, Tier.SHARD, Tier.GLOBAL, Tier.SHARD, Tier.GLOBAL]
    split = split_groups(groups, place(groups, {}))
    assert [rule_name(r) for r in split[Tier.SHARD][0]["rules"]] == ["node:gpu:max", "NodeHot"]


def test_one_shard_keeps_the_single_rules_file() -> None:
    assert rules_file_yaml(ObservabilityConfig(shards=1)) == rules_file_yaml(ObservabilityConfig(shards=4))
    whole = yaml.safe_load(rules_file_yaml(CFG))["groups"]
    assert whole == rule_groups(CFG)


@pytest.mark.slow
def test_promtool_loads_both_tier_files(tmp_path: Path) -> None:
    files = []
    for tier, text in tier_rules_yaml(CFG).items():
        path = tmp_path / f"rules-{tier.value}.yaml"
        path.write_text(text)
        files.append(str(path))
    proc = subprocess.run(["promtool", "check", "rules", *files], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_the_30_second_alerts_run_on_the_shards() -> None:
    """The global tier sees a shard's samples one remote-write delay late: the alerts bound by the
    30-second detection promise must be evaluated where their series are scraped."""
    tier = {p.name: p.tier for p in place(rule_groups(CFG))}
    assert {tier[name] for name in CRITICAL_DETECTION_ALERTS} == {Tier.SHARD}


def test_gpu_series_joined_with_the_job_holding_the_gpu_stay_on_the_shards() -> None:
    """A GPU's poller and the training pod holding it are on one node, so on one shard: the job's view
    of its GPUs and the per-GPU alerts labelled with the holding job are computed there; a job's
    aggregate over its GPUs combines pods (a multi-node job has one per node) and is global."""
    from observability.rules import jobs

    tier = {p.name: p.tier for p in place(rule_groups(CFG))}
    for name in ("GPUMemoryExhausted", "GPUErrorsDetected", "GPUTemperatureHigh", "GPUMemoryExhaustionPredicted",
                 jobs.HELD_UTILIZATION.record, jobs.HELD_MEMORY_RATIO.record):  # fmt: skip
        assert tier[name] is Tier.SHARD, name
    assert tier[jobs.JOB_UTILIZATION_AVG.record] is Tier.GLOBAL and tier[jobs.JOB_GPUS.record] is Tier.GLOBAL
    # The job's info series is reported by every pod of the job: job_id alone does not pin it.
    assert not derive(f"count by (job_id) ({JOB_INFO})")[0].local
    assert derive(f"count by (uuid, job_id) ({JOB_INFO})")[0].local


def test_the_global_tiers_records_carry_the_cluster_and_nothing_else_changes() -> None:
    """A Prometheus never adds its external labels to what it records itself: the global tier's
    records say their cluster through a rule label, as everything the shards remote-write does."""
    sharded = ObservabilityConfig(shards=2, cluster="eu-1", clusters=("eu-1", "us-1"))
    plain, labelled = push_down(split_groups(rule_groups(sharded)), rule_groups(sharded)), tier_rule_groups(sharded)
    assert labelled[Tier.SHARD] == plain[Tier.SHARD]
    records = 0
    for before, after in zip(plain[Tier.GLOBAL], labelled[Tier.GLOBAL], strict=True):
        for old, new in zip(before["rules"], after["rules"], strict=True):
            if "record" in old:
                records += 1
                assert new == {**old, "labels": {"cluster": "eu-1"}}
            else:
                assert new == old
    assert records > 20
    unlabelled = ObservabilityConfig(shards=2)
    assert tier_rule_groups(unlabelled) == push_down(split_groups(rule_groups(unlabelled)), rule_groups(unlabelled))
