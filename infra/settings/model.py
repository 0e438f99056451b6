"""The typed, immutable stack settings every component is built from, and the error that lists
every problem of a stack's config at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from observability.config import DatasourceUids, ObservabilityConfig, RemoteWrite

PROJECT = "foxhunt-observability"
ScrapeMode = Literal["annotations", "operator"]
ScrapeDelivery = Literal["configmap", "secret"]
SCRAPE_MODES: tuple[ScrapeMode, ...] = ("annotations", "operator")
SCRAPE_DELIVERIES: tuple[ScrapeDelivery, ...] = ("configmap", "secret")
# The promise for critical failures (NaN, GPU out of memory, GPU errors): detected within this many
# seconds of the first sample that shows them. A stack may declare a longer budget explicitly.
DEFAULT_CRITICAL_DETECTION_SECONDS = 30
SUPPORTED_KUBERNETES_MINORS = range(27, 38)  # 1.27 .. 1.37: schemas kubernetes-validate ships

# Secret config keys: a value for these must be a Pulumi secret (`pulumi config set --secret`).
# The receivers' URLs, in AlertingReceivers' field order (the heartbeat: Watchdog every minute).
RECEIVER_KEYS = ("alertPageWebhookUrl", "alertChatWebhookUrl", "alertLowPriorityWebhookUrl", "alertHeartbeatUrl")
SECRET_KEYS = (*RECEIVER_KEYS, "registryPassword")
DIGEST_EXPECTED = "an image reference pinned by digest: REGISTRY/REPO@sha256:<64 hex>"
# The kubeconfig a stack may carry as a Pulumi secret (`pulumi config set --secret kubeconfig ...`).
KUBECONFIG_KEY = "kubeconfig"

SecretValue = Any  # a pulumi.Output[str] marked secret in a real run; a placeholder str offline


class SettingsError(ValueError):
    """Bad stack config: every problem found, one per line."""

    def __init__(self, stack: str, problems: Sequence[str]) -> None:
        self.stack = stack
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"stack {stack!r}: {len(self.problems)} config problem(s) in Pulumi.{stack}.yaml:\n{lines}")


@dataclass(frozen=True)
class ServiceSettings:
    """A platform service Deployment (owned by another system) that this project patches."""

    name: str
    container: str
    port: int
    path: str
    model_type: str


@dataclass(frozen=True)
class Namespaces:
    platform: str
    monitoring: str
    training: str


@dataclass(frozen=True)
class Endpoints:
    tempo_otlp_grpc: str
    tempo_query: str
    loki: str
    prometheus: str


@dataclass(frozen=True)
class ScrapeSettings:
    mode: ScrapeMode
    interval_seconds: int
    evaluation_interval_seconds: int
    delivery: ScrapeDelivery
    object_name: str
    # Labels the Prometheus (operator) selects PodMonitors / PrometheusRules by.
    operator_selector: Mapping[str, str]


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: Literal["Exists", "Equal"]
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Resources:
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str


@dataclass(frozen=True)
class ImageBuild:
    """Build `poller/` and push it to `registry/repository`; the DaemonSet uses the digest ref."""

    registry: str
    repository: str
    username: str
    password: SecretValue
    platforms: tuple[str, ...]


@dataclass(frozen=True)
class PinnedImage:
    """A prebuilt image pinned by digest: no build happens."""

    ref: str


@dataclass(frozen=True)
class PollerSettings:
    image: ImageBuild | PinnedImage
    port: int
    min_interval_seconds: float
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    priority_class: str
    resources: Resources
    max_unavailable: str


@dataclass(frozen=True)
class TrainingJobSettings:
    name: str
    image: str
    model_type: str
    gpu_count: int
    backoff_limit: int
    ttl_seconds_after_finished: int
    metrics_port: int
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    resources: Resources


@dataclass(frozen=True)
class GrafanaSettings:
    namespace: str
    folder: str
    # Where people open Grafana (stack output `dashboards` links each dashboard under it).
    url: str


@dataclass(frozen=True)
class PrometheusSettings:
    """Sharded scraping and the global rule tier (docs/scaling.md)."""

    shards: int = 1  # Prometheus scrape shards; 1 is one server evaluating every rule
    cluster: str = ""  # the `cluster` external label of every Prometheus of the stack
    clusters: tuple[str, ...] = ()  # every cluster the dashboards' global tier holds (this one included)
    remote_write_url: str = ""  # where the shards remote-write to (the global tier's receiver)
    remote_write: RemoteWrite = RemoteWrite.ALL  # what they remote-write: everything, or the aggregates


@dataclass(frozen=True)
class CostSettings:
    """Prices behind the cost estimates (per-job and per-model-type recording rules, panels)."""

    gpu_hourly_cost: tuple[tuple[str, float], ...]  # (gpu_name as NVML reports it, price per GPU-hour)
    gpu_hourly_cost_default: float  # price per GPU-hour of any GPU not listed
    energy_price_per_kwh: float
    currency: str  # ISO 4217 code the prices are in


_EXAMPLE = ObservabilityConfig()
# A stack without prices gets ObservabilityConfig's example prices.
DEFAULT_COST = CostSettings(
    _EXAMPLE.gpu_hourly_cost, _EXAMPLE.gpu_hourly_cost_default, _EXAMPLE.energy_price_per_kwh, _EXAMPLE.currency
)


@dataclass(frozen=True)
class AlertingReceivers:
    page_webhook_url: SecretValue
    chat_webhook_url: SecretValue
    low_priority_webhook_url: SecretValue
    heartbeat_url: SecretValue  # the dead man's switch that expects Watchdog every minute


@dataclass(frozen=True)
class KubernetesTarget:
    """The cluster a stack deploys to: its explicit provider uses this context (of the ambient
    kubeconfig, or of `kubeconfig` when the stack carries one as a secret) and nothing else."""

    context: str | None
    kubeconfig: SecretValue | None = None


@dataclass(frozen=True)
class Settings:
    project: str
    stack: str
    environment: str
    kubernetes_version: str
    namespaces: Namespaces
    endpoints: Endpoints
    services: tuple[ServiceSettings, ...]
    scrape: ScrapeSettings
    poller: PollerSettings
    training_job: TrainingJobSettings
    grafana: GrafanaSettings
    alerting: AlertingReceivers
    runbook_base_url: str
    critical_detection_seconds: int = DEFAULT_CRITICAL_DETECTION_SECONDS
    kubernetes: KubernetesTarget = KubernetesTarget(context=None)
    common_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus: PrometheusSettings = PrometheusSettings()
    cost: CostSettings = field(default_factory=lambda: DEFAULT_COST)
    # kube-state-metrics runs and is scraped with its own labels: health alerts compare GPU capacity.
    kube_state_metrics: bool = False

    def observability_config(self) -> ObservabilityConfig:
        """The one settings object that rules, dashboards and scrape config are generated from."""
        return ObservabilityConfig(
            environment=self.environment,
            scrape_interval_seconds=self.scrape.interval_seconds,
            evaluation_interval_seconds=self.scrape.evaluation_interval_seconds,
            runbook_base_url=self.runbook_base_url,
            critical_detection_seconds=self.critical_detection_seconds,
            platform_services=tuple(s.name for s in self.services),
            datasource_uids=DatasourceUids(),
            grafana_folder=self.grafana.folder,
            shards=self.prometheus.shards,
            cluster=self.prometheus.cluster,
            clusters=self.prometheus.clusters,
            remote_write=self.prometheus.remote_write,
            gpu_hourly_cost=self.cost.gpu_hourly_cost,
            gpu_hourly_cost_default=self.cost.gpu_hourly_cost_default,
            energy_price_per_kwh=self.cost.energy_price_per_kwh,
            currency=self.cost.currency,
            kube_state_metrics=self.kube_state_metrics,
        )
