"""The registry of stack settings: one parser per top-level section of the stack config
(`namespaces`, `services`, `scrape`, `poller`, `trainingJob`, ...), registered with `@setting`
under the config keys it reads and the field(s) it fills: a field of `Settings` or of the
`ObservabilityConfig` the settings hold. Each parser reads its section through a `Reader`, records
every problem it finds and returns the typed value (with fallbacks where a value is bad).

A new setting is its parser here, registered with `@setting("configKey", into="field")`, plus its
field (in `ObservabilityConfig` when a generator reads it, else in `Settings`): the known keys,
the loading and the construction of both objects follow from the registry. Parsers run in the
order they are defined; one that needs an earlier result reads it from `s` (`s.namespaces`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from foxhunt_trainer.trainer_env import REMEDIATION_MAX_ROLLBACKS_LIMIT as MAX_ROLLBACKS_LIMIT
from foxhunt_trainer.trainer_env import RUN_COMMAND, TORCHRUN_COMMAND
from infra.settings.reading import DNS_LABEL, DNS_LABEL_EXPECTED, Reader, SecretReader
from infra.settings.typed import (
    DEFAULT_CRITICAL_DETECTION_SECONDS,
    DIGEST_EXPECTED,
    KUBECONFIG_KEY,
    RECEIVER_KEYS,
    SCRAPE_CREDENTIAL_KEY,
    SCRAPE_CREDENTIALS_SECRET,
    SCRAPE_DELIVERIES,
    SCRAPE_MODES,
    SUPPORTED_KUBERNETES_MINORS,
    AlertingReceivers,
    Endpoints,
    GrafanaSettings,
    ImageBuild,
    KubernetesTarget,
    Namespaces,
    PinnedImage,
    PollerSettings,
    PrometheusSettings,
    RemediationSettings,
    Resources,
    ScrapeSettings,
    ServiceSettings,
    Settings,
    Toleration,
    TrainingJobSettings,
)
from observability.alertmanager import CHAT, HEARTBEAT, LOW_PRIORITY, PAGE, RECEIVERS, receiver_kind
from observability.config import (
    MIG_COSTS,
    PAGERDUTY,
    RECEIVER_KINDS,
    SEVERITY_NAMES,
    SLACK,
    WEBHOOK,
    Notifications,
    ObservabilityConfig,
    RemoteWrite,
    ScrapeSecurity,
)
from observability.prometheus_config import (
    DEFAULT_REPLICA_LABEL,
    MAX_REPLICAS,
    PROMETHEUS_NAME,
    REMOTE_WRITE_PATH,
    TAKEN_LABELS,
    alertmanager_peer_addresses,
    prometheus_peer_addresses,
)
from observability.rules.detection import detection_budget
from observability.scrape_config import MAX_SHARDS

_SLACK_CHANNEL = re.compile(r"^[#@][a-z0-9._-]{1,80}$")
_DIGEST_REF = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")

# Fields a stack fills in `Settings` or its `ObservabilityConfig`; the rest are fixed by the loader
# (project, stack, the config itself, the common labels) or keep the config's defaults.
CONFIG_FIELDS = frozenset(f.name for f in fields(ObservabilityConfig))
SETTINGS_FIELDS = frozenset(f.name for f in fields(Settings)) - {"project", "stack", "observability", "common_labels"}


class Parsed:
    """What the parsers before this one returned, by field (`s.namespaces`), and the secret reader."""

    def __init__(self, secret: SecretReader) -> None:
        self.secret = secret
        self.values: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(f"setting field {name} is not parsed yet: register its parser earlier") from None


Parser = Callable[[Reader, Parsed], Any]
P = TypeVar("P", bound=Parser)


@dataclass(frozen=True)
class Setting:
    """One registered parser: the top-level config keys it reads and the fields its result fills
    (with more than one field, the parser returns one value per field, in order)."""

    keys: tuple[str, ...]
    into: tuple[str, ...]
    parse: Parser


SETTINGS: list[Setting] = []


def setting(*keys: str, into: str | tuple[str, ...]) -> Callable[[P], P]:
    """Register the decorated parser for config `keys`, filling field(s) `into`."""
    targets = (into,) if isinstance(into, str) else into

    def register(parse: P) -> P:
        for name in targets:
            if name not in CONFIG_FIELDS | SETTINGS_FIELDS:
                raise TypeError(f"{parse.__name__}: {name} is a field of neither Settings nor ObservabilityConfig")
            if any(name in other.into for other in SETTINGS):
                raise TypeError(f"{parse.__name__}: {name} is filled by another setting already")
        SETTINGS.append(Setting(keys, targets, parse))
        return parse

    return register


@setting("environment", into="environment")
def environment(r: Reader, s: Parsed) -> str:
    """Any lower-case name (a new stack brings its own); it becomes a label value, so it is checked
    as one."""
    value = r.required("environment")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 63 or not DNS_LABEL.match(value):
        r.problem(
            "environment", value, "a lower-case name such as dev, staging, prod or gpu-lab (it is a label value: "
            f"{DNS_LABEL_EXPECTED})",
        )  # fmt: skip
        return ""
    return value


@setting("kubernetesVersion", into="kubernetes_version")
def kubernetes_version(r: Reader, s: Parsed) -> str:
    version = r.required("kubernetesVersion")
    match = re.fullmatch(r"1\.([0-9]+)\.[0-9]+", str(version)) if version is not None else None
    if version is not None and (match is None or int(match.group(1)) not in SUPPORTED_KUBERNETES_MINORS):
        first, last = SUPPORTED_KUBERNETES_MINORS[0], SUPPORTED_KUBERNETES_MINORS[-1]
        r.problem("kubernetesVersion", version, f"a version 1.{first}.x to 1.{last}.x such as 1.31.0")
    return version if isinstance(version, str) else ""


@setting("namespaces", into="namespaces")
def namespaces(r: Reader, s: Parsed) -> Namespaces:
    ns = r.mapping("namespaces", r.required("namespaces"), {"platform", "monitoring", "training"})
    return Namespaces(*(r.dns_name(f"namespaces.{k}", ns.get(k)) for k in ("platform", "monitoring", "training")))


@setting("endpoints", into="endpoints")
def endpoints(r: Reader, s: Parsed) -> Endpoints:
    ns: Namespaces = s.namespaces
    ep = r.mapping("endpoints", r.required("endpoints"), {"tempoOtlpGrpc", "tempoQuery", "loki", "prometheus"})
    default_tempo = f"http://tempo.{ns.monitoring}.svc.cluster.local:4317"
    return Endpoints(
        tempo_otlp_grpc=r.url("endpoints.tempoOtlpGrpc", ep.get("tempoOtlpGrpc", default_tempo)),
        tempo_query=r.url("endpoints.tempoQuery", ep.get("tempoQuery")),
        loki=r.url("endpoints.loki", ep.get("loki")),
        prometheus=r.url("endpoints.prometheus", ep.get("prometheus")),
    )


@setting("services", into=("services", "platform_services"))
def services(r: Reader, s: Parsed) -> tuple[tuple[ServiceSettings, ...], tuple[str, ...]]:
    """The platform services, and their names (the services the infra cockpit shows)."""
    value = r.required("services")
    if not isinstance(value, list) or not value:
        r.problem("services", value, "a non-empty list of {name, container, port, path} objects")
        return (), ()
    out = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        # Name the service in every message when it has a usable name: services['feature-store'].port
        given = item.get("name") if isinstance(item, dict) else None
        named = isinstance(given, str) and bool(DNS_LABEL.match(given)) and given not in seen
        k = f"services[{given!r}]" if named else f"services[{i}]"
        m = r.mapping(k, item, {"name", "container", "port", "path", "modelType"})
        name = r.dns_name(f"{k}.name", m.get("name"))
        if name and name in seen:
            r.problem(f"{k}.name", name, "a unique service name (it is listed twice)")
        seen.add(name)
        path = m.get("path", "/metrics")
        out.append(
            ServiceSettings(
                name=name,
                container=r.dns_name(f"{k}.container", m.get("container", name)),
                port=r.integer(f"{k}.port", m.get("port"), 1, 65535),
                path=r.string(f"{k}.path", path, re.compile(r"^/[\x21-\x7e]*$"), "an HTTP path starting with '/'"),
                model_type=r.model_type(f"{k}.modelType", m.get("modelType", "none")),
            )
        )
    return tuple(out), tuple(service.name for service in out)


@setting("criticalDetectionSeconds", into="critical_detection_seconds")
def critical_detection_seconds(r: Reader, s: Parsed) -> int:
    """The detection budget of critical failures (default 30 s); a slower stack declares its own."""
    value = r.raw("criticalDetectionSeconds")
    return r.integer(
        "criticalDetectionSeconds", DEFAULT_CRITICAL_DETECTION_SECONDS if value is None else value, 10, 600
    )


@setting(
    "scrape",
    into=(
        "scrape",
        "scrape_interval_seconds",
        "evaluation_interval_seconds",
        "critical_scrape_interval_seconds",
        "critical_evaluation_interval_seconds",
    ),
)
def scrape(r: Reader, s: Parsed) -> tuple[ScrapeSettings, int, int, int, int]:
    """Discovery and delivery, the scrape and rule evaluation intervals, and the critical intervals
    (the critical alerts' sources and the groups holding those alerts; the config's)."""
    budget: int = s.critical_detection_seconds
    sc = r.mapping(
        "scrape",
        r.required("scrape"),
        {"mode", "intervalSeconds", "evaluationIntervalSeconds", "criticalIntervalSeconds",
         "criticalEvaluationIntervalSeconds", "delivery", "objectName", "operatorSelector", "prometheusPods"},
    )  # fmt: skip
    mode = r.choice("scrape.mode", sc.get("mode"), SCRAPE_MODES)
    example = ObservabilityConfig()
    interval = r.integer("scrape.intervalSeconds", sc.get("intervalSeconds", 15), 1, 300)
    evaluation = r.integer("scrape.evaluationIntervalSeconds", sc.get("evaluationIntervalSeconds", 15), 1, 300)
    critical = r.integer(
        "scrape.criticalIntervalSeconds", sc.get("criticalIntervalSeconds", example.critical_scrape_interval_seconds),
        1, 300,
    )  # fmt: skip
    critical_evaluation = r.integer(
        "scrape.criticalEvaluationIntervalSeconds",
        sc.get("criticalEvaluationIntervalSeconds", example.critical_evaluation_interval_seconds), 1, 300,
    )  # fmt: skip
    settings = ScrapeSettings(
        mode=mode,
        delivery=r.choice("scrape.delivery", sc.get("delivery", "configmap"), SCRAPE_DELIVERIES),
        object_name=r.dns_name("scrape.objectName", sc.get("objectName", "prometheus-annotation-scrape")),
        operator_selector=r.label_map("scrape.operatorSelector", sc.get("operatorSelector")),
        **prometheus_pods(r, sc.get("prometheusPods"), s.namespaces),
    )
    # The promise for critical failures, within `criticalDetectionSeconds` (default 30) of the
    # failure: the rules module owns the check (it derives every critical `for` from the intervals).
    try:
        detection_budget(
            ObservabilityConfig(
                scrape_interval_seconds=interval,
                evaluation_interval_seconds=evaluation,
                critical_scrape_interval_seconds=critical,
                critical_evaluation_interval_seconds=critical_evaluation,
                critical_detection_seconds=budget,
            )
        )
    except ValueError as exc:
        r.problem(
            "scrape.criticalIntervalSeconds", critical, f"intervals with which critical failures page in time: {exc}"
        )
    return settings, interval, evaluation, critical, critical_evaluation


def prometheus_pods(r: Reader, value: Any, ns: Namespaces) -> dict[str, Any]:
    """`scrape.prometheusPods`: the namespace (default: monitoring) and pod labels of the stack's
    Prometheus servers, the only peers the NetworkPolicies admit to a metrics port."""
    pp = r.mapping("scrape.prometheusPods", value, {"namespace", "podSelector"})
    selector = r.label_map(
        "scrape.prometheusPods.podSelector", pp.get("podSelector", {"app.kubernetes.io/name": "prometheus"})
    )
    if not selector:
        r.problems.append(
            "scrape.prometheusPods.podSelector is empty: expected the labels of the Prometheus pods "
            "(an empty selector would admit every pod of the namespace to the metrics ports)"
        )
    return {
        "prometheus_namespace": r.dns_name("scrape.prometheusPods.namespace", pp.get("namespace", ns.monitoring)),
        "prometheus_pod_selector": selector,
    }


def tolerations(r: Reader, key: str, value: Any) -> tuple[Toleration, ...]:
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


def resources(r: Reader, key: str, value: Any, default: Resources) -> Resources:
    m = r.mapping(key, value, {"cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"})
    return Resources(
        cpu_request=r.quantity(f"{key}.cpuRequest", m.get("cpuRequest", default.cpu_request)),
        cpu_limit=r.quantity(f"{key}.cpuLimit", m.get("cpuLimit", default.cpu_limit)),
        memory_request=r.quantity(f"{key}.memoryRequest", m.get("memoryRequest", default.memory_request)),
        memory_limit=r.quantity(f"{key}.memoryLimit", m.get("memoryLimit", default.memory_limit)),
    )


def poller_image(r: Reader, value: Any, secret: SecretReader) -> ImageBuild | PinnedImage:
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


@setting("poller", "registryPassword", into="poller")
def poller(r: Reader, s: Parsed) -> PollerSettings:
    """The GPU poller DaemonSet; a built image needs `registryPassword` (a Pulumi secret)."""
    secret: SecretReader = s.secret
    po = r.mapping(
        "poller",
        r.required("poller"),
        {"image", "port", "minIntervalSeconds", "nodeSelector", "tolerations", "priorityClass", "resources",
         "maxUnavailable"},
    )  # fmt: skip
    settings = PollerSettings(
        image=poller_image(r, po.get("image"), secret),
        port=r.integer("poller.port", po.get("port", 9400), 1, 65535),
        min_interval_seconds=r.number("poller.minIntervalSeconds", po.get("minIntervalSeconds", 5), 0, 300),
        node_selector=r.label_map("poller.nodeSelector", po.get("nodeSelector", {"nvidia.com/gpu.present": "true"})),
        tolerations=tolerations(r, "poller.tolerations", po.get("tolerations")),
        priority_class=r.dns_name("poller.priorityClass", po.get("priorityClass", "system-node-critical")),
        resources=resources(r, "poller.resources", po.get("resources"), Resources("20m", "200m", "32Mi", "64Mi")),
        max_unavailable=r.string(
            "poller.maxUnavailable",
            str(po.get("maxUnavailable", "10%")),
            re.compile(r"^([0-9]+|[0-9]{1,2}%|100%)$"),
            "a count or a percentage such as 1 or 10%",
        ),
    )
    if not settings.node_selector:
        r.problems.append("poller.nodeSelector is empty: expected the label that marks GPU nodes")
    critical: int = s.critical_scrape_interval_seconds
    if settings.min_interval_seconds > critical - 1:
        # A scrape within min_interval of the last pass gets that pass: the GPU data could be one
        # scrape interval older than the detection budget allows for.
        r.problem(
            "poller.minIntervalSeconds",
            f"{settings.min_interval_seconds:g}",
            f"at most {critical - 1} (scrape.criticalIntervalSeconds - 1), so that every scrape of the poller "
            "gets a fresh NVML pass and a GPU failure is seen at the next scrape",
        )
    if isinstance(settings.image, ImageBuild) and r.source.get("registryPassword") is None:
        r.problems.append(
            "registryPassword is missing: the poller image is built and pushed, so set it with "
            "`pulumi config set --secret registryPassword <token>` (or pin poller.image.digest instead)"
        )
    return settings


@setting("trainingJob", into="training_job")
def training_job(r: Reader, s: Parsed) -> TrainingJobSettings:
    tj = r.mapping(
        "trainingJob",
        r.required("trainingJob"),
        {"name", "image", "modelType", "gpuCount", "backoffLimit", "ttlSecondsAfterFinished", "metricsPort",
         "nodeSelector", "tolerations", "resources", "nodes", "command", "program", "autolog", "remediation"},
    )  # fmt: skip
    nodes = r.integer("trainingJob.nodes", tj.get("nodes", 1), 1, MAX_TRAINING_NODES)
    command = training_command(r, tj.get("command"))
    if nodes > 1 and not command:
        r.problem(
            "trainingJob.command", tj.get("command"),
            f"the program torchrun starts on each of the {nodes} nodes, as a list such as "
            "['-m', 'train', '--config', '/etc/train.yaml'] (trainingJob.nodes > 1 launches torchrun)",
        )  # fmt: skip
    autolog = r.boolean("trainingJob.autolog", tj.get("autolog", True))
    program = training_program(r, tj.get("program"), command, autolog)
    return TrainingJobSettings(
        name=r.dns_name("trainingJob.name", tj.get("name", "training-job-template")),
        image=r.string("trainingJob.image", tj.get("image"), _DIGEST_REF, DIGEST_EXPECTED),
        model_type=r.model_type("trainingJob.modelType", tj.get("modelType")),
        gpu_count=r.integer("trainingJob.gpuCount", tj.get("gpuCount", 1), 1, 16),
        backoff_limit=r.integer("trainingJob.backoffLimit", tj.get("backoffLimit", 2), 0, MAX_BACKOFF_LIMIT),
        ttl_seconds_after_finished=r.integer(
            "trainingJob.ttlSecondsAfterFinished", tj.get("ttlSecondsAfterFinished", 86400), 0, 30 * 86400
        ),
        metrics_port=r.integer("trainingJob.metricsPort", tj.get("metricsPort", 9094), 1, 65535),
        node_selector=r.label_map(
            "trainingJob.nodeSelector", tj.get("nodeSelector", {"nvidia.com/gpu.present": "true"})
        ),
        tolerations=tolerations(r, "trainingJob.tolerations", tj.get("tolerations")),
        resources=resources(r, "trainingJob.resources", tj.get("resources"), Resources("2", "8", "8Gi", "32Gi")),
        nodes=nodes,
        command=command,
        program=program,
        autolog=autolog,
        remediation=remediation(r, tj.get("remediation")),
    )


# Retries of a failed training pod: more only repeat a failure a restart does not fix.
MAX_BACKOFF_LIMIT = 10


def remediation(r: Reader, value: Any) -> RemediationSettings:
    """`trainingJob.remediation`: {enabled, maxRollbacks (0 to MAX_ROLLBACKS_LIMIT), lrFactor (0-1)}."""
    if value is None:
        return RemediationSettings()
    m = r.mapping("trainingJob.remediation", value, {"enabled", "maxRollbacks", "lrFactor"})
    default = RemediationSettings()
    enabled = r.boolean("trainingJob.remediation.enabled", m.get("enabled", default.enabled))
    factor = r.number("trainingJob.remediation.lrFactor", m.get("lrFactor", default.lr_factor), 0, 1)
    if factor >= 1:
        r.problem("trainingJob.remediation.lrFactor", factor, "a factor below 1 (it lowers the learning rate)")
    return RemediationSettings(
        enabled=enabled,
        max_rollbacks=r.integer(
            "trainingJob.remediation.maxRollbacks", m.get("maxRollbacks", default.max_rollbacks), 0, MAX_ROLLBACKS_LIMIT
        ),
        lr_factor=factor,
    )


# Pods of one multi-node job: a bound for the settings check, far above what the platform runs.
MAX_TRAINING_NODES = 256


def training_command(r: Reader, value: Any) -> tuple[str, ...]:
    """`trainingJob.command`: a list of non-empty strings (torchrun's training script and its
    arguments); absent or empty: no torchrun."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        r.problem("trainingJob.command", value, "a list of non-empty strings, such as ['-m', 'train']")
        return ()
    if value and value[0].startswith("--"):
        r.problem(
            "trainingJob.command", value,
            "the training script or `-m module` first: torchrun's own options come from the template",
        )  # fmt: skip
        return ()
    return tuple(value)


def training_program(r: Reader, value: Any, command: tuple[str, ...], autolog: bool) -> tuple[str, ...]:
    """`trainingJob.program`: the command line of a single-process job (its executable first, such as
    ['python', '-m', 'train']), which the template runs through `foxhunt-run` while autolog is on.
    Required then unless torchrun runs (`command`): the image's own entrypoint cannot be wrapped."""
    if value is None:
        if autolog and not command:
            r.problem(
                "trainingJob.program", value,
                "the command line the training image runs, such as ['python', '-m', 'train'] (the template runs "
                "it through foxhunt-run, the image's own entrypoint cannot be wrapped), or trainingJob.autolog: "
                "false to run the image's entrypoint as it is",
            )  # fmt: skip
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(a, str) and a for a in value):
        r.problem("trainingJob.program", value, "a list of non-empty strings, such as ['python', '-m', 'train']")
        return ()
    if command:
        r.problem(
            "trainingJob.program", value,
            "no program while trainingJob.command is set (torchrun starts the command on every GPU; program is "
            "the command line of a job without torchrun)",
        )  # fmt: skip
        return ()
    if value[0].rsplit("/", 1)[-1] in (RUN_COMMAND, TORCHRUN_COMMAND):
        r.problem(
            "trainingJob.program", value,
            "the training program itself, such as ['python', '-m', 'train']: the template adds foxhunt-run "
            "(trainingJob.autolog)",
        )  # fmt: skip
        return ()
    return tuple(value)


@setting("grafana", "grafanaUrl", into=("grafana", "grafana_folder", "grafana_url"))
def grafana(r: Reader, s: Parsed) -> tuple[GrafanaSettings, str, str]:
    """Where Grafana runs and is opened (notifications link dashboards under it), and the dashboards'
    folder (the config's)."""
    ns: Namespaces = s.namespaces
    gr = r.mapping("grafana", r.required("grafana"), {"namespace", "folder"})
    settings = GrafanaSettings(
        namespace=r.dns_name("grafana.namespace", gr.get("namespace", ns.monitoring)),
        url=r.url("grafanaUrl", r.raw("grafanaUrl") or f"http://grafana.{ns.monitoring}.svc.cluster.local"),
    )
    return settings, r.string("grafana.folder", gr.get("folder")), settings.url


@setting("runbookBaseUrl", into="runbook_base_url")
def runbook_base_url(r: Reader, s: Parsed) -> str:
    return r.url("runbookBaseUrl", r.raw("runbookBaseUrl") or ObservabilityConfig().runbook_base_url, ("https",))


# Which receiver key each receiver kind needs (the webhooks: one per receiver, see below).
_KIND_KEYS = {SLACK: "alertSlackApiUrl", PAGERDUTY: "alertPagerDutyRoutingKey"}
_WEBHOOK_KEYS = {
    PAGE: "alertPageWebhookUrl",
    CHAT: "alertChatWebhookUrl",
    LOW_PRIORITY: "alertLowPriorityWebhookUrl",
    HEARTBEAT: "alertHeartbeatUrl",
}


@setting("alertNotifications", into="notifications")
def notifications(r: Reader, s: Parsed) -> Notifications:
    """Per severity `pagerduty`, `slack` or `webhook` (default: webhook), and `slackChannels` per
    severity sent to Slack (`#channel`)."""
    value = r.raw("alertNotifications")
    if value is None:
        return Notifications()
    before = len(r.problems)
    m = r.mapping("alertNotifications", value, {*SEVERITY_NAMES, "slackChannels"})
    kinds = {sev: r.choice(f"alertNotifications.{sev}", m.get(sev, WEBHOOK), RECEIVER_KINDS) for sev in SEVERITY_NAMES}
    raw_channels = m.get("slackChannels") or {}
    channels = r.mapping("alertNotifications.slackChannels", raw_channels, set(SEVERITY_NAMES))
    slack_channels = []
    for sev in SEVERITY_NAMES:
        if kinds[sev] != SLACK:
            if sev in channels:
                r.problem(
                    f"alertNotifications.slackChannels.{sev}", channels[sev], f"no channel: {sev} is not sent to Slack"
                )
            continue
        channel = r.string(
            f"alertNotifications.slackChannels.{sev}",
            channels.get(sev),
            _SLACK_CHANNEL,
            "a channel such as '#ml-alerts'",
        )
        slack_channels.append((sev, channel))
    if len(r.problems) > before:
        return Notifications()
    try:
        chosen = Notifications(**kinds, slack_channels=tuple(slack_channels))
        for receiver in RECEIVERS:
            receiver_kind(ObservabilityConfig(notifications=chosen), receiver)
    except ValueError as exc:
        r.problems.append(f"alertNotifications: {exc}")
        return Notifications()
    return chosen


@setting(*RECEIVER_KEYS, into="alerting")
def alerting(r: Reader, s: Parsed) -> AlertingReceivers:
    """The receivers' credentials (Pulumi secrets): those of the kinds the notifications use."""
    cfg = ObservabilityConfig(notifications=s.notifications)
    needed: dict[str, str] = {}
    for receiver in RECEIVERS:
        kind = receiver_kind(cfg, receiver)
        key = _WEBHOOK_KEYS[receiver] if kind == WEBHOOK else _KIND_KEYS[kind]
        needed.setdefault(key, f"the {receiver} receiver ({kind})")
    for key, why in needed.items():
        if r.source.get(key) is None:
            example = "<integration key>" if key == _KIND_KEYS[PAGERDUTY] else "https://..."
            r.problems.append(f"{key} is missing for {why}: set it with `pulumi config set --secret {key} {example}`")
    return AlertingReceivers(*(s.secret(key) if key in needed else None for key in RECEIVER_KEYS))


@setting("kubeContext", KUBECONFIG_KEY, into="kubernetes")
def kubernetes_target(r: Reader, s: Parsed) -> KubernetesTarget:
    """`kubeContext` (a context of the ambient kubeconfig) and/or a `kubeconfig` Pulumi secret."""
    context = r.raw("kubeContext")
    if context is not None:
        context = r.string("kubeContext", context, re.compile(r"^\S+$"), "a kubeconfig context name")
    has_kubeconfig = r.source.get(KUBECONFIG_KEY) is not None
    if not context and not has_kubeconfig:
        r.problems.append(
            "kubeContext is missing: name the kubeconfig context this stack deploys to (`pulumi config set "
            "kubeContext <context>`), or give the stack its own kubeconfig as a secret (`pulumi config set --secret "
            'kubeconfig "$(cat kubeconfig)"`)'
        )
    return KubernetesTarget(context=context or None, kubeconfig=s.secret(KUBECONFIG_KEY) if has_kubeconfig else None)


@setting(
    "cluster",
    "prometheus",
    into=(
        "prometheus", "shards", "cluster", "clusters", "remote_write", "prometheus_replicas", "replica_label",
        "prometheus_peers",
    ),
)  # fmt: skip
def prometheus(
    r: Reader, s: Parsed
) -> tuple[PrometheusSettings, int, str, tuple[str, ...], RemoteWrite, int, str, tuple[str, ...]]:
    """`cluster` (the external label; default `foxhunt-<environment>`) and `prometheus.shards`,
    `prometheus.clusters`, `prometheus.remoteWriteUrl` (default: the remote-write receiver of the
    Prometheus at `endpoints.prometheus`, the global tier), `prometheus.remoteWrite` (`all` or
    `aggregates`: what the shards write there), `prometheus.replicas` (Prometheus replicas per shard)
    and `prometheus.replicaLabel` (the external label telling them apart) (docs/scaling.md). With one
    shard and replicas, the replicas' addresses (kube-prometheus' `prometheus-k8s-<i>` pods behind
    `prometheus-operated` in the monitoring namespace), which each replica scrapes to watch the others."""
    namespaces: Namespaces = s.namespaces
    environment_name: str = s.environment
    ep: Endpoints = s.endpoints
    cluster = r.dns_name("cluster", r.raw("cluster") or f"foxhunt-{environment_name or 'dev'}")
    pr = r.mapping(
        "prometheus",
        r.raw("prometheus"),
        {"shards", "clusters", "remoteWriteUrl", "remoteWrite", "replicas", "replicaLabel"},
    )
    mode = RemoteWrite(r.choice("prometheus.remoteWrite", pr.get("remoteWrite", "all"), [m.value for m in RemoteWrite]))
    shards = r.integer("prometheus.shards", pr.get("shards", 1), 1, MAX_SHARDS)
    replicas = r.integer("prometheus.replicas", pr.get("replicas", 1), 1, MAX_REPLICAS)
    replica_label = _replica_label(r, pr.get("replicaLabel", DEFAULT_REPLICA_LABEL))
    pair = shards == 1 and replicas > 1
    peers = prometheus_peer_addresses(PROMETHEUS_NAME, namespaces.monitoring, replicas) if pair else ()
    default_write = f"{ep.prometheus.rstrip('/')}{REMOTE_WRITE_PATH}" if ep.prometheus else ""
    given = pr.get("remoteWriteUrl")
    remote_write = r.url("prometheus.remoteWriteUrl", given) if given is not None else default_write
    listed = pr.get("clusters", [cluster])
    if not isinstance(listed, list) or not listed:
        r.problem("prometheus.clusters", listed, "a non-empty list of cluster names (DNS-1123 labels)")
        return PrometheusSettings(remote_write), shards, cluster, (cluster,), mode, replicas, replica_label, peers
    clusters = tuple(r.dns_name(f"prometheus.clusters[{i}]", name) for i, name in enumerate(listed))
    if len(set(clusters)) != len(clusters):
        r.problem("prometheus.clusters", listed, "each cluster once")
    if cluster and cluster not in clusters:
        r.problem("prometheus.clusters", listed, f"a list that includes this stack's cluster {cluster!r}")
    return PrometheusSettings(remote_write), shards, cluster, clusters, mode, replicas, replica_label, peers


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _replica_label(r: Reader, value: Any) -> str:
    """A Prometheus label name no series of the fleet carries (not reserved, not a target's label)."""
    name = r.string("prometheus.replicaLabel", value, _LABEL_NAME, "a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    if not name:
        return DEFAULT_REPLICA_LABEL
    taken = sorted(TAKEN_LABELS)
    if name.startswith("__") or name in TAKEN_LABELS:
        r.problem(
            "prometheus.replicaLabel",
            value,
            f"a label name of its own (not starting with __ and not one of {', '.join(taken)}, which series carry)",
        )
        return DEFAULT_REPLICA_LABEL
    return name


@setting("alertmanager", into=("alertmanager_replicas", "alertmanager_peers"))
def alertmanager(r: Reader, s: Parsed) -> tuple[int, tuple[str, ...]]:
    """`alertmanager.replicas` (peers of one gossip cluster, default 1), `alertmanager.name` (the
    operator's Alertmanager resource, default `main`: peers `alertmanager-<name>-<i>` behind the
    `alertmanager-operated` Service in the monitoring namespace) or `alertmanager.peers` (each
    peer's `host:port`, one per replica): every Prometheus sends to every peer (docs/scaling.md)."""
    namespaces: Namespaces = s.namespaces
    am = r.mapping("alertmanager", r.raw("alertmanager"), {"replicas", "name", "peers"})
    replicas = r.integer("alertmanager.replicas", am.get("replicas", 1), 1, MAX_REPLICAS)
    name = r.dns_name("alertmanager.name", am.get("name", "main"))
    given = am.get("peers")
    if given is None:
        return replicas, alertmanager_peer_addresses(name, namespaces.monitoring, replicas)
    if not isinstance(given, list) or len(given) != replicas:
        r.problem("alertmanager.peers", given, f"a list of {replicas} host:port addresses, one per replica")
        return replicas, ()
    peers = tuple(r.string(f"alertmanager.peers[{i}]", p, _HOST_PORT, "host:port") for i, p in enumerate(given))
    if len(set(peers)) != len(peers):
        r.problem("alertmanager.peers", given, "each peer once")
    return replicas, peers


_HOST_PORT = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?:[0-9]{1,5}$")


_CURRENCY = re.compile(r"^[A-Z]{3}$")
GPU_HOURLY_COST_DEFAULT = "default"


def _price(r: Reader, key: str, value: Any) -> float:
    """A price: a number of at least 0 (JSON numbers only: a quoted "2.5" is a typo worth naming)."""
    # An int too large for a float (a YAML 1e400 written out) is no price either.
    number = float(value) if isinstance(value, float) or (isinstance(value, int) and abs(value) < 2**1023) else None
    if isinstance(value, bool) or number is None or not number >= 0 or number == float("inf"):
        r.problem(key, value, "a price: a finite number of at least 0")
        return 0.0
    return number


Prices = tuple[tuple[tuple[str, float], ...], float, float, str]


@setting(
    "gpuHourlyCost", "energyPricePerKWh", "currency",
    into=("gpu_hourly_cost", "gpu_hourly_cost_default", "energy_price_per_kwh", "currency"),
)  # fmt: skip
def cost(r: Reader, s: Parsed) -> Prices:
    """`gpuHourlyCost` (price per GPU-hour by NVML product name, `gpu_name`, with a `default` for
    every other GPU), `energyPricePerKWh` and `currency` (ISO 4217): the prices of the cost
    estimates. All three or none (then ObservabilityConfig's example prices apply)."""
    given = {k: r.raw(k) for k in ("gpuHourlyCost", "energyPricePerKWh", "currency")}
    if all(v is None for v in given.values()):
        example = ObservabilityConfig()
        return example.gpu_hourly_cost, example.gpu_hourly_cost_default, example.energy_price_per_kwh, example.currency
    for key, value in given.items():
        if value is None:
            r.problems.append(f"{key} is missing: gpuHourlyCost, energyPricePerKWh and currency are set together")
    table = r.mapping("gpuHourlyCost", given["gpuHourlyCost"])
    if given["gpuHourlyCost"] is not None and GPU_HOURLY_COST_DEFAULT not in table:
        r.problem(
            "gpuHourlyCost",
            given["gpuHourlyCost"],
            'a mapping of GPU names (as NVML reports them, e.g. "NVIDIA H100 80GB HBM3") to prices per GPU-hour, '
            "with a `default` for every other GPU",
        )
    prices = {str(name): _price(r, f"gpuHourlyCost.{name}", value) for name, value in table.items()}
    for name in prices:
        if not name.strip():
            r.problem("gpuHourlyCost", name, "GPU names that are not empty")
    energy = (
        _price(r, "energyPricePerKWh", given["energyPricePerKWh"]) if given["energyPricePerKWh"] is not None else 0.0
    )
    currency = given["currency"]
    if currency is not None and not (isinstance(currency, str) and _CURRENCY.match(currency)):
        r.problem("currency", currency, "an ISO 4217 currency code such as USD or EUR")
    listed = tuple(sorted((k, v) for k, v in prices.items() if k != GPU_HOURLY_COST_DEFAULT))
    return listed, prices.get(GPU_HOURLY_COST_DEFAULT, 0.0), energy, str(currency or "")


@setting("migCost", into=("mig_cost",))
def mig_cost(r: Reader, s: Parsed) -> str:
    """`migCost`: what a job holding a MIG device pays of its GPU's price per hour: `compute_share`
    (default: the instance's share of the GPU's SMs, its profile's compute slices over 7) or
    `whole_gpu` (the price of the whole GPU: what is left of it may sit unused). A GPU shared by
    time-slicing is split evenly between the jobs holding it either way."""
    given = r.raw("migCost")
    if given is None:
        return ObservabilityConfig().mig_cost
    return str(r.choice("migCost", given, list(MIG_COSTS)))


MAX_CHECKPOINT_RETENTION_DAYS = 3650


@setting(
    "checkpointStoragePricePerGBMonth", "checkpointRetentionDays",
    into=("checkpoint_storage_price_per_gb_month", "checkpoint_retention_days"),
)  # fmt: skip
def checkpoint_storage(r: Reader, s: Parsed) -> tuple[float, float]:
    """`checkpointStoragePricePerGBMonth` (in `currency`, per GB kept for a month) and
    `checkpointRetentionDays` (how long each checkpoint is kept): the price of the checkpoint
    storage estimates. Both or neither (then ObservabilityConfig's example applies)."""
    price, days = r.raw("checkpointStoragePricePerGBMonth"), r.raw("checkpointRetentionDays")
    example = ObservabilityConfig()
    if price is None and days is None:
        return example.checkpoint_storage_price_per_gb_month, example.checkpoint_retention_days
    for key, value in (("checkpointStoragePricePerGBMonth", price), ("checkpointRetentionDays", days)):
        if value is None:
            r.problems.append(
                f"{key} is missing: checkpointStoragePricePerGBMonth and checkpointRetentionDays are set together"
            )
    per_gb = _price(r, "checkpointStoragePricePerGBMonth", price) if price is not None else 0.0
    kept = example.checkpoint_retention_days
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= MAX_CHECKPOINT_RETENTION_DAYS:
            r.problem(
                "checkpointRetentionDays", days, f"a number of days above 0 and at most {MAX_CHECKPOINT_RETENTION_DAYS}"
            )
        else:
            kept = float(days)
    return per_gb, kept


SCRAPE_SECURITY_KEYS = {"certificate", "serverName", "authentication", "clientCertificate", "username"}


@setting("scrapeSecurity", SCRAPE_CREDENTIAL_KEY, into=("scrape_security", "scrape_credential"))
def scrape_security(r: Reader, s: Parsed) -> tuple[ScrapeSecurity | None, Any]:
    """`scrapeSecurity`: the poller and the training jobs serve TLS with authentication, and
    Prometheus scrapes them with the credential `scrapeCredential` (a Pulumi secret).
    `certificate`: a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt; a cert-manager Certificate)
    in the monitoring and training namespaces, with `serverName` among its DNS names;
    `authentication`: bearer (default) or basic (user `username`, default prometheus);
    `clientCertificate` (optional): Prometheus' own client certificate (a kubernetes.io/tls Secret
    beside Prometheus): the exporters then require a client certificate signed by ca.crt."""
    value = r.raw("scrapeSecurity")
    if value is None:
        return None, None
    sec = r.mapping("scrapeSecurity", value, SCRAPE_SECURITY_KEYS)
    certificate = r.dns_name("scrapeSecurity.certificate", sec.get("certificate"))
    server_name = r.string(
        "scrapeSecurity.serverName",
        sec.get("serverName"),
        re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$"),
        "a DNS name of the exporters' certificate, such as metrics.monitoring.svc",
    )
    authentication = r.choice("scrapeSecurity.authentication", sec.get("authentication", "bearer"), ("bearer", "basic"))
    client = sec.get("clientCertificate")
    client_secret = r.dns_name("scrapeSecurity.clientCertificate", client) if client is not None else None
    username = r.string("scrapeSecurity.username", sec.get("username", "prometheus"), re.compile(r"^[^:\s]+$"),
                        "a user name without colons or spaces")  # fmt: skip
    if r.source.get(SCRAPE_CREDENTIAL_KEY) is None:
        r.problems.append(
            f"{SCRAPE_CREDENTIAL_KEY} is missing: scrapeSecurity needs the scrape credential, a random token "
            f'(`pulumi config set --secret {SCRAPE_CREDENTIAL_KEY} "$(openssl rand -hex 32)"`)'
        )
    security = ScrapeSecurity(
        server_name=server_name,
        tls_secret=certificate,
        credentials_secret=SCRAPE_CREDENTIALS_SECRET,
        authentication=authentication,
        username=username,
        client_cert_secret=client_secret,
    )
    return security, s.secret(SCRAPE_CREDENTIAL_KEY)


@setting("kubeStateMetrics", into="kube_state_metrics")
def kube_state_metrics(r: Reader, s: Parsed) -> bool:
    """Whether kube-state-metrics runs (the health alerts then check GPU nodes by capacity)."""
    value = r.raw("kubeStateMetrics")
    if value is None:
        return False
    if not isinstance(value, bool):
        r.problem("kubeStateMetrics", value, "true or false (whether kube-state-metrics runs)")
        return False
    return value
