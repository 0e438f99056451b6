"""Firing and silent cases of the alerts that watch Prometheus replicas and remote write (default
config: scrape and evaluation every 15 s, so sample i of a series is at 15*i seconds).

A shard replica's heartbeat (`shard:up:timestamp_max`, its latest scrape) reaches the global tier
with its `shard` and its replica label; its value is the time it was recorded, so a replica that
writes until 150 s and stops leaves 150 as its last value. The silence threshold (60 s) and the
2-minute `for` are spelled out here on purpose, so a changed value in the rules fails these cases.
"""

from __future__ import annotations

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.prometheus_config import PROMETHEUS_REPLICAS_JOB
from observability.rules import health
from observability.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tests.rules.promtool_harness import Case, Check, Firing, RecordCase, counter, join, series, values

REPLICA_LABEL = ObservabilityConfig().replica_label
SHARD = {"shard": "0"}
PROMETHEUS = {"job": "prometheus", "instance": "shard-0-a:9090"}
QUEUE = {**PROMETHEUS, "remote_name": "global", "url": "http://global:9090/api/v1/write"}
QUEUE_LABELS = {k: QUEUE[k] for k in ("instance", "remote_name", "url")}
SAMPLES = 60  # 15 minutes of samples


def _t(seconds: int) -> str:
    return f"{seconds}s"


def silent(*times: int) -> tuple[Check, ...]:
    return tuple(Check(_t(x)) for x in times)


def fires(at: int, *firing: Firing) -> Check:
    return Check(_t(at), tuple(firing))


def _heartbeat(replica: str, until: int | None = None, back_at: int | None = None, shard: str = "0") -> dict[str, str]:
    """A replica writing its heartbeat every 15 s (its value: the time), until `until` (the last
    sample's time), and again from `back_at`."""
    points: list[float | None] = []
    for i in range(SAMPLES):
        at = 15 * i
        writing = until is None or at <= until or (back_at is not None and at >= back_at)
        points.append(at if writing else None)
    labels = {"shard": shard, REPLICA_LABEL: replica}
    return {series(health.REPLICA_HEARTBEAT, labels): join(points)}


def _first_evaluation_after(seconds: int) -> int:
    return 15 * (seconds // 15) + 15


def replica_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    silence = int(th.prometheus_replica_silent_seconds.value)
    # The last heartbeat at 150 s is older than the threshold from the first evaluation past
    # 150 + silence (the comparison is strict); firing 2 minutes later.
    pending = _first_evaluation_after(150 + silence)
    firing = pending + 120
    return (
        Case(
            "PrometheusReplicaDown",
            "one of two replicas silent past the threshold for 2m fires for its shard, the other still writing",
            {**_heartbeat("replica-0"), **_heartbeat("replica-1", until=150)},
            (*silent(150, firing - 15), fires(firing, Firing(SHARD, 1)), fires(firing + 150, Firing(SHARD, 1))),
        ),
        Case(
            "PrometheusReplicaDown",
            "a replica restarting within the 2m stays silent, as do two writing replicas of another shard",
            {
                **_heartbeat("replica-0"),
                **_heartbeat("replica-1", until=150, back_at=pending + 90),
                **_heartbeat("replica-0", shard="1"),
                **_heartbeat("replica-1", shard="1"),
            },
            silent(pending, firing - 15, firing, firing + 150),
        ),
        Case(
            "PrometheusReplicaDown",
            "both replicas silent is not this alert (PrometheusShardDown is)",
            {**_heartbeat("replica-0", until=150), **_heartbeat("replica-1", until=150)},
            silent(firing, firing + 150),
        ),
        Case(
            "PrometheusShardDown",
            "every replica of a shard silent past the threshold for 2m fires for the shard",
            {
                **_heartbeat("replica-0", until=150),
                **_heartbeat("replica-1", until=150),
                **_heartbeat("replica-0", shard="1"),
            },
            (*silent(150, firing - 15), fires(firing, Firing(SHARD, 2))),
        ),
        Case(
            "PrometheusShardDown",
            "one replica left, or the shard's only replica writing again within 2m, stays silent",
            {
                **_heartbeat("replica-0"),
                **_heartbeat("replica-1", until=150),
                **_heartbeat("replica-0", until=150, back_at=pending + 90, shard="1"),
            },
            silent(pending, firing, firing + 150),
        ),
    )


def remote_write_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    behind = int(th.remote_write_behind_seconds.value)
    highest = catalog.PROMETHEUS_REMOTE_STORAGE_HIGHEST_TIMESTAMP_IN_SECONDS
    sent = catalog.PROMETHEUS_REMOTE_STORAGE_QUEUE_HIGHEST_SENT_TIMESTAMP_SECONDS
    written = {series(highest, PROMETHEUS): join(counter(0, 15, SAMPLES))}
    # Sending stops at 60 s: the oldest unsent sample's age is t - 60, past the threshold from the
    # first evaluation after 60 + behind; firing 5 minutes later with the age then.
    stuck = 60
    pending = _first_evaluation_after(stuck + behind)
    return (
        Case(
            "PrometheusRemoteWriteBehind",
            "a queue that stopped sending, past the threshold for 5m, fires with the age of its oldest sample",
            {**written, series(sent, QUEUE): join(counter(0, 15, 5), [stuck] * (SAMPLES - 5))},
            (*silent(pending + 285), fires(pending + 300, Firing(QUEUE_LABELS, pending + 300 - stuck))),
        ),
        Case(
            "PrometheusRemoteWriteBehind",
            "a queue exactly at the threshold behind stays silent",
            {**written, series(sent, QUEUE): join([0] * (behind // 15), counter(0, 15, SAMPLES - behind // 15))},
            silent(pending + 300, 840),
        ),
        Case(
            "PrometheusRemoteWriteFailing",
            "dropped samples fire at once",
            {series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_FAILED_TOTAL, QUEUE): values((0, 10), (50, 30))},
            (*silent(135), fires(150, Firing(QUEUE_LABELS, 50))),
        ),
        Case(
            "PrometheusRemoteWriteFailing",
            "no dropped sample stays silent",
            {series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_FAILED_TOTAL, QUEUE): values((0, 40))},
            silent(150, 450),
        ),
        Case(
            "PrometheusRemoteWriteRetrying",
            "resending with samples pending for 5m fires with the retries per second",
            {
                series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_RETRIED_TOTAL, QUEUE): join(counter(0, 150, SAMPLES)),
                series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_PENDING, QUEUE): values((5000, SAMPLES)),
            },
            # The rate has two samples from 15 s: pending then, firing 5 minutes later.
            (*silent(300), fires(315, Firing(QUEUE_LABELS, 10)), fires(450, Firing(QUEUE_LABELS, 10))),
        ),
        Case(
            "PrometheusRemoteWriteRetrying",
            "retries that emptied the queue (nothing pending) stay silent",
            {
                series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_RETRIED_TOTAL, QUEUE): join(counter(0, 150, SAMPLES)),
                series(catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_PENDING, QUEUE): values((0, SAMPLES)),
            },
            silent(300, 450),
        ),
    )


def ha_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    return (*replica_cases(th), *remote_write_cases(th))


HA_RECORD_CASES: tuple[RecordCase, ...] = (
    RecordCase(
        health.LATEST_SCRAPE,
        "the latest scrape of any target (one scraped until 150 s, one still scraped)",
        {
            series(catalog.UP, {"job": "pods", "instance": "10.0.0.1:9400"}): values((1, 11)),
            series(catalog.UP, {"job": "pods", "instance": "10.0.0.2:9400"}): values((1, 30)),
        },
        "300s",
        (({}, 300),),
    ),
)


# An unsharded pair: each replica scrapes both (job `PROMETHEUS_REPLICAS_JOB`); a replica down
# from 150 s reads `up` 0 from then on, and fires 2 minutes later on the survivor.
PAIR_CFG = ObservabilityConfig(
    prometheus_replicas=2, prometheus_peers=("prometheus-k8s-0.p:9090", "prometheus-k8s-1.p:9090")
)


def _peer_up(instance: str, down_from: int | None = None) -> dict[str, str]:
    labels = {"job": PROMETHEUS_REPLICAS_JOB, "instance": instance}
    points = [0 if down_from is not None and 15 * i >= down_from else 1 for i in range(SAMPLES)]
    return {series(catalog.UP, labels): join(points)}


def pair_cases() -> tuple[Case, ...]:
    a, b = PAIR_CFG.prometheus_peers
    down = {"job": PROMETHEUS_REPLICAS_JOB, "instance": b}
    return (
        Case(
            "PrometheusReplicaDown",
            "a replica of the pair not answering for 2m while the other answers fires for it",
            {**_peer_up(a), **_peer_up(b, down_from=150)},
            (*silent(135, 150, 255), fires(270, Firing(down, 0)), fires(600, Firing(down, 0))),
        ),
        Case(
            "PrometheusReplicaDown",
            "both replicas answering stays silent",
            {**_peer_up(a), **_peer_up(b)},
            silent(150, 270, 600),
        ),
        Case(
            "PrometheusReplicaDown",
            "no replica answering is not this alert (then nothing evaluates: the Watchdog heartbeat stops)",
            {**_peer_up(a, down_from=150), **_peer_up(b, down_from=150)},
            silent(270, 600),
        ),
    )
