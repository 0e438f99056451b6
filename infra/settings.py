"""Typed, immutable stack settings, read once from Pulumi config and validated before any resource.

`load_settings(source)` turns the stack's config (`Pulumi.<stack>.yaml`) into a `Settings` object
or raises `SettingsError` listing every problem at once, one line each, naming the key, the value
and what is expected. Nothing is registered with Pulumi until this succeeds.

Credentials (Alertmanager receiver URLs, the registry password) are read only as Pulumi secrets;
a credential given in plaintext, or any URL carrying a password, is an error.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from observability.config import DatasourceUids, ObservabilityConfig
from observability.rules.detection import detection_budget

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
SECRET_KEYS = ("alertPageWebhookUrl", "alertChatWebhookUrl", "alertLowPriorityWebhookUrl", "registryPassword")
_CREDENTIAL_KEY = re.compile(r"(password|passwd|secret|token|api[_-]?key|credential|webhook)", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_EXPECTED = "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)"
# The kubeconfig a stack may carry as a Pulumi secret (`pulumi config set --secret kubeconfig ...`).
KUBECONFIG_KEY = "kubeconfig"
_DIGEST_REF = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")
DIGEST_EXPECTED = "an image reference pinned by digest: REGISTRY/REPO@sha256:<64 hex>"
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class SettingsError(ValueError):
    """Bad stack config: every problem found, one per line."""

    def __init__(self, stack: str, problems: Sequence[str]) -> None:
        self.stack = stack
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"stack {stack!r}: {len(self.problems)} config problem(s) in Pulumi.{stack}.yaml:\n{lines}")


class ConfigSource(Protocol):
    """Raw stack config: `get` returns the config string (JSON for objects) or None."""

    stack: str

    def get(self, key: str) -> str | None: ...

    def is_secret(self, key: str) -> bool: ...

    def keys(self) -> Sequence[str]: ...


SecretValue = Any  # a pulumi.Output[str] marked secret in a real run; a placeholder str offline


SecretReader = Callable[[str], SecretValue]


# ------------------------------------------------------------------------------------------------
# The typed settings
# ------------------------------------------------------------------------------------------------


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
class AlertingReceivers:
    page_webhook_url: SecretValue
    chat_webhook_url: SecretValue
    low_priority_webhook_url: SecretValue


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
        )


# ------------------------------------------------------------------------------------------------
# Reading and validating
# ------------------------------------------------------------------------------------------------

T = TypeVar("T")


class _Reader:
    """Collects problems while reading; each check records a message and returns a fallback."""

    def __init__(self, source: ConfigSource) -> None:
        self.source = source
        self.problems: list[str] = []
        # Top-level keys already reported (missing or misspelled): nothing under them is reported
        # again, so one mistake is one problem.
        self.reported: set[str] = set()

    def _top(self, key: str) -> str:
        return re.split(r"[.\[]", key, maxsplit=1)[0]

    def problem(self, key: str, value: object, expected: str) -> None:
        if self._top(key) in self.reported:
            return
        shown = json.dumps(value) if not isinstance(value, str) else repr(value)
        self.problems.append(f"{key} = {shown}: expected {expected}")

    def model_type(self, key: str, value: Any) -> str:
        """A model family label (dqn, ppo, tft, mamba, none, ...): any DNS label is accepted, since a
        new family must not need a code change; it travels in OTEL_RESOURCE_ATTRIBUTES, a metric
        label and a Job's generateName, where ',', '=' or upper case would break them."""
        if not isinstance(value, str) or len(value) > 40 or not _DNS_LABEL.match(value):
            self.problem(key, value, "a model type such as dqn, ppo, tft, mamba or none (lower-case letters, digits "
                         "and '-', at most 40 characters)")  # fmt: skip
            return "none"
        return value

    def raw(self, key: str) -> Any:
        text = self.source.get(key)
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def required(self, key: str) -> Any:
        value = self.raw(key)
        if value is None and key not in self.reported:
            self.problems.append(f"{key} is missing: set it in Pulumi.{self.source.stack}.yaml")
            self.reported.add(key)
        return value

    # --- typed accessors over a parsed value -----------------------------------------------
    def string(self, key: str, value: Any, pattern: re.Pattern[str] | None = None, expected: str = "") -> str:
        if not isinstance(value, str) or not value:
            self.problem(key, value, expected or "a non-empty string")
            return ""
        if pattern is not None and not pattern.match(value):
            self.problem(key, value, expected)
            return ""
        return value

    def dns_name(self, key: str, value: Any) -> str:
        ok = isinstance(value, str) and len(value) <= 63 and bool(_DNS_LABEL.match(value))
        if not ok:
            self.problem(key, value, DNS_LABEL_EXPECTED)
            return ""
        return str(value)

    def integer(self, key: str, value: Any, low: int, high: int) -> int:
        number = _as_int(value)
        if isinstance(value, str) and number is not None:
            self.problem(key, value, f"a whole number from {low} to {high} written without quotes")
            return low
        if number is None or not low <= number <= high:
            self.problem(key, value, f"a whole number from {low} to {high}")
            return low
        return number

    def number(self, key: str, value: Any, low_exclusive: float, high: float) -> float:
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not low_exclusive < number <= high:
            self.problem(key, value, f"a number above {low_exclusive:g} and at most {high:g}")
            return high
        return number

    def url(self, key: str, value: Any, schemes: tuple[str, ...] = ("http", "https")) -> str:
        text = value if isinstance(value, str) else ""
        parts = urlsplit(text)
        port_ok = True
        try:
            _ = parts.port
        except ValueError:
            port_ok = False
        if parts.scheme not in schemes or not parts.hostname or not port_ok:
            self.problem(key, value, f"a URL with scheme {' or '.join(schemes)}, a host and an optional port")
            return ""
        if parts.password is not None:
            self.problem(key, "<redacted>", "no credentials in a URL: put them in a Pulumi secret")
            return ""
        return text

    def choice(self, key: str, value: Any, choices: Sequence[T]) -> T:
        if value not in choices:
            self.problem(key, value, "one of " + ", ".join(repr(c) for c in choices))
            return choices[0]
        return value  # type: ignore[no-any-return]

    def mapping(self, key: str, value: Any, allowed: set[str] | None = None) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(key, value, "an object (YAML mapping)")
            return {}
        if allowed is not None:
            for extra in sorted(set(value) - allowed):
                self.problems.append(
                    f"{key}.{extra} is not a known setting: expected only {', '.join(sorted(allowed))}"
                )
        return value

    def label_map(self, key: str, value: Any) -> Mapping[str, str]:
        labels = self.mapping(key, value)
        out: dict[str, str] = {}
        for k, v in labels.items():
            if not _LABEL_KEY.match(str(k)) or not isinstance(v, str):
                self.problem(f"{key}.{k}", v, "a Kubernetes label key with a string value")
                continue
            out[str(k)] = v
        return dict(sorted(out.items()))

    def quantity(self, key: str, value: Any) -> str:
        if not isinstance(value, str | int) or not _QUANTITY.match(str(value)):
            self.problem(key, value, "a Kubernetes quantity such as 100m, 0.5, 64Mi or 1Gi")
            return "0"
        return str(value)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    return None


def _tolerations(r: _Reader, key: str, value: Any) -> tuple[Toleration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        r.problem(key, value, "a list of tolerations")
        return ()
    out = []
    for i, item in enumerate(value):
        k = f"{key}[{i}]"
        t = r.mapping(k, item, {"key", "operator", "effect", "value"})
        operators: tuple[Literal["Exists", "Equal"], ...] = ("Exists", "Equal")
        operator = r.choice(f"{k}.operator", t.get("operator", "Exists"), operators)
        effect = r.choice(f"{k}.effect", t.get("effect", "NoSchedule"), ("NoSchedule", "PreferNoSchedule", "NoExecute"))
        out.append(Toleration(r.string(f"{k}.key", t.get("key")), operator, effect, str(t.get("value", ""))))
    return tuple(out)


def _resources(r: _Reader, key: str, value: Any, default: Resources) -> Resources:
    m = r.mapping(key, value, {"cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"})
    return Resources(
        cpu_request=r.quantity(f"{key}.cpuRequest", m.get("cpuRequest", default.cpu_request)),
        cpu_limit=r.quantity(f"{key}.cpuLimit", m.get("cpuLimit", default.cpu_limit)),
        memory_request=r.quantity(f"{key}.memoryRequest", m.get("memoryRequest", default.memory_request)),
        memory_limit=r.quantity(f"{key}.memoryLimit", m.get("memoryLimit", default.memory_limit)),
    )


def _services(r: _Reader, value: Any) -> tuple[ServiceSettings, ...]:
    if not isinstance(value, list) or not value:
        r.problem("services", value, "a non-empty list of {name, container, port, path} objects")
        return ()
    services = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        # Name the service in every message when it has a usable name: services['feature-store'].port
        given = item.get("name") if isinstance(item, Mapping) else None
        named = isinstance(given, str) and bool(_DNS_LABEL.match(given)) and given not in seen
        k = f"services[{given!r}]" if named else f"services[{i}]"
        m = r.mapping(k, item, {"name", "container", "port", "path", "modelType"})
        name = r.dns_name(f"{k}.name", m.get("name"))
        if name and name in seen:
            r.problem(f"{k}.name", name, "a unique service name (it is listed twice)")
        seen.add(name)
        path = m.get("path", "/metrics")
        services.append(
            ServiceSettings(
                name=name,
                container=r.dns_name(f"{k}.container", m.get("container", name)),
                port=r.integer(f"{k}.port", m.get("port"), 1, 65535),
                path=r.string(f"{k}.path", path, re.compile(r"^/[\x21-\x7e]*$"), "an HTTP path starting with '/'"),
                model_type=r.model_type(f"{k}.modelType", m.get("modelType", "none")),
            )
        )
    return tuple(services)


def _poller_image(r: _Reader, value: Any, secret: SecretReader) -> ImageBuild | PinnedImage:
    m = r.mapping("poller.image", value, {"digest", "registry", "repository", "username", "platforms"})
    if "digest" in m:
        if set(m) - {"digest"}:
            r.problems.append(
                "poller.image: give either `digest` (a prebuilt image) or `registry`+`repository`, not both"
            )
        ref = r.string("poller.image.digest", m["digest"], _DIGEST_REF, DIGEST_EXPECTED)
        return PinnedImage(ref)
    registry = r.string(
        "poller.image.registry", m.get("registry"), re.compile(r"^[a-z0-9.-]+(:[0-9]+)?$"), "a registry host[:port]"
    )
    platforms = m.get("platforms", ["linux/amd64"])
    if not isinstance(platforms, list) or not all(isinstance(p, str) and p.startswith("linux/") for p in platforms):
        r.problem("poller.image.platforms", platforms, "a list of linux/<arch> platforms")
        platforms = ["linux/amd64"]
    return ImageBuild(
        registry=registry,
        repository=r.string(
            "poller.image.repository",
            m.get("repository"),
            re.compile(r"^[a-z0-9._/-]+$"),
            "a lower-case repository path",
        ),
        username=r.string("poller.image.username", m.get("username", "ci")),
        password=secret("registryPassword"),
        platforms=tuple(platforms),
    )


def _check_plaintext_credentials(r: _Reader) -> None:
    for key in r.source.keys():  # noqa: SIM118 (a ConfigSource, not a dict)
        if r.source.is_secret(key):
            continue
        text = r.source.get(key) or ""
        if key in (*SECRET_KEYS, KUBECONFIG_KEY) or (_CREDENTIAL_KEY.search(key) and text):
            r.problems.append(
                f"{key} is a credential given in plaintext: remove it from Pulumi.{r.source.stack}.yaml and run "
                f"`pulumi config set --secret {key} <value>`"
            )
            continue
        parsed = r.raw(key)
        for path, leaf in _leaves(key, parsed):
            leaf_key = path.rsplit(".", 1)[-1].split("[", 1)[0]
            if _CREDENTIAL_KEY.search(leaf_key) and leaf not in (None, "", False):
                r.problems.append(
                    f"{path} looks like a credential given in plaintext: keep credentials only in Pulumi secrets "
                    "(`pulumi config set --secret ...`)"
                )
            elif isinstance(leaf, str) and _URL_WITH_PASSWORD.search(leaf):
                r.problems.append(
                    f"{path} holds a URL with a password (user:password@host): drop the credentials from the URL "
                    "and keep them in a Pulumi secret"
                )


def _leaves(path: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(f"{path}.{k}", v)]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(f"{path}[{i}]", v)]
    return [(path, value)]


KNOWN_KEYS = {
    "environment", "kubernetesVersion", "namespaces", "endpoints", "services", "scrape", "poller",
    "trainingJob", "grafana", "grafanaUrl", "runbookBaseUrl", "criticalDetectionSeconds", "kubeContext",
    KUBECONFIG_KEY, *SECRET_KEYS,
}  # fmt: skip


def load_settings(source: ConfigSource, secret: SecretReader) -> Settings:
    """Read and validate the whole stack config; raise `SettingsError` listing every problem."""
    r = _Reader(source)
    given = set(source.keys())
    for key in sorted(given - KNOWN_KEYS):
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS - given), n=1, cutoff=0.75)
        if close:
            # One problem for one typo: the key it was meant to be is not reported missing too.
            r.problems.append(f"{key} is not a known setting: did you mean {close[0]}?")
            r.reported.add(close[0])
        else:
            r.problems.append(f"{key} is not a known setting: expected one of {', '.join(sorted(KNOWN_KEYS))}")
    _check_plaintext_credentials(r)

    environment_value = r.required("environment")
    environment = environment_value if isinstance(environment_value, str) else ""
    if environment_value is not None and (len(environment) > 63 or not _DNS_LABEL.match(environment)):
        r.problem(
            "environment", environment_value, "a lower-case name such as dev, staging, prod or gpu-lab (it is a "
            f"label value: {DNS_LABEL_EXPECTED})",
        )  # fmt: skip
        environment = ""
    kube_version = r.required("kubernetesVersion")
    match = re.fullmatch(r"1\.([0-9]+)\.[0-9]+", str(kube_version)) if kube_version is not None else None
    if kube_version is not None and (match is None or int(match.group(1)) not in SUPPORTED_KUBERNETES_MINORS):
        first, last = SUPPORTED_KUBERNETES_MINORS[0], SUPPORTED_KUBERNETES_MINORS[-1]
        r.problem("kubernetesVersion", kube_version, f"a version 1.{first}.x to 1.{last}.x such as 1.31.0")

    ns = r.mapping("namespaces", r.required("namespaces"), {"platform", "monitoring", "training"})
    namespaces = Namespaces(*(r.dns_name(f"namespaces.{k}", ns.get(k)) for k in ("platform", "monitoring", "training")))

    ep = r.mapping("endpoints", r.required("endpoints"), {"tempoOtlpGrpc", "tempoQuery", "loki", "prometheus"})
    default_tempo = f"http://tempo.{namespaces.monitoring}.svc.cluster.local:4317"
    endpoints = Endpoints(
        tempo_otlp_grpc=r.url("endpoints.tempoOtlpGrpc", ep.get("tempoOtlpGrpc", default_tempo)),
        tempo_query=r.url("endpoints.tempoQuery", ep.get("tempoQuery")),
        loki=r.url("endpoints.loki", ep.get("loki")),
        prometheus=r.url("endpoints.prometheus", ep.get("prometheus")),
    )

    services = _services(r, r.required("services"))

    sc = r.mapping(
        "scrape",
        r.required("scrape"),
        {"mode", "intervalSeconds", "evaluationIntervalSeconds", "delivery", "objectName", "operatorSelector"},
    )
    mode = r.choice("scrape.mode", sc.get("mode"), SCRAPE_MODES)
    scrape = ScrapeSettings(
        mode=mode,
        interval_seconds=r.integer("scrape.intervalSeconds", sc.get("intervalSeconds", 15), 1, 300),
        evaluation_interval_seconds=r.integer(
            "scrape.evaluationIntervalSeconds", sc.get("evaluationIntervalSeconds", 15), 1, 300
        ),
        delivery=r.choice("scrape.delivery", sc.get("delivery", "configmap"), SCRAPE_DELIVERIES),
        object_name=r.dns_name("scrape.objectName", sc.get("objectName", "prometheus-annotation-scrape")),
        operator_selector=r.label_map("scrape.operatorSelector", sc.get("operatorSelector")),
    )
    # The promise for critical failures, within `criticalDetectionSeconds` (default 30): the rules
    # module owns the check on the evaluation interval (it derives every critical `for` from it);
    # here only the sampling half is added, since a failure waits up to one scrape interval before
    # any rule can see it.
    budget = r.integer(
        "criticalDetectionSeconds", r.raw("criticalDetectionSeconds") or DEFAULT_CRITICAL_DETECTION_SECONDS, 10, 600
    )
    try:
        detection_budget(
            ObservabilityConfig(
                scrape_interval_seconds=scrape.interval_seconds,
                evaluation_interval_seconds=scrape.evaluation_interval_seconds,
                critical_detection_seconds=budget,
            )
        )
    except ValueError as exc:
        r.problem("scrape.evaluationIntervalSeconds", scrape.evaluation_interval_seconds, f"an interval that {exc}")
    if scrape.interval_seconds > budget // 2:
        r.problem(
            "scrape.intervalSeconds",
            scrape.interval_seconds,
            f"at most {budget // 2} (half of criticalDetectionSeconds = {budget}) so a critical failure (NaN, OOM, "
            f"GPU error) is sampled in time to be detected within {budget} s; or declare a longer budget with "
            "criticalDetectionSeconds",
        )

    po = r.mapping(
        "poller",
        r.required("poller"),
        {"image", "port", "minIntervalSeconds", "nodeSelector", "tolerations", "priorityClass", "resources",
         "maxUnavailable"},
    )  # fmt: skip
    poller = PollerSettings(
        image=_poller_image(r, po.get("image"), secret),
        port=r.integer("poller.port", po.get("port", 9400), 1, 65535),
        min_interval_seconds=r.number("poller.minIntervalSeconds", po.get("minIntervalSeconds", 5), 0, 300),
        node_selector=r.label_map("poller.nodeSelector", po.get("nodeSelector", {"nvidia.com/gpu.present": "true"})),
        tolerations=_tolerations(r, "poller.tolerations", po.get("tolerations")),
        priority_class=r.dns_name("poller.priorityClass", po.get("priorityClass", "system-node-critical")),
        resources=_resources(r, "poller.resources", po.get("resources"), Resources("20m", "200m", "32Mi", "64Mi")),
        max_unavailable=r.string(
            "poller.maxUnavailable",
            str(po.get("maxUnavailable", "10%")),
            re.compile(r"^([0-9]+|[0-9]{1,2}%|100%)$"),
            "a count or a percentage such as 1 or 10%",
        ),
    )
    if not poller.node_selector:
        r.problems.append("poller.nodeSelector is empty: expected the label that marks GPU nodes")

    tj = r.mapping(
        "trainingJob",
        r.required("trainingJob"),
        {"name", "image", "modelType", "gpuCount", "backoffLimit", "ttlSecondsAfterFinished", "metricsPort",
         "nodeSelector", "tolerations", "resources"},
    )  # fmt: skip
    training_job = TrainingJobSettings(
        name=r.dns_name("trainingJob.name", tj.get("name", "training-job-template")),
        image=r.string("trainingJob.image", tj.get("image"), _DIGEST_REF, DIGEST_EXPECTED),
        model_type=r.model_type("trainingJob.modelType", tj.get("modelType")),
        gpu_count=r.integer("trainingJob.gpuCount", tj.get("gpuCount", 1), 1, 16),
        backoff_limit=r.integer("trainingJob.backoffLimit", tj.get("backoffLimit", 2), 0, 20),
        ttl_seconds_after_finished=r.integer(
            "trainingJob.ttlSecondsAfterFinished", tj.get("ttlSecondsAfterFinished", 86400), 0, 30 * 86400
        ),
        metrics_port=r.integer("trainingJob.metricsPort", tj.get("metricsPort", 9094), 1, 65535),
        node_selector=r.label_map(
            "trainingJob.nodeSelector", tj.get("nodeSelector", {"nvidia.com/gpu.present": "true"})
        ),
        tolerations=_tolerations(r, "trainingJob.tolerations", tj.get("tolerations")),
        resources=_resources(r, "trainingJob.resources", tj.get("resources"), Resources("2", "8", "8Gi", "32Gi")),
    )

    gr = r.mapping("grafana", r.required("grafana"), {"namespace", "folder"})
    grafana = GrafanaSettings(
        namespace=r.dns_name("grafana.namespace", gr.get("namespace", namespaces.monitoring)),
        folder=r.string("grafana.folder", gr.get("folder")),
        url=r.url("grafanaUrl", r.raw("grafanaUrl") or f"http://grafana.{namespaces.monitoring}.svc.cluster.local"),
    )
    runbook = r.url("runbookBaseUrl", r.raw("runbookBaseUrl") or ObservabilityConfig().runbook_base_url, ("https",))

    alerting = AlertingReceivers(
        page_webhook_url=secret("alertPageWebhookUrl"),
        chat_webhook_url=secret("alertChatWebhookUrl"),
        low_priority_webhook_url=secret("alertLowPriorityWebhookUrl"),
    )
    for key in ("alertPageWebhookUrl", "alertChatWebhookUrl", "alertLowPriorityWebhookUrl"):
        if source.get(key) is None:
            r.problems.append(f"{key} is missing: set it with `pulumi config set --secret {key} https://...`")
    if isinstance(poller.image, ImageBuild) and source.get("registryPassword") is None:
        r.problems.append(
            "registryPassword is missing: the poller image is built and pushed, so set it with "
            "`pulumi config set --secret registryPassword <token>` (or pin poller.image.digest instead)"
        )

    kube_context = r.raw("kubeContext")
    if kube_context is not None:
        kube_context = r.string("kubeContext", kube_context, re.compile(r"^\S+$"), "a kubeconfig context name")
    has_kubeconfig = source.get(KUBECONFIG_KEY) is not None
    if has_kubeconfig and not source.is_secret(KUBECONFIG_KEY):
        pass  # reported by the plaintext-credential check
    elif not kube_context and not has_kubeconfig:
        r.problems.append(
            "kubeContext is missing: name the kubeconfig context this stack deploys to (`pulumi config set "
            "kubeContext <context>`), or give the stack its own kubeconfig as a secret (`pulumi config set --secret "
            'kubeconfig "$(cat kubeconfig)"`)'
        )

    if r.problems:
        raise SettingsError(source.stack, r.problems)
    assert isinstance(kube_version, str)
    return Settings(
        project=PROJECT,
        stack=source.stack,
        environment=environment,
        kubernetes_version=kube_version,
        namespaces=namespaces,
        endpoints=endpoints,
        services=services,
        scrape=scrape,
        poller=poller,
        training_job=training_job,
        grafana=grafana,
        alerting=alerting,
        runbook_base_url=runbook,
        critical_detection_seconds=budget,
        kubernetes=KubernetesTarget(
            context=kube_context or None, kubeconfig=secret(KUBECONFIG_KEY) if has_kubeconfig else None
        ),
        common_labels={
            "app.kubernetes.io/part-of": PROJECT,
            "app.kubernetes.io/managed-by": "pulumi",
            "foxhunt.io/environment": environment,
        },
    )


# ------------------------------------------------------------------------------------------------
# Sources: Pulumi's runtime config, and plain dicts (tests, offline render)
# ------------------------------------------------------------------------------------------------


@dataclass
class DictConfigSource:
    """Config as `{key: string}` without the project prefix, plus the set of secret keys."""

    stack: str
    values: Mapping[str, str]
    secret_keys: frozenset[str] = frozenset()

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def is_secret(self, key: str) -> bool:
        return key in self.secret_keys

    def keys(self) -> Sequence[str]:
        return sorted(self.values)


def pulumi_config_source() -> ConfigSource:
    """The running Pulumi program's config (real engine or mock engine)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    prefix = f"{PROJECT}:"
    env = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    values = {k[len(prefix) :]: str(v) for k, v in env.items() if k.startswith(prefix)}
    secret_keys = frozenset(k for k in values if runtime_config.is_config_secret(prefix + k))
    return DictConfigSource(pulumi.get_stack(), values, secret_keys)


def pulumi_secret_reader() -> Callable[[str], SecretValue]:
    import pulumi

    config = pulumi.Config(PROJECT)

    def read(key: str) -> SecretValue:
        return config.get_secret(key)

    return read
