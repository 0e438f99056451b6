"""Sharded Prometheus on 127.0.0.1: scrape shards that remote-write to a global tier.

The topology of a sharded stack, with real Prometheus servers: every fleet target listens on its
own port (as every pod has its own address) and carries the node its pod runs on as Kubernetes
discovery names it, so `hashmod` on the node splits them between the shards exactly as the
rendered scrape configs do (`observability.scrape_config`); each shard
evaluates the shard tier of the rules (`rules-shard.yaml`) and remote-writes everything it has to
the global Prometheus, started with `--web.enable-remote-write-receiver`, which evaluates the
global tier (`rules-global.yaml`). Tempo's metrics generator remote-writes to the global tier in a
real stack; here the global Prometheus scrapes its stand-in target itself.

Optionally one unsharded reference Prometheus scrapes the whole fleet and evaluates both files:
it is what the sharded topology must answer like. Every server has the same external labels (so
Prometheus gives each target the same scrape phase on every server) and reads the rule files from
the same paths (so each group is evaluated at the same phase on every server).
"""

from __future__ import annotations

import dataclasses
import hashlib
import selectors
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from bench.fleet.live import NO_JOB, text_page_handler
from bench.fleet.phases import rules_directory
from dashboards import global_tier_series
from harness.prometheus import PrometheusServer
from observability.config import ObservabilityConfig, RemoteWrite
from observability.prometheus_config import REMOTE_WRITE_PATH, external_labels, write_relabel_configs
from observability.rules import Tier, tier_rules_yaml
from observability.scrape_config import shard_relabel_configs

Page = Callable[[int], bytes | None]  # None: 404

RULE_FILES = {Tier.SHARD: "rules-shard.yaml", Tier.GLOBAL: "rules-global.yaml"}
# How far apart a global group's evaluation and its shard namesake's are kept (remote write delivers
# within 50 ms here: REMOTE_WRITE_QUEUE).
PHASE_GAP_SECONDS = 0.5
# Send what a shard appended within 50 ms (the default waits up to 5 s for a full batch): the
# global tier then evaluates over data at most a fraction of a scrape interval old.
REMOTE_WRITE_QUEUE = {"batch_send_deadline": "50ms", "max_samples_per_send": 5000, "capacity": 20000}


class TargetServers:
    """One HTTP listener on 127.0.0.1 per target (`/metrics` answers `page(index)`), all served
    by one selector thread; a request is handled on its own thread."""

    def __init__(self, count: int, page: Page) -> None:
        servers: list[ThreadingHTTPServer] = []
        handler = text_page_handler(
            lambda server, path: page(getattr(server, "target_index", -1)) if path == "/metrics" else None
        )
        for index in range(count):
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            server.target_index = index  # type: ignore[attr-defined]
            servers.append(server)
        self.servers = servers
        self.ports = [int(s.server_address[1]) for s in servers]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            for server in self.servers:
                selector.register(server.socket, selectors.EVENT_READ, server)
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.2):
                    key.data.handle_request()

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def __enter__(self) -> TargetServers:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for server in self.servers:
            server.server_close()


def scrape_configs(
    servers: TargetServers,
    labels: Sequence[dict[str, str]],
    shard: int = 0,
    shards: int = 1,
    *,
    jobs: set[str],
    tempo_labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One scrape config per fleet job in `jobs` (the same on every server), each target with its own
    address and labels, keeping only the targets of `shard` (the rendered `hashmod` rules). Tempo's
    stand-in gets `tempo_labels` too: what Tempo's metrics generator adds to every series it
    remote-writes (its registry's `external_labels`)."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for index, target in enumerate(labels):
        job = target.get("job", NO_JOB)
        if job not in jobs:
            continue
        own = {k: v for k, v in target.items() if k != "job"}
        own.setdefault("instance", f"{NO_JOB}:{index}")
        if job == NO_JOB:
            own.update(tempo_labels or {})
        by_job.setdefault(job, []).append({"targets": [servers.address(index)], "labels": own})
    return [
        {
            "job_name": job,
            "honor_labels": True,
            "static_configs": groups,
            "relabel_configs": shard_relabel_configs(shard, shards),
        }
        for job, groups in sorted(by_job.items())
    ]


@dataclass
class Topology:
    shards: list[PrometheusServer]
    # One global Prometheus per remote-write mode the shards write in (each gets its own stream).
    global_tiers: dict[RemoteWrite, PrometheusServer]
    reference: PrometheusServer | None

    @property
    def global_tier(self) -> PrometheusServer:
        """The first global tier (the only one unless several modes were started)."""
        return next(iter(self.global_tiers.values()))

    @property
    def servers(self) -> list[PrometheusServer]:
        return [*self.shards, *self.global_tiers.values(), *([self.reference] if self.reference else [])]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def wait_scraping(self, targets: int, timeout: float = 60.0) -> None:
        """Wait until every server has tried each of its targets once: Prometheus applies target
        changes at most every 5 s, so a server just started may not scrape yet. Between them the
        shards and the global tier scrape `targets`, and so does the reference."""
        deadline = time.monotonic() + timeout
        while True:
            tried = [
                [t for t in s.api.get("/api/v1/targets", {"state": "active"})["activeTargets"]
                 if not str(t.get("lastScrape", "")).startswith("0001-")]
                for s in self.servers
            ]  # fmt: skip
            sharded = sum(len(t) for t in tried[: len(self.shards) + 1])  # each global tier scrapes Tempo's stand-in
            if sharded == targets and (self.reference is None or len(tried[-1]) == targets):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"targets tried per server after {timeout:.0f}s: {[len(t) for t in tried]}")
            time.sleep(0.5)


def _config(
    cfg: ObservabilityConfig,
    scrape: list[dict[str, Any]],
    rule_files: list[Path],
    remote_write: Mapping[RemoteWrite, str] | None = None,
    shard: int = 0,
) -> str:
    interval = f"{cfg.scrape_interval_seconds}s"
    document: dict[str, Any] = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": f"{cfg.evaluation_interval_seconds}s",
            "external_labels": external_labels(cfg),
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": scrape,
    }
    if remote_write:
        document["remote_write"] = []
        for mode, url in remote_write.items():
            moded = dataclasses.replace(cfg, remote_write=mode)
            relabel = write_relabel_configs(moded, str(shard), global_tier_series(moded))
            document["remote_write"].append(
                {"url": url, "name": mode.value, "queue_config": dict(REMOTE_WRITE_QUEUE),
                 "write_relabel_configs": relabel}
            )  # fmt: skip
    return yaml.safe_dump(document, sort_keys=False)


def start_topology(
    workdir: Path,
    cfg: ObservabilityConfig,
    servers: TargetServers,
    labels: Sequence[dict[str, str]],
    *,
    reference: bool,
    rules: dict[Tier, str] | None = None,
    extra_args: tuple[str, ...] = (),
    modes: Sequence[RemoteWrite] = (),
    sinks: Mapping[RemoteWrite, str] | None = None,
) -> Topology:
    """Start a global tier for each remote-write mode of `modes` (default: `cfg.remote_write`), then
    `cfg.shards` shards writing to each in its mode (and the reference if asked). The shards also
    write in each mode of `sinks` to its URL, a receiver that is not a Prometheus (no global tier)."""
    if not cfg.cluster:
        raise ValueError("the topology needs cfg.cluster: every server's external `cluster` label")
    texts = rules or tier_rules_yaml(cfg)
    both = set.intersection(*({str(g["name"]) for g in yaml.safe_load(t)["groups"]} for t in texts.values()))
    # Every global group evaluates well after its shard namesake, whose partials it combines (phases.py).
    rules_dir = rules_directory(
        workdir, (RULE_FILES[Tier.SHARD], RULE_FILES[Tier.GLOBAL]), sorted(both),
        cfg.evaluation_interval_seconds, PHASE_GAP_SECONDS,
    )  # fmt: skip
    paths = {}
    for tier, text in texts.items():
        paths[tier] = rules_dir / RULE_FILES[tier]
        paths[tier].write_text(text, encoding="utf-8")
    scraped = {t.get("job", NO_JOB) for t in labels} - {NO_JOB}
    unscraped = {NO_JOB}
    # Tempo remote-writes its span metrics with the stack's cluster among its external labels.
    tempo = external_labels(cfg)
    started: list[PrometheusServer] = []
    try:
        global_tiers = {}
        for mode in modes or (cfg.remote_write,):
            global_tiers[mode] = PrometheusServer(
                workdir / f"global-{mode.value}",
                _config(cfg, scrape_configs(servers, labels, jobs=unscraped, tempo_labels=tempo), [paths[Tier.GLOBAL]]),
                extra_args=("--web.enable-remote-write-receiver", *extra_args),
            ).start()
            started.append(global_tiers[mode])
        write_urls = {mode: server.url + REMOTE_WRITE_PATH for mode, server in global_tiers.items()}
        write_urls.update(sinks or {})
        shards = []
        for shard in range(cfg.shards):
            config = _config(
                cfg,
                scrape_configs(servers, labels, shard, cfg.shards, jobs=scraped),
                [paths[Tier.SHARD]],
                write_urls,
                shard,
            )
            shards.append(PrometheusServer(workdir / f"shard-{shard}", config, extra_args=extra_args).start())
            started.append(shards[-1])
        ref = None
        if reference:
            config = _config(
                cfg,
                scrape_configs(servers, labels, jobs=scraped | unscraped, tempo_labels=tempo),
                [paths[Tier.SHARD], paths[Tier.GLOBAL]],
            )
            ref = PrometheusServer(workdir / "reference", config, extra_args=extra_args).start()
            started.append(ref)
    except BaseException:
        for server in started:
            server.stop()
        raise
    return Topology(shards, global_tiers, ref)


def hashmod(value: str, modulus: int) -> int:
    """Prometheus' `hashmod` relabelling: the last 8 bytes of the MD5 of `value`, modulo `modulus`."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus
