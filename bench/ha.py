"""`python -m bench ha`: what is lost when a Prometheus or an Alertmanager dies mid-incident.

The topology of a replicated, sharded stack on 127.0.0.1 with real servers: a steady synthetic
fleet (`bench.fleet.steady`), 2 scrape shards x 2 Prometheus replicas (each replica with its own
`prometheus_replica` external label, dropping it from its alerts, sending to every Alertmanager
peer, remote-writing to the global tier), one global tier (it deduplicates the replicas' copies:
`rules-global.yaml` as a replicated stack renders it), a 3-peer Alertmanager cluster whose page
route reaches a PagerDuty stand-in, and an unsharded single Prometheus over the same fleet, the
reference every global-tier dashboard query must equal.

Four incidents, each a critical GPU alert (GPUMemoryExhausted, raised by filling a GPU's memory)
paged while a fault lasts, then resolved:
1. SIGKILL one replica of each shard (later restarted: its WAL replayed);
2. SIGKILL one Alertmanager peer (left dead);
3. stop the global tier for `outage` seconds and start it again;
4. restart a shard replica (SIGTERM, then start on its data: WAL replay).

Measured: the PagerDuty events per incident (one trigger, one resolve; duplicates), the longest
gap of every global-tier record outside the global tier's outage, the partials of the outage window
present after it (remote write caught up: samples missing) and the catch-up time, the shards'
remote-write counters (failed samples: lost for good; retried), and the dashboard queries of the
global tier that differ from the reference's before and after the faults.

`run(workdir, outage_seconds)` returns the figures (the slow test runs it with a short outage);
`main()` runs the full 3-minute outage and prints them as JSON.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench._alertmanager import AlertmanagerPeer
from bench.fleet.data import FleetShape
from bench.fleet.live import NO_JOB, Target, targets
from bench.fleet.phases import rules_directory
from bench.fleet.query_timing import first_label_values
from bench.fleet.sharded_topology import REMOTE_WRITE_QUEUE, TargetServers, scrape_configs
from bench.fleet.steady import SteadyFleet
from bench.fleet.values import GPU_MEMORY_BYTES, Patterns
from dashboards import build_all
from dashboards.queries import panel_queries
from foxhunt_trainer.contract import catalog
from harness.prometheus import PrometheusApi, PrometheusServer
from harness.webhook_sink import WebhookSink
from observability import alertmanager as am
from observability.config import Notifications, ObservabilityConfig
from observability.notifications import TEMPLATE_FILE, template_text
from observability.partials import is_partial
from observability.prometheus_config import REMOTE_WRITE_PATH, alerting_section, external_labels, write_relabel_configs
from observability.promql.syntax import selector_uses
from observability.rules import Tier, tier_rule_groups, tier_rules_yaml

INTERVAL = 3  # scrape and evaluation, every group (the critical ones too)
REPLICAS = 2
PEERS = 3
CFG = ObservabilityConfig(
    scrape_interval_seconds=INTERVAL,
    evaluation_interval_seconds=INTERVAL,
    critical_scrape_interval_seconds=INTERVAL,
    critical_evaluation_interval_seconds=INTERVAL,
    shards=2,
    prometheus_replicas=REPLICAS,
    alertmanager_replicas=PEERS,
    cluster="ha",
    clusters=("ha",),
    notifications=Notifications(critical="pagerduty"),
)
SHAPE = FleetShape(nodes=8, gpus_per_node=2, training_jobs=4, interval_seconds=INTERVAL)
INCIDENT_ALERT = "GPUMemoryExhausted"
# Each sample's timestamp is this far past the grid point a scrape falls on: more than half an
# interval, so every server (whatever its scrape phase) has stored a sample before its timestamp
# and a rule evaluated at T reads the same samples on every server.
AHEAD_SECONDS = 0.7 * INTERVAL
PHASE_GAP_SECONDS = 0.5
WARMUP_SECONDS = 12 * INTERVAL  # every dashboard rate window (4 scrapes) holds samples
HOLD_SECONDS = 10  # how long each fault lasts with the incident open before it is resolved
PAGE_TIMEOUT_SECONDS = 120
ROUTING_KEY = "R0UTINGKEY0123456789abcdefghijkl"
OUTAGE_SECONDS = 180
REL_TOLERANCE = 1e-9
# Values each Prometheus measures itself: only the series they answer with are compared.
SERVER_MEASURED = (catalog.SCRAPE_DURATION_SECONDS.name, catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name)
# Records that add up a record's own history (GPU-hours and cost so far: from the time the server
# first recorded the job, latched): each server latches that time at its own evaluation, so the
# global tier and the reference may differ by an evaluation's growth of the record (more than a
# tenth of it for a job first seen a few evaluations before the comparison). Compared within
# ACCUMULATED_EVALUATIONS evaluations' growth, read on the reference: a copy counted twice is still
# caught once a job is older than that.
ACCUMULATED = ("gpu_hours", "cost")
ACCUMULATED_EVALUATIONS = 2


class EventSink(WebhookSink):
    """Records every POST with its arrival time; answers PagerDuty's Events API 202."""

    def __init__(self) -> None:
        super().__init__(b'{"status":"success","message":"Event processed"}', {"/pagerduty": 202})

    def pages(self) -> list[tuple[str, str, float]]:
        """(event_action, alert names of the event, time) of every PagerDuty event."""
        with self.lock:
            posts = list(zip(self.posts, self.arrivals, strict=True))
        out = []
        for (path, body), at in posts:
            if path.startswith("/pagerduty") and isinstance(body, dict):
                details = body.get("payload", {}).get("custom_details", {})
                out.append((str(body.get("event_action")), json.dumps(details, sort_keys=True), at))
        return out


# A peer notifies after those before it in the cluster's order had `--cluster.peer-timeout` each
# to do it (5 s here). Its notification carries the group's state from when it started waiting:
# a group interval shorter than that wait lets the last peer resend the state before a change
# (seen: a resolved incident paged again 2 s later with 1 s). The rendered page route's 60 s is
# above the default 15 s x 2 peers; here 15 s is above 5 s x 2.
GROUP_INTERVAL = "15s"
GOSSIP_SETTLE_SECONDS = 2.0  # and at least this long after the page


def _fast(route: dict[str, Any]) -> None:
    route["group_wait"], route["group_interval"] = "2s", GROUP_INTERVAL
    for child in route.get("routes", []):
        _fast(child)


@dataclass
class Incident:
    fault: str
    raised: float = 0.0
    resolved: float = 0.0
    triggers: int = 0
    resolves: int = 0
    paged_after_seconds: float = math.nan
    resolve_after_seconds: float = math.nan


@dataclass
class Figures:
    outage_seconds: float
    incidents: list[Incident] = field(default_factory=list)
    other_pages: int = 0
    duplicate_notifications: int = 0
    longest_record_gap_seconds: float = 0.0
    longest_record_gap_series: str = ""
    records_checked: int = 0
    outage_partial_series: int = 0
    outage_samples_missing: int = 0
    outage_longest_partial_gap_seconds: float = 0.0
    catch_up_seconds: float = math.nan
    remote_write_failed: float = 0.0
    remote_write_retried: float = 0.0
    queries_compared: tuple[int, int] = (0, 0)
    queries_answered: tuple[int, int] = (0, 0)
    # Queries reading the global tier's records over a window reaching into its outage.
    queries_left_out_after: int = 0
    mismatches_before: list[str] = field(default_factory=list)
    mismatches_after: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class HaTopology:
    """Every server of the module doc, started by `start()`, stopped by `stop()` (by PID)."""

    def __init__(self, workdir: Path, fleet: list[Target], servers: TargetServers, sink: EventSink) -> None:
        self.workdir = workdir
        self.fleet = fleet
        self.labels = [t.labels for t in fleet]
        self.target_servers = servers
        self.sink = sink
        self.peers = [
            AlertmanagerPeer(workdir / f"alertmanager-{i}", workdir / "alertmanager.yml") for i in range(PEERS)
        ]
        self.cfg = dataclasses.replace(CFG, alertmanager_peers=tuple(p.address for p in self.peers))
        texts = tier_rules_yaml(self.cfg)
        both = set.intersection(*({str(g["name"]) for g in yaml.safe_load(t)["groups"]} for t in texts.values()))
        rules_dir = rules_directory(
            workdir, ("rules-shard.yaml", "rules-global.yaml"), sorted(both), INTERVAL, PHASE_GAP_SECONDS
        )
        self.rule_paths = {tier: rules_dir / f"rules-{tier.value}.yaml" for tier in texts}
        for tier, text in texts.items():
            self.rule_paths[tier].write_text(text, encoding="utf-8")
        self.scraped = {t.get("job", NO_JOB) for t in self.labels} - {NO_JOB}
        tempo = external_labels(self.cfg)
        self.global_tier = PrometheusServer(
            workdir / "global",
            self._config(scrape_configs(servers, self.labels, jobs={NO_JOB}, tempo_labels=tempo),
                         [self.rule_paths[Tier.GLOBAL]], alerting=True),
            extra_args=("--web.enable-remote-write-receiver",),
        )  # fmt: skip
        write = self.global_tier.url + REMOTE_WRITE_PATH
        self.shards = [
            [
                PrometheusServer(
                    workdir / f"shard-{shard}-replica-{replica}",
                    self._config(
                        scrape_configs(servers, self.labels, shard, self.cfg.shards, jobs=self.scraped),
                        [self.rule_paths[Tier.SHARD]],
                        replica=replica,
                        alerting=True,
                        remote_write=(write, shard),
                    ),
                )
                for replica in range(REPLICAS)
            ]
            for shard in range(self.cfg.shards)
        ]
        # The reference scrapes as replica 0 does (the same external labels: the same scrape phase).
        self.reference = PrometheusServer(
            workdir / "reference",
            self._config(scrape_configs(servers, self.labels, jobs=self.scraped | {NO_JOB}, tempo_labels=tempo),
                         [self.rule_paths[Tier.SHARD], self.rule_paths[Tier.GLOBAL]], replica=0),
        )  # fmt: skip

    def _config(
        self,
        scrape: list[dict[str, Any]],
        rules: list[Path],
        *,
        replica: int | None = None,
        alerting: bool = False,
        remote_write: tuple[str, int] | None = None,
    ) -> str:
        document: dict[str, Any] = {
            "global": {
                "scrape_interval": f"{INTERVAL}s",
                "scrape_timeout": f"{INTERVAL}s",
                "evaluation_interval": f"{INTERVAL}s",
                "external_labels": external_labels(self.cfg, replica),
            },
            "rule_files": [str(p) for p in rules],
        }
        if alerting:
            document["alerting"] = alerting_section(self.cfg)
        document["scrape_configs"] = scrape
        if remote_write is not None:
            url, shard = remote_write
            document["remote_write"] = [
                {"url": url, "name": "global", "queue_config": {**REMOTE_WRITE_QUEUE, "max_backoff": "1s"},
                 "write_relabel_configs": write_relabel_configs(self.cfg, str(shard), ())}
            ]  # fmt: skip
        return yaml.safe_dump(document, sort_keys=False)

    @property
    def prometheus_servers(self) -> list[PrometheusServer]:
        return [*(s for pair in self.shards for s in pair), self.global_tier, self.reference]

    def start(self) -> None:
        config = am.alertmanager_config(
            self.cfg,
            am.ReceiverUrls(
                page=f"{self.sink.url}/page",
                chat=f"{self.sink.url}/chat",
                low_priority=f"{self.sink.url}/low",
                heartbeat=f"{self.sink.url}/heartbeat",
                pagerduty_routing_key=ROUTING_KEY,
                pagerduty_url=f"{self.sink.url}/pagerduty",
            ),
        )
        _fast(config["route"])
        (self.workdir / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False, width=10_000))
        (self.workdir / TEMPLATE_FILE).write_text(template_text())
        for i, peer in enumerate(self.peers):
            peer.start([p.cluster_address for j, p in enumerate(self.peers) if j != i])
        deadline = time.monotonic() + 60
        while any(p.cluster_size() != PEERS for p in self.peers):
            if time.monotonic() > deadline:
                raise RuntimeError("the Alertmanager peers did not form one cluster")
            time.sleep(0.5)
        for server in self.prometheus_servers:
            server.start()

    def stop(self) -> None:
        for server in self.prometheus_servers:
            server.stop()
        for peer in self.peers:
            peer.stop()

    def wait_scraping(self, timeout: float = 90.0) -> None:
        scraped = {t.get("pod") for t in self.labels if t.get("job", NO_JOB) != NO_JOB}
        deadline = time.monotonic() + timeout
        while True:
            tried = sum(
                1
                for pair in self.shards
                for t in pair[0].api.get("/api/v1/targets", {"state": "active"})["activeTargets"]
                if not str(t.get("lastScrape", "")).startswith("0001-")
            )
            if tried >= len(scraped):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tried} of {len(scraped)} targets scraped after {timeout:.0f}s")
            time.sleep(0.5)


def _answers(api: PrometheusApi, expr: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for series in api.query(expr, at):
        labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "cluster"))
        out[labels] = float(series["value"][1])
    return out


def _same(a: float, b: float, allowed: float = 0.0) -> bool:
    """Equal within REL_TOLERANCE, or within `allowed` (an absolute difference)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=max(allowed, 1e-9))


def compare_dashboards(
    cfg: ObservabilityConfig,
    reference: PrometheusApi,
    global_api: PrometheusApi,
    at: float,
    excluded: Callable[[str], bool] = lambda expr: False,
) -> tuple[int, int, list[str], int]:
    """Every Prometheus query of every dashboard on both servers at `at`: (compared, answered by
    the reference, the queries whose answers differ, queries left out by `excluded`)."""
    compared, answered, mismatches, left_out = 0, 0, [], 0
    for dashboard in build_all(cfg).values():
        chosen = first_label_values(dashboard, reference)
        for query in panel_queries(dashboard):
            if query.datasource_type != "prometheus":
                continue
            expr = dataclasses.replace(query, variables={**query.variables, **chosen}).substituted
            if excluded(expr):
                left_out += 1
                continue
            want, got = _answers(reference, expr, at), _answers(global_api, expr, at)
            compared += 1
            answered += bool(want)
            measured = any(name in expr for name in SERVER_MEASURED)
            allowed: dict[tuple[tuple[str, str], ...], float] = {}
            if any(part in expr for part in ACCUMULATED):
                earlier = _answers(reference, expr, at - cfg.evaluation_interval_seconds)
                allowed = {k: ACCUMULATED_EVALUATIONS * abs(v - earlier.get(k, v)) for k, v in want.items()}
            if want.keys() != got.keys() or (
                not measured and not all(_same(want[k], got[k], allowed.get(k, 0.0)) for k in want)
            ):
                shown = (dict(list(want.items())[:3]), dict(list(got.items())[:3]))
                mismatches.append(f"{query.dashboard_uid}/{query.panel_title}: {expr[:300]}\n  one server: {shown[0]}"
                                  f"\n  global: {shown[1]}")  # fmt: skip
    return compared, answered, mismatches, left_out


def reads_the_outage(global_rules: dict[str, str], since_seconds: float) -> Callable[[str], bool]:
    """Whether a query reads what the global tier computed itself over a window reaching back into
    its outage: its records or alerts over such a window, or a record of it computed from those
    (no rule is evaluated while its server is down, and rules do not backfill)."""

    def direct(expr: str) -> bool:
        return any(
            (use.name in global_rules or use.name.startswith("ALERTS"))
            and use.range is not None
            and use.range.total_seconds() >= since_seconds
            for use in selector_uses(expr)
        )

    tainted = {name for name, expr in global_rules.items() if direct(expr)}
    while True:
        more = {
            name
            for name, expr in global_rules.items()
            if name not in tainted and any(use.name in tainted for use in selector_uses(expr))
        }
        if not more:
            break
        tainted |= more

    def reads(expr: str) -> bool:
        return direct(expr) or any(use.name in tainted for use in selector_uses(expr))

    return reads


def _metric(url: str, name: str, having: str = "") -> float:
    """The sum of a metric's samples on a server's own /metrics at `url`, those whose labels hold
    `having` (0 when it has none)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{") and having in line
    )


def _gossip_updates(peer: AlertmanagerPeer) -> float:
    """Gossip updates an Alertmanager peer has received (notification log entries and silences)."""
    return _metric(peer.url, "alertmanager_cluster_messages_received_total", 'msg_type="update"')


def _wait(what: str, condition: Callable[[], bool], timeout: float) -> float:
    """Seconds until `condition()` holds; raises after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.25)
    return time.monotonic() - start


def _gaps(
    api: PrometheusApi, names: list[str], start: float, end: float, skip: tuple[float, float]
) -> Iterator[tuple[float, str]]:
    """(longest gap between two samples, series) of each series of `names` between start and end,
    gaps overlapping `skip` left out; a series that starts late or ends early counts from there."""
    window = math.ceil(end - start)
    for name in names:
        for series in api.query(f"{name}[{window}s]", end):
            stamps = [float(t) for t, _ in series["values"]]
            longest = 0.0
            for a, b in itertools.pairwise(stamps):
                if b >= skip[0] and a <= skip[1]:
                    continue
                longest = max(longest, b - a)
            yield longest, f"{name}{series['metric']}"


@contextmanager
def running(workdir: Path) -> Iterator[tuple[HaTopology, SteadyFleet, int]]:
    fleet = targets(CFG, SHAPE, Patterns(1, INTERVAL, int(time.time())))
    # Counters hold still too: the replicas scrape each target at their own phase (their external
    # labels differ), so near a rounding edge one stores a grid point the other skips; with values
    # that do not move, every copy reads the same. (That rates and counters combine once per shard
    # is proven with moving counters by promtool: tests/rules/test_replicas.py.)
    steady = SteadyFleet(fleet, INTERVAL, AHEAD_SECONDS, ramp=math.inf)
    poller = next(i for i, t in enumerate(fleet) if t.labels.get("service") == CFG.gpu_poller_service)
    sink = EventSink()
    try:
        with TargetServers(len(fleet), steady.page) as servers:
            topology = HaTopology(workdir, fleet, servers, sink)
            try:
                topology.start()
                topology.wait_scraping()
                steady.open()
                time.sleep(WARMUP_SECONDS)
                yield topology, steady, poller
            finally:
                topology.stop()
    finally:
        sink.stop()


def run(workdir: Path, outage_seconds: float = OUTAGE_SECONDS, log: Callable[[str], None] = print) -> Figures:
    figures = Figures(outage_seconds)
    with running(workdir) as (topology, steady, poller):
        cfg, sink = topology.cfg, topology.sink
        began = time.time()
        at = time.time() - 2 * INTERVAL
        compared, answered, figures.mismatches_before, _ = compare_dashboards(
            cfg, topology.reference.api, topology.global_tier.api, at
        )
        log(f"before the faults: {len(figures.mismatches_before)} of {compared} dashboard queries differ")
        for line in figures.mismatches_before[:10]:
            log(f"  {line}")
        used = catalog.GPU_MEMORY_USED_BYTES.name
        outage: tuple[float, float] = (math.inf, math.inf)

        def incident(fault: str, act: Callable[[], None]) -> Incident:
            record = Incident(fault)
            before = len(sink.pages())
            steady.set_first(poller, used, 0.97 * GPU_MEMORY_BYTES)
            record.raised = time.time()
            record.paged_after_seconds = _wait(
                f"{fault}: the page", lambda: any(a == "trigger" for a, _, _ in sink.pages()[before:]),
                PAGE_TIMEOUT_SECONDS,
            )  # fmt: skip
            act()
            time.sleep(HOLD_SECONDS)
            steady.set_first(poller, used, 0.5 * GPU_MEMORY_BYTES)
            record.resolved = time.time()
            record.resolve_after_seconds = _wait(
                f"{fault}: the resolve", lambda: any(a == "resolve" for a, _, _ in sink.pages()[before:]),
                PAGE_TIMEOUT_SECONDS,
            )  # fmt: skip
            time.sleep(20)  # anything sent twice arrives by then (a group interval, peer timeout 5 s)
            events = sink.pages()[before:]
            record.triggers = sum(a == "trigger" for a, _, _ in events)
            record.resolves = sum(a == "resolve" for a, _, _ in events)
            log(f"{fault}: paged after {record.paged_after_seconds:.1f}s, {record.triggers} trigger(s), "
                f"{record.resolves} resolve(s)")  # fmt: skip
            if (record.triggers, record.resolves) != (1, 1):
                for action, details, at in events:
                    log(f"  {action} at +{at - record.raised:.1f}s: {details[:600]}")
            return record

        killed = [pair[1] for pair in topology.shards]

        def kill_replicas() -> None:
            for server in killed:
                server.kill()

        figures.incidents.append(incident("SIGKILL one replica of each shard", kill_replicas))
        for server in killed:
            server.start()  # its WAL replayed

        survivors = topology.peers[1:]
        # Taken with no incident open (the previous one's notifications long gossiped): what each
        # peer that stays up had received before this incident's page.
        updates_before = [_gossip_updates(peer) for peer in survivors]

        def kill_peer() -> None:
            # After the notifying peer's notification log has reached the others (gossiped every
            # 200 ms, later on a loaded machine): a peer killed before that leaves the next peer to
            # notify again after its peer timeout (seen: a second trigger 5 s later, and with a
            # fixed 2 s wait under load), Alertmanager's at-least-once delivery.
            _wait(
                "the page's notification log entry gossiped to the other peers",
                lambda: all(_gossip_updates(p) > n for p, n in zip(survivors, updates_before, strict=True)),
                PAGE_TIMEOUT_SECONDS,
            )
            time.sleep(GOSSIP_SETTLE_SECONDS)
            topology.peers[0].kill()

        figures.incidents.append(incident("SIGKILL one Alertmanager peer", kill_peer))

        def global_outage() -> None:
            nonlocal outage
            writing = _fresh_heartbeats(topology.global_tier.api)
            topology.global_tier.stop()
            stopped = time.time()
            time.sleep(outage_seconds)
            topology.global_tier.start()
            outage = (stopped, time.time())
            figures.catch_up_seconds = _catch_up(topology, writing, outage)
            log(f"global tier down {outage[1] - outage[0]:.0f}s; remote write caught up "
                f"{figures.catch_up_seconds:.1f}s after its restart")  # fmt: skip

        figures.incidents.append(incident("stop the global tier and restart it", global_outage))
        replica = topology.shards[0][0]

        def restart() -> None:
            replica.stop()
            replica.start()

        figures.incidents.append(incident("restart a shard replica (WAL replay)", restart))
        time.sleep(4 * INTERVAL)
        end = time.time()
        at = end - 2 * INTERVAL
        global_rules = {str(r["record"]): str(r["expr"]) for g in tier_rule_groups(cfg)[Tier.GLOBAL]
                        for r in g["rules"] if "record" in r}  # fmt: skip
        records = frozenset(global_rules)
        after = compare_dashboards(
            cfg, topology.reference.api, topology.global_tier.api, at, reads_the_outage(global_rules, at - outage[0])
        )
        figures.queries_left_out_after = after[3]
        figures.queries_compared = (compared, after[0])
        figures.queries_answered = (answered, after[1])
        figures.mismatches_after = after[2]
        log(f"after the faults: {len(after[2])} of {after[0]} dashboard queries differ")
        for line in after[2][:15]:
            log(f"  {line}")
        pages = sink.pages()
        expected = {INCIDENT_ALERT}
        figures.other_pages = sum(1 for _, details, _ in pages if not any(n in details for n in expected))
        figures.duplicate_notifications = sum(
            max(0, i.triggers - 1) + max(0, i.resolves - 1) for i in figures.incidents
        )
        skip = (outage[0] - INTERVAL, outage[1] + 3 * INTERVAL)
        gaps = list(_gaps(topology.global_tier.api, sorted(records), began + 2 * INTERVAL, at, skip))
        figures.records_checked = len(gaps)
        if gaps:
            figures.longest_record_gap_seconds, figures.longest_record_gap_series = max(gaps)
        partials = sorted({str(r["record"]) for g in tier_rule_groups(cfg)[Tier.SHARD] for r in g["rules"]
                           if is_partial(str(r.get("record", "")))})  # fmt: skip
        window = (outage[0] + INTERVAL, outage[1] - INTERVAL)
        missing, longest, series_count = _outage_partials(topology.global_tier.api, partials, window)
        figures.outage_partial_series, figures.outage_samples_missing = series_count, missing
        figures.outage_longest_partial_gap_seconds = longest
        live = [s for pair in topology.shards for s in pair]
        figures.remote_write_failed = sum(
            _metric(s.url, "prometheus_remote_storage_samples_failed_total") for s in live
        )
        figures.remote_write_retried = sum(
            _metric(s.url, "prometheus_remote_storage_samples_retried_total") for s in live
        )
    return figures


HEARTBEAT = "shard:up:timestamp_max"


def _fresh_heartbeats(api: PrometheusApi) -> int:
    """How many shard replicas' latest heartbeat the global tier holds fresh (two evaluations)."""
    fresh = api.query(f"count(time() - timestamp({HEARTBEAT}) < {2 * INTERVAL})")
    return int(float(fresh[0]["value"][1])) if fresh else 0


def _catch_up(topology: HaTopology, writing: int, outage: tuple[float, float]) -> float:
    """Seconds from the global tier's restart until the latest heartbeat of every shard replica
    that wrote before the outage is there (its remote write has sent what waited in its WAL)."""
    api = topology.global_tier.api
    return time.time() - outage[1] + _wait("remote write catching up", lambda: _fresh_heartbeats(api) >= writing, 600)


def _outage_partials(api: PrometheusApi, partials: list[str], window: tuple[float, float]) -> tuple[int, float, int]:
    """(samples missing, longest gap, series) of the partials the shards recorded during the
    global tier's outage, as the global tier holds them afterwards: one sample per evaluation."""
    start, end = window
    span = math.ceil(end - start)
    missing, longest, count = 0, 0.0, 0
    for name in partials:
        for series in api.query(f"{name}[{span}s]", end):
            stamps = [float(t) for t, _ in series["values"]]
            count += 1
            expected = int(span / INTERVAL)
            missing += max(0, expected - len(stamps))
            edges = [start, *stamps, end]
            longest = max(longest, max(b - a for a, b in itertools.pairwise(edges)))
    return missing, longest, count


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        figures = run(Path(tmp), OUTAGE_SECONDS)
    print(json.dumps(figures.as_dict(), indent=2, default=str))
