"""Two scrape shards and a global tier answer like one Prometheus (real Prometheus 2.42 servers).

A small synthetic fleet (16 GPU nodes x 2 GPUs, 8 training jobs, the ML service, Tempo's span
metrics: 26 targets, each on its own 127.0.0.1 port) is scraped three ways at once:

- two shards, each keeping the targets `hashmod` of their pod's node name assigns it (the rendered
  relabel rules: a node's GPU poller and the training job holding its GPUs on one shard),
  evaluating `rules-shard.yaml` and remote-writing everything to
- the global Prometheus (`--web.enable-remote-write-receiver`), which evaluates `rules-global.yaml`
  (and scrapes Tempo's stand-in: Tempo remote-writes to the global tier);
- one unsharded reference Prometheus scraping everything and evaluating both files.

The fleet holds still so that the answers can be compared exactly: gauges keep one value, counters
(and histogram buckets) grow linearly from the moment the fleet opens, which every server sees at
the same scrape (same external labels: the same scrape phase per target; same rule file paths:
the same evaluation phase per group). Then every dashboard query the global server answers equals
the reference's answer, every alert is active on exactly one server of the sharded topology and
the set equals the reference's (the per-GPU alerts kept on the shards carry the holding job's
labels, as on one server), and every target is scraped by exactly one shard.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fleet.data import FleetShape
from bench.fleet.live import NO_JOB, Target, targets
from bench.fleet.query_timing import first_label_values
from bench.fleet.series import MODEL_TYPES, job_id, node_name
from bench.fleet.sharded_topology import TargetServers, Topology, hashmod, start_topology
from bench.fleet.steady import SteadyFleet
from bench.fleet.values import GPU_MEMORY_BYTES, Patterns
from dashboards import build_all
from dashboards.clusters import CLUSTER_LABEL, CLUSTER_VARIABLE
from dashboards.global_tier import is_drilldown
from dashboards.queries import panel_queries
from foxhunt_trainer.contract import catalog
from harness.prometheus import PrometheusApi
from observability.config import ObservabilityConfig, RemoteWrite
from observability.partials import SHARD_LABEL, is_partial
from observability.rules import Tier, rule_groups, tier_rule_groups
from observability.scrape_config import SHARD_KEY

pytestmark = pytest.mark.slow

INTERVAL = 5
CFG = ObservabilityConfig(scrape_interval_seconds=INTERVAL, evaluation_interval_seconds=INTERVAL, shards=2,
                          cluster="e2e", clusters=("e2e",))  # fmt: skip
# A multi-node job: job 1 holds node 1 and, through a worker pod, a node that the other shard scrapes.
SPANNING_JOB = 1
SPANNING_NODE = next(n for n in range(8, 15) if hashmod(node_name(n), 2) != hashmod(node_name(SPANNING_JOB), 2))
SHAPE = FleetShape(nodes=16, gpus_per_node=2, training_jobs=8, interval_seconds=INTERVAL,
                   spanning=((SPANNING_JOB, SPANNING_NODE),))  # fmt: skip
MODES = (RemoteWrite.ALL, RemoteWrite.AGGREGATES)
# Counters grow by their first value every RAMP_SECONDS from the moment the fleet opens.
RAMP_SECONDS = 300.0
# Scrapes and evaluations before answers are compared: every rate window of a dashboard
# (4 scrape intervals) holds samples, and alerts have been evaluated a few times.
WARMUP_SECONDS = 8 * INTERVAL
AHEAD_SECONDS = 1.0
REL_TOLERANCE = 1e-9  # the same samples, summed in another order
EXTERNAL = "cluster"


def _first(fleet: list[Target], service: str) -> int:
    return next(i for i, t in enumerate(fleet) if t.labels.get("service") == service)


def _poller_of(fleet: list[Target], node: str) -> int:
    return next(
        i
        for i, t in enumerate(fleet)
        if t.labels.get("service") == CFG.gpu_poller_service and t.labels[SHARD_KEY] == node
    )


# Training job i holds the GPUs of node i (bench.fleet.series); the last node's GPUs are held by none.
HELD_NODE, UNHELD_NODE = node_name(0), node_name(SHAPE.nodes - 1)
HOLDER = {"model_type": MODEL_TYPES[0], "job_id": job_id(0)}
# Per-GPU alerts labelled with the job holding the GPU (GPUMemoryExhausted, GPUErrorsDetected: the
# 30-second promise keeps them on the shards, where the GPU's poller and the job's pod are scraped).
JOB_LABELLED_GPU_ALERTS = ("GPUMemoryExhausted", "GPUErrorsDetected")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Topology, list[Target]]]:
    fleet = targets(CFG, SHAPE, Patterns(1, INTERVAL, int(time.time())))
    steady = SteadyFleet(fleet, INTERVAL, AHEAD_SECONDS, RAMP_SECONDS)
    # Make alerts of both tiers fire: a NaN in one job, a GPU error and a full GPU on the first node,
    # whose GPUs the first job holds, and a GPU error on the last node, whose GPUs no job holds
    # (shard tier); training data two days old (global tier).
    poller, job = _first(fleet, CFG.gpu_poller_service), _first(fleet, CFG.training_job_service)
    steady.set_first(job, catalog.TRAINING_NAN_COUNT.name, 1.0)
    steady.set_first(poller, catalog.GPU_ERRORS_TOTAL.name, 1.0)
    steady.set_first(poller, catalog.GPU_MEMORY_USED_BYTES.name, 0.97 * GPU_MEMORY_BYTES)
    steady.set_first(_poller_of(fleet, UNHELD_NODE), catalog.GPU_ERRORS_TOTAL.name, 1.0)
    steady.set_all(catalog.TRAINING_DATA_LAST_UPDATE_TIMESTAMP_SECONDS.name, time.time() - 2 * 86400)
    with TargetServers(len(fleet), steady.page) as servers:
        running = start_topology(
            tmp_path_factory.mktemp("sharded"), CFG, servers, [t.labels for t in fleet], reference=True, modes=MODES
        )
        try:
            running.wait_scraping(len(fleet))
            steady.open()
            time.sleep(WARMUP_SECONDS)
            yield running, fleet
        finally:
            running.stop()


def _active_targets(api: PrometheusApi) -> list[dict[str, Any]]:
    return list(api.get("/api/v1/targets", {"state": "active"})["activeTargets"])


def test_every_target_is_scraped_by_exactly_one_shard(topology: tuple[Topology, list[Target]]) -> None:
    running, fleet = topology
    scraped = {t.labels["pod"] for t in fleet if t.labels.get("job", NO_JOB) != NO_JOB}
    per_shard = [[t["labels"]["pod"] for t in _active_targets(s.api)] for s in running.shards]
    assert all(per_shard), per_shard  # both shards have work
    assert Counter(p for pods in per_shard for p in pods) == Counter(scraped)  # each exactly once
    node_of = {t.labels.get("pod"): t.labels[SHARD_KEY] for t in fleet}
    nodes_per_shard = [{node_of[p] for p in pods} for pods in per_shard]
    assert not set.intersection(*nodes_per_shard)  # every pod of a node on that node's one shard
    assert running.reference is not None
    reference = {t["labels"].get("pod", t["labels"]["instance"]) for t in _active_targets(running.reference.api)}
    tempo = {f"{NO_JOB}:{i}" for i, t in enumerate(fleet) if t.labels.get("job", NO_JOB) == NO_JOB}
    assert reference == scraped | tempo
    for shard in running.shards:
        assert all(t["health"] == "up" for t in _active_targets(shard.api))
    # What the shards wrote carries the cluster name (the external label) in the global tier (Tempo's
    # stand-in, which the global tier scrapes itself, is labelled as Tempo labels what it writes).
    selector = f'{EXTERNAL}="{CFG.cluster}", job!="{NO_JOB}"'
    answer = running.global_tier.api.query(f"count({catalog.UP.name}{{{selector}}} == 1)")
    assert answer and int(float(answer[0]["value"][1])) == len(scraped)


def _answers(api: PrometheusApi, expr: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for series in api.query(expr, at):
        labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != EXTERNAL))
        assert labels not in out, f"{expr}: two answers for {dict(labels)}"
        out[labels] = float(series["value"][1])
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=1e-9)


# Values each Prometheus measures itself (how long its scrapes and rule evaluations take): two
# servers never agree on them, so only the series they answer with are compared.
SERVER_MEASURED = (
    catalog.SCRAPE_DURATION_SECONDS.name,
    catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name,
)


def _differs(want: dict[Any, float], got: dict[Any, float], expr: str) -> bool:
    measured = any(name in expr for name in SERVER_MEASURED)
    return want.keys() != got.keys() or (not measured and not all(_same(want[k], got[k]) for k in want))


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_every_dashboard_query_of_the_global_tier_answers_like_one_server(
    topology: tuple[Topology, list[Target]], mode: RemoteWrite
) -> None:
    """With `remoteWrite: all` every query; with `aggregates` every query but the per-GPU
    drill-downs, each of which the shards answer instead (every series the one server answers,
    a shard answers with the same value)."""
    running, _ = topology
    assert running.reference is not None
    reference, global_api = running.reference.api, running.global_tiers[mode].api
    at = time.time() - INTERVAL  # everything the shards wrote by then has arrived
    compared, non_empty, drilldowns, mismatches = 0, 0, 0, []
    for dashboard in build_all(CFG).values():
        chosen = first_label_values(dashboard, reference)
        for query in panel_queries(dashboard):
            if query.datasource_type != "prometheus":
                continue
            expr = dataclasses.replace(query, variables={**query.variables, **chosen}).substituted
            want = _answers(reference, expr, at)
            compared += 1
            non_empty += bool(want)
            where = f"{query.dashboard_uid}/{query.panel_title}: {expr}\n  one server: {want}"
            if mode is RemoteWrite.AGGREGATES and is_drilldown(query, CFG):
                drilldowns += bool(want)
                answered = [_answers(shard.api, expr, at) for shard in running.shards]
                for key, value in want.items():
                    if not any(key in a and _same(a[key], value) for a in answered):
                        mismatches.append(f"{where}\n  no shard answers {dict(key)} = {value}: {answered}")
                assert not _answers(global_api, expr, at) or not want, (
                    f"{where}: the aggregates tier has per-GPU series"
                )
                continue
            got = _answers(global_api, expr, at)
            if _differs(want, got, expr):
                mismatches.append(f"{where}\n  sharded: {got}")
    assert not mismatches, f"{len(mismatches)} of {compared} queries differ:\n" + "\n".join(mismatches)
    assert compared > 50 and non_empty > compared * 0.6, (compared, non_empty)
    assert (drilldowns > 10) is (mode is RemoteWrite.AGGREGATES), drilldowns


def _alerts(api: PrometheusApi) -> list[tuple[tuple[str, str], ...]]:
    """Each active alert's labels and state, as Alertmanager receives it: every server adds its
    external label `cluster`, which a global-tier alert over remote-written series already carries."""
    alerts = api.get("/api/v1/alerts")["alerts"]
    out = []
    for alert in alerts:
        labels = {**alert["labels"], "state": alert["state"]}
        assert labels.setdefault(EXTERNAL, CFG.cluster) == CFG.cluster, labels
        out.append(tuple(sorted(labels.items())))
    return out


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_each_alert_is_active_on_exactly_one_server_and_as_on_one_server(
    topology: tuple[Topology, list[Target]], mode: RemoteWrite
) -> None:
    running, _ = topology
    assert running.reference is not None
    global_tier = running.global_tiers[mode]
    deadline = time.monotonic() + 6 * INTERVAL
    while True:  # the global tier sees a change up to one evaluation later: wait until they agree
        want = Counter(_alerts(running.reference.api))
        got = Counter(a for server in (*running.shards, global_tier) for a in _alerts(server.api))
        if want == got or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert got == want
    assert set(got.values()) == {1}  # no alert twice (from two shards, or a shard and the global tier)
    # The per-GPU alerts kept on the shards for the 30-second promise carry the labels of the job
    # holding the GPU (the shard that scrapes a node's poller scrapes the pods on that node), and
    # still fire for a GPU no job holds.
    on_shards = [dict(a) for server in running.shards for a in _alerts(server.api)]
    enriched = {(a["alertname"], a["node"]): a for a in on_shards if a["alertname"] in JOB_LABELLED_GPU_ALERTS}
    assert set(enriched) == {
        ("GPUErrorsDetected", HELD_NODE), ("GPUMemoryExhausted", HELD_NODE), ("GPUErrorsDetected", UNHELD_NODE)
    }, sorted(enriched)  # fmt: skip
    for name in ("GPUErrorsDetected", "GPUMemoryExhausted"):
        alert = enriched[(name, HELD_NODE)]
        assert {k: alert.get(k) for k in HOLDER} == HOLDER, alert
    assert not {"model_type", "job_id"} & set(enriched[("GPUErrorsDetected", UNHELD_NODE)])
    tier_of = {r["alert"]: tier for tier, groups in tier_rule_groups(CFG).items() for g in groups for r in g["rules"]
               if "alert" in r}  # fmt: skip
    firing = {dict(a)["alertname"] for a in got if dict(a)["state"] == "firing"}
    assert {tier_of[name] for name in firing} == {Tier.SHARD, Tier.GLOBAL}, firing
    for server in running.shards:
        names = {dict(a)["alertname"] for a in _alerts(server.api)}
        assert {tier_of[n] for n in names} <= {Tier.SHARD}
    assert {tier_of[dict(a)["alertname"]] for a in _alerts(global_tier.api)} <= {Tier.GLOBAL}


def test_a_job_spanning_two_shards_has_the_per_job_values_of_one_server(
    topology: tuple[Topology, list[Target]],
) -> None:
    """The multi-node job's pods are scraped by different shards; each shard records its partial of
    the job's GPUs, and every per-job record of both global tiers equals one server's."""
    running, fleet = topology
    assert running.reference is not None
    job = job_id(SPANNING_JOB)
    pods = {t.labels["pod"] for t in fleet if t.labels.get("pod", "").startswith(f"train-{job}")}
    per_shard = [{t["labels"]["pod"] for t in _active_targets(s.api)} & pods for s in running.shards]
    assert len(pods) == 2 and all(len(p) == 1 for p in per_shard), per_shard
    partial = f'shard_model_type_job_id:ml_training_job_gpu_info:count{{job_id="{job}"}}'
    for tier in running.global_tiers.values():
        shards = {a["metric"][SHARD_LABEL]: float(a["value"][1]) for a in tier.api.query(partial)}
        assert shards == {"0": SHAPE.gpus_per_node, "1": SHAPE.gpus_per_node}, shards
    at = time.time() - INTERVAL
    # The per-job records of the global tier: each combines the job's partials from both shards.
    records = sorted({str(r["record"]) for g in tier_rule_groups(CFG)[Tier.GLOBAL] for r in g["rules"]
                      if str(r.get("record", "")).startswith("model_type_job_id:")})  # fmt: skip
    mismatches, compared = [], 0
    for record in records:
        expr = f'{record}{{job_id="{job}"}}'
        want = _answers(running.reference.api, expr, at)
        compared += bool(want)
        for mode, tier in running.global_tiers.items():
            got = _answers(tier.api, expr, at)
            if _differs(want, got, expr):
                mismatches.append(f"{mode.value}: {expr}\n  one server: {want}\n  sharded: {got}")
    assert not mismatches, "\n".join(mismatches)
    assert compared > 10, compared
    gpus = _answers(
        running.global_tiers[RemoteWrite.AGGREGATES].api,
        f'model_type_job_id:ml_training_job_gpu_info:count{{job_id="{job}"}}',
        at,
    )
    assert list(gpus.values()) == [2 * SHAPE.gpus_per_node], gpus


def test_the_aggregates_tier_receives_no_per_gpu_series(topology: tuple[Topology, list[Target]]) -> None:
    running, _ = topology
    everything = running.global_tiers[RemoteWrite.ALL].api
    aggregates = running.global_tiers[RemoteWrite.AGGREGATES].api
    gpu = catalog.GPU_UTILIZATION_PERCENT.name
    assert everything.query(f"count({gpu})") and not aggregates.query(f"count({gpu})")
    # Only the few GPUs the top/bottom-k partials and records pick, and the alerts, carry a GPU's labels there.
    per_gpu = {s["metric"]["__name__"] for s in aggregates.query('count by (__name__) ({uuid!=""})')}
    assert per_gpu and all(re.search(r":(top|bottom)\d+$", n) for n in per_gpu - {"ALERTS"}), per_gpu
    assert len(everything.query('count by (__name__) ({uuid!=""})')) > 20


def test_shards_and_global_tier_load_only_their_groups(topology: tuple[Topology, list[Target]]) -> None:
    running, _ = topology
    tiers = tier_rule_groups(CFG)
    for server, tier in ((running.shards[0], Tier.SHARD), (running.global_tier, Tier.GLOBAL)):
        groups = server.api.get("/api/v1/rules")["groups"]
        assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in tiers[tier])
        assert all(r["health"] == "ok" for g in groups for r in g["rules"]), [
            (g["name"], r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"
        ]
    # Every rule once, plus the partials the shards record for the global rules to combine.
    own = [r for t in tiers.values() for g in t for r in g["rules"] if not is_partial(str(r.get("record", "")))]
    assert len(own) == sum(len(g["rules"]) for g in rule_groups(CFG))


def test_the_cluster_variable_selects_this_cluster_on_the_live_global_tier(
    topology: tuple[Topology, list[Target]],
) -> None:
    """Dashboards for a global tier that holds several clusters: `$cluster` lists this stack's
    cluster from the live global tier, and every query filtered by it answers as the same query of
    the one-cluster dashboards on one server."""
    running, _ = topology
    assert running.reference is not None
    reference, global_api = running.reference.api, running.global_tier.api
    several = dataclasses.replace(CFG, clusters=(CFG.cluster, "another-cluster"))
    one_cluster = build_all(CFG)
    at = time.time() - INTERVAL
    compared, non_empty, mismatches = 0, 0, []
    for uid, dashboard in build_all(several).items():
        (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == CLUSTER_VARIABLE]
        label = str(variable["query"]).removeprefix("label_values(").rsplit(",", 1)
        listed = global_api.get(f"/api/v1/label/{label[1].strip(' )')}/values", {"match[]": label[0]})
        assert listed == [CFG.cluster], (uid, variable["query"], listed)
        chosen = first_label_values(dashboard, global_api)
        assert chosen[CLUSTER_VARIABLE] == CFG.cluster
        single_chosen = first_label_values(one_cluster[uid], reference)
        assert {k: v for k, v in chosen.items() if k != CLUSTER_VARIABLE} == single_chosen, uid
        for query, single in zip(panel_queries(dashboard), panel_queries(one_cluster[uid]), strict=True):
            assert (query.panel_title, query.ref_id) == (single.panel_title, single.ref_id)
            if query.datasource_type != "prometheus":
                continue
            expr = dataclasses.replace(query, variables={**query.variables, **chosen}).substituted
            single_expr = dataclasses.replace(single, variables={**single.variables, **single_chosen}).substituted
            assert f'{CLUSTER_LABEL}=~"{CFG.cluster}"' in expr, expr
            want, got = _answers(reference, single_expr, at), _answers(global_api, expr, at)
            compared += 1
            non_empty += bool(want)
            measured = any(name in expr for name in SERVER_MEASURED)
            if want.keys() != got.keys() or (not measured and not all(_same(want[k], got[k]) for k in want)):
                mismatches.append(f"{uid}/{query.panel_title}: {expr}\n  one server: {want}\n  global: {got}")
    assert not mismatches, f"{len(mismatches)} of {compared} queries differ:\n" + "\n".join(mismatches)
    assert compared > 50 and non_empty > compared * 0.6, (compared, non_empty)
