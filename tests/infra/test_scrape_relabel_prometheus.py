"""The annotation relabelling proven against a real Prometheus (Debian's 2.42).

Debian builds Prometheus without Kubernetes discovery, and there is no cluster here anyway, so the
targets come from file discovery: each target group carries exactly the `__meta_kubernetes_*`
labels that pod-role Kubernetes discovery would produce for one container port of one pod. The
scrape job is `annotation_scrape_configs()` with only its discovery section swapped. Small HTTP
servers stand in for the pods: the annotated ones must be scraped on the annotated port and path,
the rest dropped.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.scrape_config import (
    INTERVAL_ANNOTATION,
    JOB_NAME,
    PATH_ANNOTATION,
    POD_MONITOR_NAME,
    PORT_ANNOTATION,
    RANK_PORTS_ANNOTATION,
    SCRAPE_ANNOTATION,
    SERVICE_LABEL,
    SHARD_KEY,
    TIMEOUT_ANNOTATION,
    annotation_label,
    annotation_present_label,
    annotation_scrape_configs,
    critical_scrape_annotations,
    from_operator_relabeling,
    pod_label,
    pod_monitor_spec,
    pod_scrape_annotations,
    rank_port_name,
    scrape_config_yaml,
)

pytestmark = pytest.mark.slow

NAMESPACE = "foxhunt-test"
GPU_METRIC = catalog.GPU_UTILIZATION_PERCENT.name
UP = catalog.UP.name


def pod_target(
    pod: str,
    *,
    ip: str,
    declared_port: int,
    annotations: dict[str, str],
    service: str | None,
    container: str = "app",
    phase: str = "Running",
    node: str = "gpu-node-1",
    port_name: str = "http",
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """One target group as Kubernetes pod-role discovery would produce it (one container port)."""
    address = f"[{ip}]:{declared_port}" if ":" in ip else f"{ip}:{declared_port}"
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_container_port_number": str(declared_port),
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_ready": "true",
    }
    for key, value in annotations.items():
        labels[annotation_label(key)] = value
        labels[annotation_present_label(key)] = "true"
    if service is not None:
        labels[pod_label(SERVICE_LABEL)] = service
        labels[pod_label(SERVICE_LABEL).replace("_label_", "_labelpresent_", 1)] = "true"
    return {"targets": [address], "labels": labels}


def emulated_operator_job(cfg: ObservabilityConfig, sd_file: Path) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for our PodMonitor (operator mode).

    The operator is not available here: this re-creates its generated prefix for a PodMonitor
    endpoint without a port (selector keep, filterRunning, namespace/container/pod/job labels), then
    appends the PodMonitor's own relabelings, as the operator's config generator does.
    """
    spec = pod_monitor_spec(cfg, [NAMESPACE])
    endpoint = spec["podMetricsEndpoints"][0]
    (expression,) = spec["selector"]["matchExpressions"]
    assert expression == {"key": SERVICE_LABEL, "operator": "Exists"}
    prefix: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {
            "source_labels": [pod_label(SERVICE_LABEL).replace("_label_", "_labelpresent_", 1)],
            "regex": "(true)",
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)", "action": "drop"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"monitoring/{POD_MONITOR_NAME}"},
    ]
    return {
        "job_name": f"podMonitor/monitoring/{POD_MONITOR_NAME}/0",
        "scrape_interval": endpoint["interval"],
        "scrape_timeout": endpoint["scrapeTimeout"],
        "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
        "relabel_configs": prefix + [from_operator_relabeling(r) for r in endpoint["relabelings"]],
    }


def wait_for_targets(prom: Any, expected_active: int, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    targets: dict[str, Any] = {}
    while time.monotonic() < deadline:
        targets = prom.api("/api/v1/targets")
        active = targets["activeTargets"]
        if len(active) >= expected_active and all(t["health"] == "up" for t in active):
            return targets
        time.sleep(0.2)
    raise AssertionError(f"targets not all up in {timeout}s: {json.dumps(targets, indent=1)}\n{prom.log.read_text()}")


def test_annotated_pods_are_scraped_on_their_port_and_path_and_others_dropped(
    tmp_path: Path, metrics_servers: Callable[..., Any], prometheus: Callable[..., Any]
) -> None:
    body = f'# TYPE {GPU_METRIC} gauge\n{GPU_METRIC}{{gpu_id="0"}} 97\n'
    plain = metrics_servers("/metrics", body)  # annotated, default path
    custom = metrics_servers("/internal/metrics", body)  # annotated, custom path (404 on /metrics)
    two_ports = metrics_servers("/metrics", body)  # one pod, two declared container ports
    ipv6 = metrics_servers("/metrics", body, host="::1")  # annotated pod with an IPv6 address
    unannotated = metrics_servers("/metrics", body)
    opted_out = metrics_servers("/metrics", body)
    finished = metrics_servers("/metrics", body)
    # A torchrun pod: two ranks, each on its own port (metrics-0, metrics-1), and a rendezvous port.
    ranks = [metrics_servers("/metrics", body), metrics_servers("/metrics", body)]
    rank_annotations = {**pod_scrape_annotations(ranks[0].port), RANK_PORTS_ANNOTATION: "true"}
    rank_groups = [
        *(pod_target("ranks-0", ip="127.0.0.1", declared_port=server.port, annotations=rank_annotations,
                     service="training-job", port_name=rank_port_name(i)) for i, server in enumerate(ranks)),
        pod_target("ranks-0", ip="127.0.0.1", declared_port=29500, annotations=rank_annotations,
                   service="training-job", port_name="rendezvous"),
    ]  # fmt: skip

    groups = [
        *rank_groups,
        pod_target("plain-0", ip="127.0.0.1", declared_port=1, annotations=pod_scrape_annotations(plain.port),
                   service="api-gateway"),
        pod_target("custom-0", ip="127.0.0.1", declared_port=2,
                   annotations=pod_scrape_annotations(custom.port, "/internal/metrics"), service="order-router"),
        pod_target("two-ports-0", ip="127.0.0.1", declared_port=3, container="app",
                   annotations=pod_scrape_annotations(two_ports.port), service="risk-engine"),
        pod_target("two-ports-0", ip="127.0.0.1", declared_port=4, container="sidecar",
                   annotations=pod_scrape_annotations(two_ports.port), service="risk-engine"),
        pod_target("ipv6-0", ip="::1", declared_port=5, annotations=pod_scrape_annotations(ipv6.port),
                   service="feature-store"),
        # Same container port as the server, but no annotations: must not be scraped.
        pod_target("unannotated-0", ip="127.0.0.1", declared_port=unannotated.port, annotations={},
                   service="market-data"),
        pod_target("opted-out-0", ip="127.0.0.1", declared_port=opted_out.port,
                   annotations={SCRAPE_ANNOTATION: "false", PORT_ANNOTATION: str(opted_out.port)},
                   service="backtest-runner"),
        pod_target("finished-0", ip="127.0.0.1", declared_port=9,
                   annotations=pod_scrape_annotations(finished.port), service="training-job", phase="Succeeded"),
    ]  # fmt: skip
    sd_file = tmp_path / "pods.json"
    sd_file.write_text(json.dumps(groups))

    cfg = ObservabilityConfig(scrape_interval_seconds=1)
    (job,) = annotation_scrape_configs(cfg, [NAMESPACE])
    assert job["job_name"] == JOB_NAME and job["kubernetes_sd_configs"][0]["role"] == "pod"
    del job["kubernetes_sd_configs"]
    job.update(file_sd_configs=[{"files": [str(sd_file)], "refresh_interval": "1s"}], scrape_timeout="1s")
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [job, emulated_operator_job(cfg, sd_file)]}
    prom = prometheus(config)

    # 4 scraped pods per job (the two-port pod folds into one target) and the two ranks of the
    # torchrun pod as two targets (its rendezvous port dropped), both jobs.
    targets = wait_for_targets(prom, expected_active=12)
    by_job: dict[str, dict[str, Any]] = {}
    rank_urls: dict[str, set[str]] = {}
    for target in targets["activeTargets"]:
        if target["labels"]["pod"] == "ranks-0":
            rank_urls.setdefault(target["labels"]["job"], set()).add(target["scrapeUrl"])
            assert set(target["labels"]) == {"instance", "job", "namespace", "pod", "service"}, target
            continue
        by_job.setdefault(target["labels"]["job"], {})[target["labels"]["pod"]] = target
    expected_rank_urls = {f"http://127.0.0.1:{server.port}/metrics" for server in ranks}
    assert rank_urls == {JOB_NAME: expected_rank_urls, f"monitoring/{POD_MONITOR_NAME}": expected_rank_urls}
    operator_job = f"monitoring/{POD_MONITOR_NAME}"
    assert set(by_job) == {JOB_NAME, operator_job}
    for job_name, pods in by_job.items():
        assert sorted(pods) == ["custom-0", "ipv6-0", "plain-0", "two-ports-0"], job_name
        assert pods["plain-0"]["scrapeUrl"] == f"http://127.0.0.1:{plain.port}/metrics"
        assert pods["custom-0"]["scrapeUrl"] == f"http://127.0.0.1:{custom.port}/internal/metrics"
        assert pods["two-ports-0"]["scrapeUrl"] == f"http://127.0.0.1:{two_ports.port}/metrics"
        assert pods["ipv6-0"]["scrapeUrl"] == f"http://[::1]:{ipv6.port}/metrics"
        for pod, target in pods.items():
            labels = target["labels"]
            assert labels["namespace"] == NAMESPACE and labels["pod"] == pod
            # exactly the documented target labels: no node, no container, no meta labels
            assert set(labels) == {"instance", "job", "namespace", "pod", "service"}, labels
        assert pods["custom-0"]["labels"]["service"] == "order-router"

    dropped = targets["droppedTargets"]
    dropped_pods = sorted(t["discoveredLabels"]["__meta_kubernetes_pod_name"] for t in dropped)
    assert dropped_pods == sorted(["unannotated-0", "opted-out-0", "finished-0", "ranks-0"] * 2)

    # The servers saw the scrapes: annotated path only; the rest never contacted.
    assert custom.requests and set(custom.requests) == {"/internal/metrics"}
    assert plain.requests and ipv6.requests and two_ports.requests
    assert unannotated.requests == [] and opted_out.requests == [] and finished.requests == []

    # And the samples are stored with the target labels, queryable by service.
    deadline = time.monotonic() + 15
    result: list[Any] = []
    while time.monotonic() < deadline and len(result) < 12:
        result = prom.api(f"/api/v1/query?query={GPU_METRIC}")["result"]
        time.sleep(0.2)
    assert len(result) == 12, result
    services = sorted({r["metric"]["service"] for r in result})
    assert services == ["api-gateway", "feature-store", "order-router", "risk-engine", "training-job"]
    assert all(r["value"][1] == "97" and r["metric"]["gpu_id"] == "0" for r in result)
    up = prom.api(f"/api/v1/query?query={UP}")["result"]
    assert len(up) == 12 and all(r["value"][1] == "1" for r in up)
    assert all(server.requests for server in ranks)


def test_a_critical_source_is_scraped_at_its_own_interval_and_timeout(
    tmp_path: Path, metrics_servers: Callable[..., Any], prometheus: Callable[..., Any]
) -> None:
    """The poller and the training pods carry the critical interval and timeout annotations: a real
    Prometheus scrapes them that often while the job's other pods keep the job's interval."""
    body = f'# TYPE {GPU_METRIC} gauge\n{GPU_METRIC}{{gpu_id="0"}} 97\n'
    fast, slow = metrics_servers("/metrics", body), metrics_servers("/metrics", body)
    cfg = ObservabilityConfig(scrape_interval_seconds=6, critical_scrape_interval_seconds=1)
    assert critical_scrape_annotations(cfg) == {INTERVAL_ANNOTATION: "1s", TIMEOUT_ANNOTATION: "1s"}
    groups = [
        pod_target("gpu-poller-0", ip="127.0.0.1", declared_port=1,
                   annotations=pod_scrape_annotations(fast.port, critical=cfg), service="gpu-poller"),
        pod_target("api-0", ip="127.0.0.1", declared_port=2, annotations=pod_scrape_annotations(slow.port),
                   service="api-gateway"),
    ]  # fmt: skip
    sd_file = tmp_path / "pods.json"
    sd_file.write_text(json.dumps(groups))
    (job,) = annotation_scrape_configs(cfg, [NAMESPACE])
    del job["kubernetes_sd_configs"]
    job.update(file_sd_configs=[{"files": [str(sd_file)], "refresh_interval": "1s"}])
    prom = prometheus(
        {"global": {"scrape_interval": "6s"}, "scrape_configs": [job, emulated_operator_job(cfg, sd_file)]}
    )
    targets = wait_for_targets(prom, expected_active=4)
    intervals = {
        (t["labels"]["job"], t["labels"]["pod"]): (t["scrapeInterval"], t["scrapeTimeout"])
        for t in targets["activeTargets"]
    }
    assert intervals == {
        (JOB_NAME, "gpu-poller-0"): ("1s", "1s"),
        (JOB_NAME, "api-0"): ("6s", "6s"),
        (f"monitoring/{POD_MONITOR_NAME}", "gpu-poller-0"): ("1s", "1s"),
        (f"monitoring/{POD_MONITOR_NAME}", "api-0"): ("6s", "6s"),
    }, intervals
    time.sleep(4)
    # both jobs scrape the fast pod every second; the slow one at most twice per job in that time
    assert len(fast.requests) >= 2 * 3 > len(slow.requests), (len(fast.requests), len(slow.requests))


def test_rendered_scrape_config_passes_promtool(tmp_path: Path) -> None:
    """promtool parses the rendered file (kubernetes_sd swapped for file_sd: Debian's build lacks it)."""
    document = yaml.safe_load(scrape_config_yaml(ObservabilityConfig(), ["a", "b"]))
    for job in document["scrape_configs"]:
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["a", "b"]}}]
        job.pop("kubernetes_sd_configs")
        job["file_sd_configs"] = [{"files": [str(tmp_path / "none.json")]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(document))
    proc = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_annotations_name_the_fields_the_relabelling_reads() -> None:
    annotations = pod_scrape_annotations(9094, "/metrics")
    assert annotations == {
        SCRAPE_ANNOTATION: "true",
        PORT_ANNOTATION: "9094",
        PATH_ANNOTATION: "/metrics",
        "prometheus.io/scheme": "http",
    }
    relabel_sources = {s for rule in annotation_scrape_configs(ObservabilityConfig(), ["x"])[0]["relabel_configs"]
                       for s in rule.get("source_labels", [])}  # fmt: skip
    for key in annotations:
        assert annotation_label(key) in relabel_sources, key


def operator_sharding_rules(shard: int, shards: int) -> list[dict[str, Any]]:
    """What the Prometheus Operator appends to every PodMonitor job when `spec.shards` is set
    (`$(SHARD)` is the shard's number in its pod): hash `__tmp_hash` if a relabeling set it, else
    the final `__address__`, and keep the shard's remainder unless sharding is disabled."""
    return [
        {"source_labels": ["__address__", "__tmp_hash"], "target_label": "__tmp_hash", "regex": "(.+);",
         "replacement": "$1", "action": "replace"},
        {"source_labels": ["__tmp_hash"], "target_label": "__tmp_hash", "modulus": shards, "action": "hashmod"},
        {"source_labels": ["__tmp_hash", "__tmp_disable_sharding"], "regex": f"{shard};|.+;.+", "action": "keep"},
    ]  # fmt: skip


def test_every_annotated_pod_is_scraped_by_exactly_one_shard_and_a_nodes_pods_by_the_same_in_both_modes(
    tmp_path: Path, prometheus: Callable[..., Any]
) -> None:
    """Three shards, each job as the stack renders it (annotations mode) or as the operator builds
    it from the PodMonitor with `spec.shards: 3` (operator mode), loaded side by side into one
    Prometheus under distinct job names: the discovered pods split into three disjoint sets that
    cover every annotated pod, the same way in both modes (both hash the pod's node name), and
    every pod of a node (its GPU poller, the training pods holding its GPUs) is on one shard."""
    shards, nodes = 3, 8
    pods = [
        pod_target(f"pod-{i}", ip=f"10.1.{i // 200}.{i % 200 + 1}", declared_port=8080,
                   annotations=pod_scrape_annotations(9400 + i % 3), service="gpu-poller", node=f"node-{i % nodes}")
        for i in range(24)
    ]  # fmt: skip
    # One pod with two declared container ports: one target, on one shard.
    for container, port in (("app", 1), ("sidecar", 2)):
        pods.append(pod_target("two-ports", ip="10.2.0.1", declared_port=port, container=container,
                               annotations=pod_scrape_annotations(9400), service="risk-engine", node="node-0"))  # fmt: skip
    pods.append(pod_target("unannotated", ip="10.2.0.2", declared_port=9400, annotations={}, service="x"))
    node_of = {t["labels"]["__meta_kubernetes_pod_name"]: t["labels"]["__meta_kubernetes_pod_node_name"] for t in pods}
    sd_file = tmp_path / "pods.json"
    sd_file.write_text(json.dumps(pods))
    cfg = ObservabilityConfig(scrape_interval_seconds=1, shards=shards)
    jobs = []
    for shard in range(shards):
        (job,) = annotation_scrape_configs(cfg, [NAMESPACE], shard)
        assert job["job_name"] == JOB_NAME  # the same job on every shard: `job` is as with one server
        del job["kubernetes_sd_configs"]
        job.update(job_name=f"annotations-{shard}", file_sd_configs=[{"files": [str(sd_file)]}], scrape_timeout="1s")
        jobs.append(job)
        operator = emulated_operator_job(cfg, sd_file)
        # the PodMonitor hands the operator the node name to hash, and never disables sharding
        assert operator["relabel_configs"][-1] == {
            "source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "__tmp_hash", "action": "replace"
        }  # fmt: skip
        assert not any("__tmp_disable_sharding" in r.get("source_labels", []) for r in operator["relabel_configs"])
        operator["job_name"] = f"operator-{shard}"
        operator["relabel_configs"] += operator_sharding_rules(shard, shards)
        jobs.append(operator)
    prom = prometheus({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs})

    expected = {f"pod-{i}" for i in range(24)} | {"two-ports"}
    deadline = time.monotonic() + 30
    by_job: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        by_job = {}
        for target in prom.api("/api/v1/targets?state=active")["activeTargets"]:
            by_job.setdefault(target["scrapePool"], []).append(target["discoveredLabels"]["__meta_kubernetes_pod_name"])
        if sum(len(v) for v in by_job.values()) == 2 * len(expected):
            break
        time.sleep(0.2)
    for mode in ("annotations", "operator"):
        assigned = [by_job.get(f"{mode}-{shard}", []) for shard in range(shards)]
        every = [pod for pods_of_shard in assigned for pod in pods_of_shard]
        assert sorted(every) == sorted(expected), (mode, by_job)  # each pod exactly once
        assert all(assigned), f"{mode}: a shard got no target out of {len(expected)}: {by_job}"
        shard_of_node: dict[str, int] = {}
        for shard, pods_of_shard in enumerate(assigned):
            for pod in pods_of_shard:
                assert shard_of_node.setdefault(node_of[pod], shard) == shard, f"{mode}: {node_of[pod]} is split"
    for shard in range(shards):
        assert sorted(by_job[f"annotations-{shard}"]) == sorted(by_job[f"operator-{shard}"])


def test_one_shard_adds_no_relabelling_and_each_shard_keeps_its_own_remainder() -> None:
    one = annotation_scrape_configs(ObservabilityConfig(), ["x"])[0]["relabel_configs"]
    assert not any(r["action"] == "hashmod" for r in one)
    for shard in range(4):
        rules = annotation_scrape_configs(ObservabilityConfig(shards=4), ["x"], shard)[0]["relabel_configs"]
        assert rules[:-3] == one
        assert rules[-3:] == [
            {
                "source_labels": ["__meta_kubernetes_pod_node_name"],
                "target_label": "__tmp_hash",
                "modulus": 4,
                "action": "hashmod",
            },
            {"source_labels": ["__tmp_hash"], "regex": str(shard), "action": "keep"},
            {"regex": "__tmp_hash", "action": "labeldrop"},
        ]
    # operator mode: the PodMonitor names the node as the shard key only when the stack has shards
    one_monitor = pod_monitor_spec(ObservabilityConfig(), ["x"])["podMetricsEndpoints"][0]["relabelings"]
    sharded = pod_monitor_spec(ObservabilityConfig(shards=4), ["x"])["podMetricsEndpoints"][0]["relabelings"]
    assert sharded == [*one_monitor, {"sourceLabels": [SHARD_KEY], "targetLabel": "__tmp_hash", "action": "replace"}]
