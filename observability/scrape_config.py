"""Scrape discovery that honours the `prometheus.io/*` pod annotations.

Annotations alone scrape nothing: Prometheus only acts on them through relabelling, and the
Prometheus Operator ignores them altogether. This module is the one place that knows the
annotation names and the relabel rules that read them, in the two shapes the stacks need:

- `annotation_scrape_configs(cfg, namespaces)`: the `scrape_configs` entries of a Kubernetes
  pod-role job (classic Prometheus, or the operator's additional-scrape-configs Secret);
- `pod_monitor_spec(cfg, namespaces)`: the spec of a PodMonitor (Prometheus Operator).

Both use the same rules (`annotation_relabel_configs()`), which work on the `__meta_kubernetes_*`
labels Kubernetes discovery sets, so a file-discovery target group carrying those labels is
relabelled exactly as a discovered pod would be (the real-Prometheus test relies on that).

Target labels: `namespace`, `pod` and `service` (= pod label `app.kubernetes.io/name`). `node` is
deliberately not a target label: the GPU poller exports `node` on its own series.

Sharded scraping (`cfg.shards` > 1): targets are split by the node their pod runs on, so every
target of a node lands on the same shard: the node's GPU poller and the training pods that hold
its GPUs (a container is only ever given GPUs of its own node). The per-GPU alerts that stay on
the shards for the 30-second promise join the poller's series with the jobs'
`ml_training_job_gpu_info` there, and find the holding job on the same shard. In annotations mode
each shard gets its own copy of the job (same job name, so `job` is the same label as with one
server) that ends in `hashmod` over the pod's node name and keeps its own remainder
(`shard_relabel_configs`), so every target is scraped by exactly one shard. In operator mode the
PodMonitor copies the node name into `__tmp_hash` when the stack has shards; the operator's own
sharding rules (appended when the Prometheus resource sets `spec.shards`) hash `__tmp_hash` when a
relabeling set it, else `__address__`, and keep `$(SHARD)`. Operator releases that always hash
`__address__` (before late 2024) still scrape every target exactly once, but a shard then finds a
GPU's job only when it happens to scrape the job's pod too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from observability.config import ObservabilityConfig, ScrapeSecurity

SCRAPE_ANNOTATION = "prometheus.io/scrape"
PORT_ANNOTATION = "prometheus.io/port"
PATH_ANNOTATION = "prometheus.io/path"
SCHEME_ANNOTATION = "prometheus.io/scheme"
# A pod's own scrape interval and timeout (the sources of the critical alerts are scraped faster
# than the rest); without them the job's interval and timeout apply.
INTERVAL_ANNOTATION = "prometheus.io/interval"
TIMEOUT_ANNOTATION = "prometheus.io/timeout"
SERVICE_LABEL = "app.kubernetes.io/name"  # pod label that becomes the `service` target label

# Pods running several ranks (torchrun): each rank serves its own metrics on base port + its local
# rank, declared as container port `metrics-<local rank>`. This annotation ("true") makes every such
# port a target of its own; `prometheus.io/port` still names local rank 0's port.
RANK_PORTS_ANNOTATION = "foxhunt.io/scrape-rank-ports"
RANK_PORT_PREFIX = "metrics-"
# Relabelling scratch label (dropped after relabelling, like every `__` label): whether a
# discovered container port stays a target.
RANK_PORT_KEEP_LABEL = "__tmp_rank_port"


def rank_port_name(local_rank: int) -> str:
    """The container port name of a local rank's metrics (at most 15 characters, as Kubernetes wants)."""
    if not 0 <= local_rank < 1000:
        raise ValueError(f"local rank {local_rank}: expected 0 to 999")
    return f"{RANK_PORT_PREFIX}{local_rank}"


# The training jobs' iteration and checkpoint histograms carry `trace_id` exemplars, served as
# OpenMetrics to a scraper that asks for it (Prometheus does); Prometheus keeps exemplars only with
# this feature enabled. Said where Prometheus' operators look: a comment on top of the scrape
# config, an annotation on the scrape discovery object and on the training job template.
EXEMPLAR_STORAGE_FEATURE = "exemplar-storage"
PROMETHEUS_REQUIRES_ANNOTATION = "foxhunt.io/prometheus-requires"
PROMETHEUS_REQUIREMENT = (
    f"--enable-feature={EXEMPLAR_STORAGE_FEATURE} (Prometheus Operator: spec.enableFeatures: "
    f"[{EXEMPLAR_STORAGE_FEATURE}]), to keep the trace_id exemplars of the training jobs' histograms"
)


def prometheus_requirement_annotations() -> dict[str, str]:
    return {PROMETHEUS_REQUIRES_ANNOTATION: PROMETHEUS_REQUIREMENT}


def requirement_comment() -> str:
    """The YAML comment that heads every scrape and server config file."""
    return f"# Prometheus needs {PROMETHEUS_REQUIREMENT}.\n"


def final_scrape_wait_seconds(cfg: ObservabilityConfig) -> int:
    """The job template's `foxhunt_trainer.trainer_env.FINAL_SCRAPE_WAIT_ENV`: two scrape intervals
    (one scrape may fail, the next one still sees the final values)."""
    return 2 * cfg.scrape_interval_seconds


# Pods of the project's own exporters (GPU poller, training jobs) that serve TLS with authentication
# carry this annotation: the plain job leaves them to a job that speaks TLS and authenticates.
SECURED_ANNOTATION = "foxhunt.io/scrape-security"
SECURED_VALUE = "web-config"
SECURED_JOB_NAME = "foxhunt-secured-pods"
CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"  # keys of a kubernetes.io/tls Secret

JOB_NAME = "foxhunt-annotated-pods"
POD_MONITOR_NAME = "foxhunt-annotated-pods"
# Key of the scrape config in the delivered object. A ConfigMap holds a `scrape_configs:` document
# (what Prometheus' `scrape_config_files` loads); the operator's additional-scrape-configs Secret
# holds a bare YAML list of scrape configs (what `additionalScrapeConfigs` expects).
CONFIGMAP_KEY = "scrape-config.yaml"
SECRET_KEY = "prometheus-additional.yaml"

# Pods in these phases are not scraped (no IP, or finished): the operator's filterRunning default.
_NOT_RUNNING = "Pending|Succeeded|Failed|Unknown"
_IPV4 = r"(\d+);(\d+\.\d+\.\d+\.\d+)"
_IPV6 = r"(\d+);([0-9A-Fa-f]*:[0-9A-Fa-f:.]*)"
_DURATION = r"([1-9][0-9]*s)"


def meta_label(prefix: str, name: str) -> str:
    """The discovery meta label for a pod annotation or label key (non-alphanumerics become `_`)."""
    return prefix + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def annotation_label(annotation: str) -> str:
    return meta_label("__meta_kubernetes_pod_annotation_", annotation)


def annotation_present_label(annotation: str) -> str:
    return meta_label("__meta_kubernetes_pod_annotationpresent_", annotation)


def pod_label(label: str) -> str:
    return meta_label("__meta_kubernetes_pod_label_", label)


def critical_scrape_timeout_seconds(cfg: ObservabilityConfig) -> int:
    """Scrape timeout of the critical alerts' sources: half their interval (a poller pass and a
    trainer's page take milliseconds; the detection bound counts the whole timeout)."""
    return max(1, cfg.critical_scrape_interval_seconds // 2)


def critical_scrape_annotations(cfg: ObservabilityConfig) -> dict[str, str]:
    """The per-pod interval and timeout of the critical alerts' sources (poller, training pods and
    the training service)."""
    return {
        INTERVAL_ANNOTATION: f"{cfg.critical_scrape_interval_seconds}s",
        TIMEOUT_ANNOTATION: f"{critical_scrape_timeout_seconds(cfg)}s",
    }


def pod_scrape_annotations(
    port: int, path: str = "/metrics", scheme: str = "http", *, critical: ObservabilityConfig | None = None
) -> dict[str, str]:
    """The annotations that make a pod a scrape target on `port` and `path`; with `critical`, at the
    critical sources' interval and timeout of that config."""
    if not 1 <= port <= 65535:
        raise ValueError(f"scrape port {port} is not a TCP port (1-65535)")
    if not path.startswith("/"):
        raise ValueError(f"scrape path {path!r} must start with '/'")
    if scheme not in ("http", "https"):
        raise ValueError(f"scrape scheme {scheme!r} must be http or https")
    base = {SCRAPE_ANNOTATION: "true", PORT_ANNOTATION: str(port), PATH_ANNOTATION: path, SCHEME_ANNOTATION: scheme}
    return base if critical is None else {**base, **critical_scrape_annotations(critical)}


def annotation_relabel_configs() -> list[dict[str, Any]]:
    """Relabel rules (Prometheus config shape) that turn annotated pods into targets.

    Order matters: drop what is not opted in first, then rewrite scheme, path and address from the
    annotations, then set the target labels. The address is rebuilt from the pod IP, so the
    annotated port need not be a declared container port; every container port of a pod yields
    the same address and labels, and Prometheus folds the duplicates into one target.

    A pod annotated `foxhunt.io/scrape-rank-ports: "true"` is the exception: each of its container
    ports named `metrics-<local rank>` is a target of its own (pod IP and that port), its other
    ports are dropped, so every rank of a multi-process pod is scraped on its own port.
    """
    port = annotation_label(PORT_ANNOTATION)
    rank_ports = annotation_label(RANK_PORTS_ANNOTATION)
    container_port = "__meta_kubernetes_pod_container_port_number"
    return [
        {"source_labels": [annotation_label(SCRAPE_ANNOTATION)], "regex": "true", "action": "keep"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": _NOT_RUNNING, "action": "drop"},
        # Per-rank pods keep only their rank ports; every other pod keeps all its discovered ports.
        {"target_label": RANK_PORT_KEEP_LABEL, "replacement": "yes", "action": "replace"},
        {"source_labels": [rank_ports], "regex": "true", "target_label": RANK_PORT_KEEP_LABEL, "replacement": "no",
         "action": "replace"},
        {"source_labels": [rank_ports, "__meta_kubernetes_pod_container_port_name"],
         "regex": f"true;{RANK_PORT_PREFIX}[0-9]+", "target_label": RANK_PORT_KEEP_LABEL, "replacement": "yes",
         "action": "replace"},
        {"source_labels": [RANK_PORT_KEEP_LABEL], "regex": "yes", "action": "keep"},
        {
            "source_labels": [annotation_label(SCHEME_ANNOTATION)],
            "regex": "(https?)",
            "target_label": "__scheme__",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": [annotation_label(PATH_ANNOTATION)],
            "regex": "(/.*)",
            "target_label": "__metrics_path__",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": [annotation_label(INTERVAL_ANNOTATION)],
            "regex": _DURATION,
            "target_label": "__scrape_interval__",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": [annotation_label(TIMEOUT_ANNOTATION)],
            "regex": _DURATION,
            "target_label": "__scrape_timeout__",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": [port, "__meta_kubernetes_pod_ip"],
            "regex": _IPV4,
            "target_label": "__address__",
            "replacement": "$2:$1",
            "action": "replace",
        },
        {
            "source_labels": [port, "__meta_kubernetes_pod_ip"],
            "regex": _IPV6,
            "target_label": "__address__",
            "replacement": "[$2]:$1",
            "action": "replace",
        },
        {
            "source_labels": [rank_ports, container_port, "__meta_kubernetes_pod_ip"],
            "regex": "true;" + _IPV4,
            "target_label": "__address__",
            "replacement": "$2:$1",
            "action": "replace",
        },
        {
            "source_labels": [rank_ports, container_port, "__meta_kubernetes_pod_ip"],
            "regex": "true;" + _IPV6,
            "target_label": "__address__",
            "replacement": "[$2]:$1",
            "action": "replace",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace", "action": "replace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod", "action": "replace"},
        {"source_labels": [pod_label(SERVICE_LABEL)], "target_label": "service", "action": "replace"},
    ]  # fmt: skip


def _check_namespaces(namespaces: Sequence[str]) -> list[str]:
    names = sorted(set(namespaces))
    if not names:
        raise ValueError("scrape discovery needs at least one namespace to watch")
    return names


# Scrape shards: what `hashmod` writes the remainder into (dropped after relabelling, like every
# `__` label), and the most shards a stack may run.
SHARD_HASH_LABEL = "__tmp_hash"
MAX_SHARDS = 64
# What the shards hash: the node the pod runs on (Kubernetes pod discovery sets it).
SHARD_KEY = "__meta_kubernetes_pod_node_name"


def shard_relabel_configs(shard: int, shards: int) -> list[dict[str, Any]]:
    """The rules that keep the targets of `shard` (0-based) out of `shards`: none for one shard.

    They hash the name of the node the pod runs on (`SHARD_KEY`), so the targets of one node (its
    GPU poller, the training pods holding its GPUs, the container ports of one pod) land on the
    same shard. The remainder label is dropped again: a target's labels, and with them the phase
    at which Prometheus scrapes it within the interval, are the same as without shards.
    """
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards = {shards}: expected a whole number from 1 to {MAX_SHARDS}")
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} does not exist with {shards} shard(s): expected 0 to {shards - 1}")
    if shards == 1:
        return []
    return [
        {"source_labels": [SHARD_KEY], "target_label": SHARD_HASH_LABEL, "modulus": shards, "action": "hashmod"},
        {"source_labels": [SHARD_HASH_LABEL], "regex": str(shard), "action": "keep"},
        {"regex": SHARD_HASH_LABEL, "action": "labeldrop"},
    ]


def operator_shard_key_relabeling(shards: int) -> list[dict[str, Any]]:
    """The PodMonitor's last relabeling with shards: the pod's node name into `__tmp_hash`, which
    the operator's sharding then hashes instead of `__address__`. None for one shard."""
    if shards == 1:
        return []
    return [{"source_labels": [SHARD_KEY], "target_label": SHARD_HASH_LABEL, "action": "replace"}]


def secured_selection(secured: bool) -> dict[str, Any]:
    """The first relabel rule of the plain job (drop the secured pods) or of the secured job (keep only them)."""
    return {
        "source_labels": [annotation_label(SECURED_ANNOTATION)],
        "regex": SECURED_VALUE,
        "action": "keep" if secured else "drop",
    }


def secured_scrape_fields(security: ScrapeSecurity) -> dict[str, Any]:
    """`scheme`, `tls_config` and `authorization` or `basic_auth` of a scrape config (Prometheus
    shape) that scrapes an exporter serving the matching web config."""
    tls: dict[str, Any] = {
        "ca_file": security.file(security.tls_secret, CA_KEY),
        "server_name": security.server_name,
        "insecure_skip_verify": False,
    }
    if security.client_cert_secret:
        tls["cert_file"] = security.file(security.client_cert_secret, CERT_KEY)
        tls["key_file"] = security.file(security.client_cert_secret, KEY_KEY)
    credential = security.file(security.credentials_secret, security.credential_key)
    fields: dict[str, Any] = {"scheme": "https", "tls_config": tls}
    if security.authentication == "bearer":
        fields["authorization"] = {"type": "Bearer", "credentials_file": credential}
    else:
        fields["basic_auth"] = {"username": security.username, "password_file": credential}
    return fields


def secured_pod_metrics_endpoint_fields(security: ScrapeSecurity) -> dict[str, Any]:
    """The same as `secured_scrape_fields`, as PodMonitor endpoint fields (Secret references in the
    PodMonitor's namespace)."""
    tls: dict[str, Any] = {
        "ca": {"secret": {"name": security.tls_secret, "key": CA_KEY}},
        "serverName": security.server_name,
        "insecureSkipVerify": False,
    }
    if security.client_cert_secret:
        tls["cert"] = {"secret": {"name": security.client_cert_secret, "key": CERT_KEY}}
        tls["keySecret"] = {"name": security.client_cert_secret, "key": KEY_KEY}
    credential = {"name": security.credentials_secret, "key": security.credential_key}
    fields: dict[str, Any] = {"scheme": "https", "tlsConfig": tls}
    if security.authentication == "bearer":
        fields["authorization"] = {"type": "Bearer", "credentials": credential}
    else:
        username = {"name": security.credentials_secret, "key": "username"}
        fields["basicAuth"] = {"username": username, "password": credential}
    return fields


def annotation_scrape_configs(
    cfg: ObservabilityConfig, namespaces: Sequence[str], shard: int = 0
) -> list[dict[str, Any]]:
    """`scrape_configs` entries of one shard: one pod-role job over `namespaces` honouring the
    annotations, keeping only the shard's targets when the stack has more than one shard; with
    `cfg.scrape_security`, a second job over the same pods that scrapes the secured ones over TLS
    with the credential (the first job drops them)."""
    interval = f"{cfg.scrape_interval_seconds}s"
    security = cfg.scrape_security

    def job(name: str, first: list[dict[str, Any]], fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "job_name": name,
            "scrape_interval": interval,
            "scrape_timeout": f"{min(cfg.scrape_interval_seconds, 10)}s",
            **fields,
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": _check_namespaces(namespaces)}}],
            "relabel_configs": [*first, *annotation_relabel_configs(), *shard_relabel_configs(shard, cfg.shards)],
        }

    if security is None:
        return [job(JOB_NAME, [], {})]
    return [
        job(JOB_NAME, [secured_selection(False)], {}),
        job(SECURED_JOB_NAME, [secured_selection(True)], secured_scrape_fields(security)),
    ]


def shard_key(key: str, shard: int, shards: int) -> str:
    """The file or object key of one shard's scrape config: `key` itself with one shard,
    `scrape-config-shard-0.yaml` style with several."""
    if shards == 1:
        return key
    stem, dot, extension = key.rpartition(".")
    return f"{stem}-shard-{shard}{dot}{extension}"


def scrape_config_yaml(cfg: ObservabilityConfig, namespaces: Sequence[str], shard: int = 0) -> str:
    """A `scrape_configs:` document: `rendered/<stack>/prometheus/scrape-config.yaml` (one per shard
    when sharded) and the ConfigMap key (Prometheus loads it through `scrape_config_files`,
    `promtool check config` checks it)."""
    return requirement_comment() + _dump({"scrape_configs": annotation_scrape_configs(cfg, namespaces, shard)})


def additional_scrape_configs_yaml(cfg: ObservabilityConfig, namespaces: Sequence[str], shard: int = 0) -> str:
    """A bare list of scrape configs: the operator's additional-scrape-configs Secret key."""
    return requirement_comment() + _dump(annotation_scrape_configs(cfg, namespaces, shard))


def shard_scrape_configs(
    cfg: ObservabilityConfig, namespaces: Sequence[str], key: str = CONFIGMAP_KEY
) -> dict[str, str]:
    """Key -> scrape config document of every shard: `scrape_configs:` documents under ConfigMap keys
    or rendered file names (any key but the Secret's), bare lists under the Secret's key."""
    render = additional_scrape_configs_yaml if key == SECRET_KEY else scrape_config_yaml
    return {shard_key(key, i, cfg.shards): render(cfg, namespaces, i) for i in range(cfg.shards)}


_OPERATOR_KEYS = {
    "source_labels": "sourceLabels",
    "target_label": "targetLabel",
    "regex": "regex",
    "replacement": "replacement",
    "action": "action",
    "separator": "separator",
    "modulus": "modulus",
}


def to_operator_relabeling(rule: dict[str, Any]) -> dict[str, Any]:
    """One relabel rule in the operator's camelCase shape (RelabelConfig of the monitoring CRDs)."""
    unknown = set(rule) - set(_OPERATOR_KEYS)
    if unknown:
        raise ValueError(f"relabel rule has fields the operator does not know: {sorted(unknown)}")
    return {_OPERATOR_KEYS[k]: v for k, v in rule.items()}


def from_operator_relabeling(rule: dict[str, Any]) -> dict[str, Any]:
    back = {v: k for k, v in _OPERATOR_KEYS.items()}
    return {back[k]: v for k, v in rule.items()}


# The operator adds `container` (and `endpoint` when a port is named) before these rules run: drop
# them so every container port of a pod relabels to one identical target, as in annotations mode.
OPERATOR_LABELDROP = {"regex": "container|endpoint", "action": "labeldrop"}


def pod_monitor_spec(cfg: ObservabilityConfig, namespaces: Sequence[str]) -> dict[str, Any]:
    """Spec of the PodMonitor that selects the annotated pods (operator mode).

    A label selector cannot match annotations, so it selects every pod that has the `service`
    label in the watched namespaces, and the relabelling keeps the annotated ones, exactly as the
    annotation scrape config does. With shards, the last relabeling hands the operator's sharding
    the pod's node name (`operator_shard_key_relabeling`).
    """
    security = cfg.scrape_security

    def endpoint(first: list[dict[str, Any]], fields: dict[str, Any]) -> dict[str, Any]:
        rules = [*first, *annotation_relabel_configs(), OPERATOR_LABELDROP, *operator_shard_key_relabeling(cfg.shards)]
        return {
            "interval": f"{cfg.scrape_interval_seconds}s",
            "scrapeTimeout": f"{min(cfg.scrape_interval_seconds, 10)}s",
            **fields,
            "relabelings": [to_operator_relabeling(dict(r)) for r in rules],
        }

    endpoints = (
        [endpoint([], {})]
        if security is None
        else [
            endpoint([secured_selection(False)], {}),
            endpoint([secured_selection(True)], secured_pod_metrics_endpoint_fields(security)),
        ]
    )
    return {
        "selector": {"matchExpressions": [{"key": SERVICE_LABEL, "operator": "Exists"}]},
        "namespaceSelector": {"matchNames": _check_namespaces(namespaces)},
        "podMetricsEndpoints": endpoints,
    }


def _dump(document: Any) -> str:
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=10_000)
    return text
