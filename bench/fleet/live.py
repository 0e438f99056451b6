"""A live fleet: serve the synthetic fleet's `/metrics` pages so that Prometheus scrapes it.

Rule groups are timed the way Prometheus runs them in production: evaluated by its own rule
manager, on its own schedule, against the in-memory head block that the scrapes fill. (Backfilled
blocks are on-disk blocks, which no production rule evaluation reads; instant queries over HTTP
add the API's own cost.) Every target of `_fleet_data.all_series` becomes one scrape target: the
GPU pollers (one per node), the training jobs, the ML service and Tempo's metrics generator; the
series and values are the same as the backfill's, so both halves of the benchmark see one fleet.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.fleet.data import FleetShape, all_series, series_text
from bench.fleet.query_timing import GroupTiming, Timing
from bench.fleet.series import HistogramSpec, SeriesSpec, stable_key
from bench.fleet.values import Patterns, le_text
from foxhunt_trainer.contract import catalog
from harness.prometheus import PrometheusApi
from observability.config import ObservabilityConfig
from observability.promql import identifiers
from observability.rules import gpu, jobs, rule_groups
from observability.scrape_config import SHARD_KEY

TARGET_KEYS = ("job", "instance", "namespace", "pod", "service")
NO_JOB = "tempo-metrics-generator"  # Tempo remote-writes its series; here it is one more target
BASELINE_GROUP = "bench-baseline (not deployed)"
SEQUENCED_GROUP = "bench-gpu-alert-group-alone (not deployed)"


def baseline_group(cfg: ObservabilityConfig) -> dict[str, Any]:
    """The cheapest rules that read every GPU's (and every node's) series once: what any rule over
    the whole fleet costs at least on this machine, evaluated alongside the real groups."""
    gpu, node = catalog.GPU_UTILIZATION_PERCENT.name, catalog.GPU_POLLER_DEVICES.name
    return {
        "name": BASELINE_GROUP,
        "interval": f"{cfg.evaluation_interval_seconds}s",
        "rules": [
            {"record": f"bench:{gpu}:count", "expr": f"count({gpu})"},
            {"record": f"bench:{node}:count", "expr": f"count({node})"},
        ],
    }


def gpu_alert_inputs(cfg: ObservabilityConfig) -> list[str]:
    """The poller's series that the GPU alert group reads (through its recorded inputs or directly)."""
    poller = {s for m in catalog.by_producer(catalog.Producer.GPU_POLLER) for s in m.series_names}
    exprs = [r.expr for r in gpu.input_rules(cfg)] + [a.expr for a in gpu.gpu_alerts(cfg)]
    return sorted(poller & identifiers(" ".join(exprs)))


@dataclass(frozen=True)
class SequencedGroup:
    """Rule groups run one after another inside one bench-only group: every rule at the same
    evaluation timestamp, in order, in one goroutine, so no other group contends within an
    evaluation and each part's cost is the sum of its rules' times (`parts`: name, rule count)."""

    group: dict[str, Any]
    parts: tuple[tuple[str, int], ...]


def gpu_alert_group_alone(cfg: ObservabilityConfig) -> SequencedGroup:
    """The GPU alert group timed against its yardstick and its floor within each evaluation: the
    fleet read (`count()` of one GPU metric), then `count()` of each poller series the group reads
    (what it costs at least, whatever its design, as long as it reads its inputs at every
    evaluation: the critical alerts' detection promise needs that), then the per-job records the
    utilization alerts read, then the group itself."""
    yardstick = baseline_group(cfg)["rules"][:1]
    floor = [{"record": f"bench:{name}:count", "expr": f"count({name})"} for name in gpu_alert_inputs(cfg)]
    rules_of = {str(g["name"]): list(g["rules"]) for g in rule_groups(cfg)}
    job_rules, gpu_rules = rules_of[jobs.GROUP], rules_of[gpu.GROUP]
    return SequencedGroup(
        {
            "name": SEQUENCED_GROUP,
            "interval": f"{cfg.evaluation_interval_seconds}s",
            "rules": [*yardstick, *floor, *job_rules, *gpu_rules],
        },
        (
            ("fleet read", len(yardstick)),
            ("floor", len(floor)),
            (jobs.GROUP, len(job_rules)),
            (gpu.GROUP, len(gpu_rules)),
        ),
    )


def part_costs(sequenced: SequencedGroup, timing: GroupTiming) -> dict[str, float]:
    """Mean ms of each part of a sequenced group, from its rules' mean times (in order)."""
    costs, start = {}, 0
    for name, count in sequenced.parts:
        costs[name] = sum(ms for _, ms in timing.rule_ms[start : start + count])
        start += count
    return costs


def _sample_line(name: str, labels: Sequence[tuple[str, str]], extra: str = "") -> str:
    return series_text(name, labels, extra) + " "


@dataclass
class Target:
    # The target's own labels: job, instance, namespace, pod, service; and the node its pod runs on
    # as Kubernetes discovery names it (`__meta_kubernetes_pod_node_name`, what the shards hash).
    labels: dict[str, str]
    lines: list[tuple[str, list[str]]]  # (`name{labels} `, a value per sample index)


def targets(cfg: ObservabilityConfig, shape: FleetShape, patterns: Patterns) -> list[Target]:
    """Every series of the fleet, grouped into the scrape targets that expose them.

    Each target's pod runs on a node: a GPU poller on the node it reports, a training job on the
    node of the GPUs it holds (a container is only given GPUs of its own node), any other pod on a
    node picked by its name."""
    by_target: dict[tuple[tuple[str, str], ...], Target] = {}
    node_of: dict[tuple[tuple[str, str], ...], str] = {}
    node_of_gpu: dict[str, str] = {}
    held_by: dict[tuple[tuple[str, str], ...], str] = {}
    for spec in all_series(cfg, shape):
        own = tuple((k, v) for k, v in spec.labels if k in TARGET_KEYS)
        target = by_target.get(own)
        if target is None:
            target = by_target[own] = Target(dict(own), [])
        labels = dict(spec.labels)
        if "node" in labels:
            node_of[own] = labels["node"]
            if "uuid" in labels:
                node_of_gpu[labels["uuid"]] = labels["node"]
        elif "uuid" in labels:
            held_by[own] = labels["uuid"]
        if isinstance(spec, SeriesSpec):
            if spec.name == catalog.UP.name:
                continue  # Prometheus writes `up` itself
            target.lines.append((_sample_line(spec.name, spec.labels), patterns.values(spec.pattern, spec.key)))
            continue
        _add_histogram(target, spec, patterns)
    nodes = sorted(set(node_of.values()))
    for own, target in by_target.items():
        node = node_of.get(own) or node_of_gpu.get(held_by.get(own, ""))
        if node is None and nodes:
            node = nodes[stable_key(target.labels.get("pod", target.labels.get("instance", ""))) % len(nodes)]
        target.labels[SHARD_KEY] = node or ""
    return list(by_target.values())


def _add_histogram(target: Target, spec: HistogramSpec, patterns: Patterns) -> None:
    values = patterns.histogram(spec.pattern, spec.key, spec.metric.buckets)
    metric = spec.metric
    for le in (*metric.buckets, math.inf):
        text = le_text(le)
        target.lines.append((_sample_line(metric.bucket, spec.labels, f'le="{text}"'), values[text]))
    target.lines.append((_sample_line(metric.sum, spec.labels), values["sum"]))
    target.lines.append((_sample_line(metric.count, spec.labels), values["count"]))


def text_page_handler(page: Callable[[Any, str], bytes | None]) -> type[BaseHTTPRequestHandler]:
    """A quiet request handler serving `page(server, path)` as the 0.0.4 text format (404 for None)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page(self.server, self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the scraper gave up (its scrape timeout passed, or it was stopped)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


class FleetExporter:
    """One HTTP server on 127.0.0.1 serving `/t/<index>` for every target; the values advance one
    sample per scrape interval from the moment it starts (and hold at the last one)."""

    def __init__(self, fleet: list[Target], interval_seconds: int) -> None:
        self.targets = fleet
        self._interval = interval_seconds
        self._started = time.monotonic()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), text_page_handler(lambda server, path: self.page(path)))
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def page(self, path: str) -> bytes | None:
        prefix = "/t/"
        if not path.startswith(prefix) or not path[len(prefix) :].isdigit():
            return None
        index = int(path[len(prefix) :])
        if index >= len(self.targets):
            return None
        lines = self.targets[index].lines
        at = min(int((time.monotonic() - self._started) // self._interval), len(lines[0][1]) - 1) if lines else 0
        return "".join(f"{prefix_}{values[at]}\n" for prefix_, values in lines).encode()

    def scrape_configs(self) -> list[dict[str, Any]]:
        """One scrape config per job; a static target per fleet target, its labels as the target's."""
        by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for index, target in enumerate(self.targets):
            labels = {k: v for k, v in target.labels.items() if k != "job"}
            labels.setdefault("instance", f"{NO_JOB}:{index}")
            labels["__metrics_path__"] = f"/t/{index}"
            by_job[target.labels.get("job", NO_JOB)].append({"targets": [f"127.0.0.1:{self.port}"], "labels": labels})
        return [
            {"job_name": job, "honor_labels": True, "static_configs": groups} for job, groups in sorted(by_job.items())
        ]

    def wait_scraped(self, api: PrometheusApi, timeout: float) -> None:
        """Wait until Prometheus has scraped every target successfully."""
        deadline = time.monotonic() + timeout
        up = 0
        while time.monotonic() < deadline:
            answer = api.query(f"count({catalog.UP.name} == 1)")
            up = int(float(answer[0]["value"][1])) if answer else 0
            if up >= len(self.targets):
                return
            time.sleep(2)
        raise RuntimeError(f"only {up} of {len(self.targets)} fleet targets scraped after {timeout:.0f}s")

    def __enter__(self) -> FleetExporter:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class GroupEvaluations:
    rules: list[str]
    totals: list[float]
    per_rule: list[list[float]]
    alerts: int = 0  # active (pending or firing) alerts at the last evaluation
    alerts_by_rule: tuple[tuple[str, int], ...] = ()  # the same, per alerting rule
    health_errors: tuple[str, ...] = ()


def collect_group_evaluations(
    api: PrometheusApi,
    names: Sequence[str],
    evaluations: int,
    timeout: float,
    poll_seconds: float = 3.0,
    *,
    only_new: bool = False,
) -> dict[str, GroupEvaluations]:
    """Poll `/api/v1/rules` until each group in `names` has `evaluations` distinct evaluations
    recorded (or `timeout` passes: a group missing then is reported as never evaluated). With
    `only_new`, each group's evaluation already recorded when this is called is not counted."""
    seen: dict[str, set[str]] = defaultdict(set)
    if only_new:
        for group in api.get("/api/v1/rules")["groups"]:
            seen[str(group["name"])].add(str(group.get("lastEvaluation", "")))
    samples: dict[str, GroupEvaluations] = {}
    deadline = time.monotonic() + timeout
    while True:
        for group in api.get("/api/v1/rules")["groups"]:
            name = str(group["name"])
            stamp = str(group.get("lastEvaluation", ""))
            if stamp.startswith("0001-") or stamp in seen[name]:
                continue
            seen[name].add(stamp)
            rules = group["rules"]
            entry = samples.setdefault(name, GroupEvaluations([str(r["name"]) for r in rules], [], [[] for _ in rules]))
            entry.totals.append(float(group["evaluationTime"]))
            for i, rule in enumerate(rules):
                entry.per_rule[i].append(float(rule.get("evaluationTime", 0.0)))
            entry.alerts_by_rule = tuple(
                (str(rule["name"]), len(rule.get("alerts") or [])) for rule in rules if rule.get("type") == "alerting"
            )
            entry.alerts = sum(count for _, count in entry.alerts_by_rule)
            entry.health_errors = tuple(str(r.get("lastError", "")) for r in rules if r.get("health") == "err")
        if all(name in samples and len(samples[name].totals) >= evaluations for name in names):
            return samples
        if time.monotonic() > deadline:
            return samples
        time.sleep(poll_seconds)


def _series_out(api: PrometheusApi, entry: GroupEvaluations, group: dict[str, Any]) -> int:
    """Series a group writes: its recording rules' series now, plus its active alerts."""
    records = [str(r["record"]) for r in group["rules"] if "record" in r]
    written = 0
    for record in records:
        answer = api.query(f'count({{__name__="{record}"}})')
        written += int(float(answer[0]["value"][1])) if answer else 0
    return written + entry.alerts


def group_timings(
    api: PrometheusApi, samples: dict[str, GroupEvaluations], groups: Sequence[dict[str, Any]]
) -> list[GroupTiming]:
    """Median and p95 of each group's recorded evaluations, in the order of `groups`."""
    out = []
    for group in groups:
        name = str(group["name"])
        entry = samples.get(name)
        if entry is None or not entry.totals:
            out.append(GroupTiming(name, 0, Timing.failed("never evaluated"), "", math.nan))
            continue
        if entry.health_errors:
            out.append(GroupTiming(name, len(entry.rules), Timing.failed(entry.health_errors[0]), "", math.nan))
            continue
        means = [statistics.fmean(r) for r in entry.per_rule]
        slowest = max(range(len(means)), key=lambda i: means[i])
        out.append(
            GroupTiming(
                name=name,
                rules=len(entry.rules),
                total=Timing.of(entry.totals, _series_out(api, entry, group)),
                slowest_rule=entry.rules[slowest],
                slowest_rule_ms=means[slowest] * 1000,
                rule_ms=tuple((rule, mean * 1000) for rule, mean in zip(entry.rules, means, strict=True)),
                alerts_by_rule=entry.alerts_by_rule,
            )
        )
    return out
