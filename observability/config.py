"""All settings that rules, dashboards, datasources and scrape configuration share, in one object.

Like the `_config` of the kubernetes-mixin: the stack settings' parsers (`infra/settings/`) fill one
`ObservabilityConfig`, which the typed `Settings` hold as it is; every generator takes it and
nothing else, so a generator never reads stack config itself and tests can build any variant in
one line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from observability.peak_flops import DEFAULT_PEAK_FLOPS, PeakFlopsTable
from observability.thresholds import DEFAULT_THRESHOLDS, Thresholds


@dataclass(frozen=True)
class DatasourceUids:
    """Fixed Grafana datasource UIDs: dashboards and cross-links refer to these."""

    prometheus: str = "prometheus"
    loki: str = "loki"
    tempo: str = "tempo"


class RemoteWrite(enum.Enum):
    """What the scrape shards remote-write to the global tier (docs/scaling.md)."""

    # Everything they scrape and record: the global tier answers every query as one server would.
    ALL = "all"
    # The partials the global rules combine, the alerts, and the series the dashboards' fleet-wide
    # panels and the global rules read; per-GPU series stay on the shards (drill-down panels).
    AGGREGATES = "aggregates"


@dataclass(frozen=True)
class ScrapeSecurity:
    """How Prometheus scrapes the project's own exporters (the GPU poller, the training jobs) when
    they serve TLS with authentication: the files on the Prometheus side that verify the server and
    carry the credential. The exporters read the matching web config (foxhunt_trainer.contract.web_config)."""

    server_name: str  # a name in the exporters' certificate (they are reached by pod IP)
    tls_secret: str  # Secret with the exporters' `ca.crt` (and `tls.crt`, `tls.key` for the exporters)
    credentials_secret: str  # Secret with Prometheus' credential: `token` (bearer) or `password` (basic)
    authentication: str = "bearer"  # bearer | basic
    username: str = "prometheus"  # with basic
    client_cert_secret: str | None = None  # Secret with Prometheus' client `tls.crt`/`tls.key` (mTLS)
    # Where Prometheus finds each Secret's keys as files: <secrets_dir>/<secret>/<key> (the
    # operator mounts the Prometheus resource's `spec.secrets` there).
    secrets_dir: str = "/etc/prometheus/secrets"

    def __post_init__(self) -> None:
        if self.authentication not in ("bearer", "basic"):
            raise ValueError(f"authentication {self.authentication!r}: expected bearer or basic")

    @property
    def credential_key(self) -> str:
        return "token" if self.authentication == "bearer" else "password"

    def file(self, secret: str, key: str) -> str:
        return f"{self.secrets_dir}/{secret}/{key}"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The Secrets Prometheus must mount (operator: the Prometheus resource's `spec.secrets`)."""
        names = (self.tls_secret, self.credentials_secret, self.client_cert_secret)
        return tuple(dict.fromkeys(n for n in names if n))


PAGERDUTY = "pagerduty"
SLACK = "slack"
WEBHOOK = "webhook"
RECEIVER_KINDS: tuple[str, ...] = (PAGERDUTY, SLACK, WEBHOOK)
SEVERITY_NAMES: tuple[str, ...] = ("critical", "high", "warning", "info")


@dataclass(frozen=True)
class Notifications:
    """Which kind of receiver each severity's notifications reach (`pagerduty`, `slack` or a generic
    `webhook`), and the Slack channel of each severity sent to Slack."""

    critical: str = WEBHOOK
    high: str = WEBHOOK
    warning: str = WEBHOOK
    info: str = WEBHOOK
    slack_channels: tuple[tuple[str, str], ...] = ()  # (severity, channel)

    def kind(self, severity: str) -> str:
        kind: str = getattr(self, severity)
        return kind

    def __post_init__(self) -> None:
        problems = [
            f"{severity}: {self.kind(severity)!r} is not one of {', '.join(RECEIVER_KINDS)}"
            for severity in SEVERITY_NAMES
            if self.kind(severity) not in RECEIVER_KINDS
        ]
        channels = dict(self.slack_channels)
        problems += [
            f"{severity} goes to Slack but has no channel in slack_channels"
            for severity in SEVERITY_NAMES
            if self.kind(severity) == SLACK and not channels.get(severity)
        ]
        if problems:
            raise ValueError("notifications: " + "; ".join(problems))


# What a job holding a MIG device pays of its GPU's price (ObservabilityConfig.mig_cost, `migCost`).
MIG_COST_COMPUTE_SHARE = "compute_share"
MIG_COST_WHOLE_GPU = "whole_gpu"
MIG_COSTS: tuple[str, ...] = (MIG_COST_COMPUTE_SHARE, MIG_COST_WHOLE_GPU)


@dataclass(frozen=True)
class ObservabilityConfig:
    environment: str = "dev"
    # How often Prometheus scrapes targets and evaluates rules; alert `for` durations are
    # derived from these so critical failures are detected within `critical_detection_seconds`.
    scrape_interval_seconds: int = 15
    evaluation_interval_seconds: int = 15
    critical_detection_seconds: int = 30
    # The sources of the critical alerts (the GPU poller, the training jobs and the training service)
    # are scraped this often, and the rule groups holding those alerts are evaluated this often, so
    # that a critical failure pages within `critical_detection_seconds` of the failure itself
    # (observability/rules/detection.py); everything else keeps the intervals above.
    critical_scrape_interval_seconds: int = 5
    critical_evaluation_interval_seconds: int = 5
    # Where each alert's `runbook_url` points (a section anchor is appended).
    runbook_base_url: str = "https://github.com/foxhunt/foxhunt-observability/blob/main/docs/runbooks.md"
    # Value of the `service` target label (set by scrape discovery from the pod label
    # `app.kubernetes.io/name`) for the things alerts and dashboards single out.
    training_service: str = "ml-training-service"
    training_job_service: str = "training-job"
    gpu_poller_service: str = "gpu-poller"
    # Whether kube-state-metrics runs and is scraped with its own labels (honor_labels): the
    # health alerts then also compare each GPU node's `nvidia.com/gpu` capacity with its poller.
    kube_state_metrics: bool = False
    # The platform services whose scrape targets the infra cockpit shows.
    platform_services: tuple[str, ...] = ()
    datasource_uids: DatasourceUids = DatasourceUids()
    # Per severity: PagerDuty, Slack or a generic webhook (observability.notifications).
    notifications: Notifications = Notifications()
    # Where people open Grafana: notifications link each alert's dashboard under it.
    grafana_url: str = "https://grafana.example.invalid"
    # Grafana folder the dashboards are provisioned into.
    grafana_folder: str = "ML Platform"
    # Every alert threshold (observability/thresholds.yaml): expressions, texts, dashboard steps.
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # Scrape shards (Prometheus servers that each scrape the targets `hashmod` of their pod's node
    # assigns them and evaluate the shard tier of the rules); 1 is one Prometheus that evaluates
    # every rule.
    shards: int = 1
    # What the shards remote-write to the global tier (with more than one shard).
    remote_write: RemoteWrite = RemoteWrite.ALL
    # Prometheus replicas per server (a shard, or the one Prometheus): each scrapes the same targets
    # and evaluates the same rules, and carries its own value of `replica_label` as an external label
    # (docs/scaling.md, "High availability"). The global tier stays one writer.
    prometheus_replicas: int = 1
    # The external label that tells replicas apart: the global tier deduplicates on it and every
    # alert drops it before Alertmanager sees it (the Prometheus Operator's name by default).
    replica_label: str = "prometheus_replica"
    # The replicas' own web addresses (`host:port`), one per replica, on an unsharded replicated
    # stack: each replica scrapes all of them, so that the survivors alert on a dead one. Empty
    # otherwise.
    prometheus_peers: tuple[str, ...] = ()
    # Alertmanager peers of one gossip cluster (`host:port` of each peer's web listener); every
    # Prometheus sends to all of them. Empty: the servers' alerting is configured elsewhere.
    alertmanager_peers: tuple[str, ...] = ()
    alertmanager_replicas: int = 1
    # This stack's cluster: the `cluster` external label of every Prometheus of the stack.
    cluster: str = ""
    # Every cluster whose series the dashboards' Prometheus (the global tier) holds; with more than
    # one, the dashboards get a `$cluster` variable and every query filters by it.
    clusters: tuple[str, ...] = ()
    # Cost estimates (recording rules and panels): price of one GPU-hour by NVML product name
    # (`gpu_name`), the price for any other GPU, the price of a kWh, and the currency they are in.
    gpu_hourly_cost: tuple[tuple[str, float], ...] = (("NVIDIA H100 80GB HBM3", 4.0),)
    gpu_hourly_cost_default: float = 2.0
    energy_price_per_kwh: float = 0.15
    currency: str = "USD"
    # What a job holding a MIG device pays of its GPU's price: `compute_share` (its share of the GPU's
    # SMs) or `whole_gpu` (the instance priced as the GPU: no one else can use the rest). A GPU shared
    # by time-slicing is split evenly between the jobs holding it.
    mig_cost: str = MIG_COST_COMPUTE_SHARE
    # Checkpoint storage: price of a GB kept for a month, and how long each checkpoint is kept.
    checkpoint_storage_price_per_gb_month: float = 0.023
    checkpoint_retention_days: float = 30.0
    # Dense peak FLOP/s by GPU model and precision (foxhunt_trainer/contract/peak_flops.json): the denominator of MFU.
    peak_flops: PeakFlopsTable = DEFAULT_PEAK_FLOPS
    # TLS and authentication of the scrapes of the poller and the training jobs; None: plain HTTP.
    scrape_security: ScrapeSecurity | None = None

    @property
    def replicated(self) -> bool:
        """Whether the global tier receives each shard's series from more than one replica."""
        return self.shards > 1 and self.prometheus_replicas > 1

    @property
    def replicated_pair(self) -> bool:
        """Whether one Prometheus runs as replicas with no global tier: they watch each other."""
        return self.shards == 1 and self.prometheus_replicas > 1
