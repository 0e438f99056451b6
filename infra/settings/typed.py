"""The typed, immutable stack settings every component is built from, and the error that lists
every problem of a stack's config at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from observability.config import ObservabilityConfig

PROJECT = "foxhunt-observability"
ScrapeMode = Literal["annotations", "operator"]
ScrapeDelivery = Literal["configmap", "secret"]
SCRAPE_MODES: tuple[ScrapeMode, ...] = ("annotations", "operator")
SCRAPE_DELIVERIES: tuple[ScrapeDelivery, ...] = ("configmap", "secret")
# The promise for critical failures (NaN, GPU out of memory, GPU errors): paged within this many
# seconds of the failure itself. A stack may declare a longer budget explicitly.
DEFAULT_CRITICAL_DETECTION_SECONDS = 30
SUPPORTED_KUBERNETES_MINORS = range(27, 38)  # 1.27 .. 1.37: schemas kubernetes-validate ships

# Secret config keys: a value for these must be a Pulumi secret (`pulumi config set --secret`).
# The receivers' URLs, in AlertingReceivers' field order (the heartbeat: Watchdog every minute).
RECEIVER_KEYS = (
    "alertPageWebhookUrl",
    "alertChatWebhookUrl",
    "alertLowPriorityWebhookUrl",
    "alertHeartbeatUrl",
    "alertSlackApiUrl",  # a Slack incoming-webhook URL, where a severity goes to Slack
    "alertPagerDutyRoutingKey",  # the PagerDuty Events API v2 integration key, where one goes to PagerDuty
)
# The credential Prometheus scrapes the poller and the training jobs with (`scrapeSecurity`).
SCRAPE_CREDENTIAL_KEY = "scrapeCredential"
# The Secret beside Prometheus that holds it (`token`, or `username` and `password`).
SCRAPE_CREDENTIALS_SECRET = "foxhunt-scrape-credentials"
SECRET_KEYS = (*RECEIVER_KEYS, "registryPassword", SCRAPE_CREDENTIAL_KEY)
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
    """How targets are discovered and the config delivered; the intervals are the observability
    config's (`scrape_interval_seconds`, `evaluation_interval_seconds`)."""

    mode: ScrapeMode
    delivery: ScrapeDelivery
    object_name: str
    # Labels the Prometheus (operator) selects PodMonitors / PrometheusRules by.
    operator_selector: Mapping[str, str]
    # The stack's Prometheus pods: the only peers the NetworkPolicies let reach a metrics port.
    prometheus_namespace: str = "monitoring"
    prometheus_pod_selector: Mapping[str, str] = field(default_factory=lambda: {"app.kubernetes.io/name": "prometheus"})


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
class RemediationSettings:
    """Bounded rollback of non-finite training (foxhunt_trainer.remediation), for every job
    of the template; a job may override it in its own environment."""

    enabled: bool = False
    max_rollbacks: int = 3
    lr_factor: float = 0.5


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
    # Pods (nodes) per job: above 1, an Indexed Job whose pods rendezvous through a headless Service.
    nodes: int = 1
    # What torchrun starts on every node (a script or `-m module`, then its arguments): set, the
    # template launches torchrun with one process per GPU; empty, the image's entrypoint runs alone.
    command: tuple[str, ...] = ()
    # The command line of a job without torchrun (its executable first); empty with autolog off, the
    # image's entrypoint runs as it is.
    program: tuple[str, ...] = ()
    # Every program runs auto-instrumented (`foxhunt-run`, `foxhunt-torchrun`; FOXHUNT_AUTOLOG in
    # its env), unless the stack turns it off; a job's own env may override it.
    autolog: bool = True
    remediation: RemediationSettings = RemediationSettings()

    @property
    def processes_per_node(self) -> int:
        """torchrun's processes per pod: one per GPU when torchrun launches, else the one program."""
        return self.gpu_count if self.command else 1


@dataclass(frozen=True)
class GrafanaSettings:
    """Where the dashboards are provisioned; their folder is the observability config's."""

    namespace: str
    # Where people open Grafana (stack output `dashboards` links each dashboard under it).
    url: str


@dataclass(frozen=True)
class PrometheusSettings:
    """Where the shards remote-write to (docs/scaling.md); the shard count, this stack's cluster and
    the clusters of the global tier are the observability config's (`shards`, `cluster`, `clusters`)."""

    remote_write_url: str = ""  # the global tier's remote-write receiver


@dataclass(frozen=True)
class AlertingReceivers:
    page_webhook_url: SecretValue
    chat_webhook_url: SecretValue
    low_priority_webhook_url: SecretValue
    heartbeat_url: SecretValue  # the dead man's switch that expects Watchdog every minute
    slack_api_url: SecretValue = None
    pagerduty_routing_key: SecretValue = None


@dataclass(frozen=True)
class KubernetesTarget:
    """The cluster a stack deploys to: its explicit provider uses this context (of the ambient
    kubeconfig, or of `kubeconfig` when the stack carries one as a secret) and nothing else."""

    context: str | None
    kubeconfig: SecretValue | None = None


@dataclass(frozen=True)
class Settings:
    """A stack's settings: the observability config every generator reads (environment, intervals,
    detection budget, runbook URL, folder, shards and clusters, prices, ...) held as it is, plus
    what only the deployment needs. Each field is filled by one parser of `sections`."""

    project: str
    stack: str
    observability: ObservabilityConfig
    kubernetes_version: str
    namespaces: Namespaces
    endpoints: Endpoints
    services: tuple[ServiceSettings, ...]
    scrape: ScrapeSettings
    poller: PollerSettings
    training_job: TrainingJobSettings
    grafana: GrafanaSettings
    alerting: AlertingReceivers
    kubernetes: KubernetesTarget = KubernetesTarget(context=None)
    common_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus: PrometheusSettings = PrometheusSettings()
    # The credential of the secured scrapes (with `observability.scrape_security`), a Pulumi secret.
    scrape_credential: SecretValue | None = None

    @property
    def environment(self) -> str:
        return self.observability.environment

    def observability_config(self) -> ObservabilityConfig:
        """The one settings object that rules, dashboards and scrape config are generated from."""
        return self.observability
