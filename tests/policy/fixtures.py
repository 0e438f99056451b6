"""A small compliant stack in Kubernetes shapes, and one violating variant per case.

Every case mutates a fresh copy of the compliant stack in one place, names the policy that must
report it and what its message must say. The same cases drive the pure-function tests and the
CrossGuard pack tests (through the gRPC analyzer).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policy.vocabulary import DeclaredService, KubeObject, PolicyContext

DIGEST_IMAGE = "registry.foxhunt.internal/observability/gpu-poller@sha256:" + "c5" * 32
TRAINER_IMAGE = "registry.foxhunt.internal/ml/train-baseline-rl@sha256:" + "ab" * 32
TEMPO = "http://tempo.monitoring-dev.svc.cluster.local:4317"
COMMON_LABELS = {
    "app.kubernetes.io/part-of": "foxhunt-observability",
    "app.kubernetes.io/managed-by": "pulumi",
    "foxhunt.io/environment": "dev",
}
CONTEXT = PolicyContext(
    stack="dev",
    services=(
        DeclaredService("api-gateway", frozenset({9090}), "/metrics", required=True),
        DeclaredService("gpu-poller", frozenset({9400}), "/metrics", required=False),
        DeclaredService("training-job", frozenset({9094}), "/metrics", False, frozenset({"training-job-template"})),
    ),
    tempo_otlp_endpoint=TEMPO,
    training_job_name="training-job-template",
    namespaces=frozenset({"foxhunt-dev", "monitoring-dev", "training-dev"}),
    common_labels=COMMON_LABELS,
)


def labels(name: str, **extra: str) -> dict[str, str]:
    return {**COMMON_LABELS, "app.kubernetes.io/name": name, **extra}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def resources() -> dict[str, Any]:
    return {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def gpu_poller_daemonset() -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-poller", "namespace": "monitoring-dev", "labels": labels("gpu-poller")},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "gpu-poller"}},
            "template": {
                "metadata": {"labels": labels("gpu-poller"), "annotations": scrape_annotations(9400)},
                "spec": {
                    "securityContext": pod_security(),
                    "containers": [
                        {
                            "name": "gpu-poller",
                            "image": DIGEST_IMAGE,
                            "args": ["--listen", "0.0.0.0:9400"],
                            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                            "ports": [{"name": "metrics", "containerPort": 9400}],
                            "resources": resources(),
                            "livenessProbe": probe,
                            "readinessProbe": probe,
                            "securityContext": container_security(),
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }


def training_cronjob() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "training-job-template", "namespace": "training-dev", "labels": labels("training-job")},
        "spec": {
            "suspend": True,
            "schedule": "0 0 31 2 *",
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 2,
                    "podFailurePolicy": {
                        "rules": [
                            {
                                "action": "FailJob",
                                "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [80, 81, 82]},
                            },
                            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                        ]
                    },
                    "template": {
                        "metadata": {"labels": labels("training-job"), "annotations": scrape_annotations(9094)},
                        "spec": {
                            "restartPolicy": "Never",
                            "securityContext": pod_security(),
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": TRAINER_IMAGE,
                                    "command": ["foxhunt-run"],
                                    "args": ["python", "-m", "train"],
                                    "env": [
                                        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": TEMPO},
                                        {"name": "FOXHUNT_REMEDIATION", "value": "on"},
                                        {"name": "FOXHUNT_REMEDIATION_MAX_ROLLBACKS", "value": "3"},
                                        {"name": "FOXHUNT_AUTOLOG", "value": "on"},
                                    ],
                                    "ports": [{"name": "metrics", "containerPort": 9094}],
                                    "resources": resources(),
                                    "securityContext": container_security(),
                                }
                            ],
                        },
                    },
                }
            },
        },
    }


def api_gateway_patch() -> dict[str, Any]:
    """What ServiceScrapeAnnotations sends: only the fields it patches on the owner's Deployment."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api-gateway", "namespace": "foxhunt-dev"},
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": "api-gateway"},
                    "annotations": scrape_annotations(9090),
                },
                "spec": {
                    "containers": [
                        {"name": "gateway", "env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": TEMPO}]}
                    ]
                },
            }
        },
    }


def dashboard(uid: str, title: str = "Training cockpit") -> str:
    panel = {"id": 1, "type": "timeseries", "title": "GPU", "datasource": {"type": "prometheus", "uid": "prometheus"}}
    return json.dumps({"uid": uid, "title": title, "schemaVersion": 39, "panels": [panel]})


def dashboard_configmap(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "monitoring-dev",
            "labels": {**labels("grafana-dashboards"), "grafana_dashboard": "1"},
        },
        "data": {f"{uid}.json": dashboard(uid)},
    }


DATASOURCES_YAML = """apiVersion: 1
datasources:
- name: Prometheus
  uid: prometheus
  type: prometheus
  url: http://prometheus-operated.monitoring-dev.svc.cluster.local:9090
  jsonData:
    exemplarTraceIdDestinations:
    - name: trace_id
      datasourceUid: tempo
- name: Loki
  uid: loki
  type: loki
  url: http://loki-gateway.monitoring-dev.svc.cluster.local:80
  jsonData:
    derivedFields:
    - name: TraceID
      matcherRegex: trace_id=(\\w+)
      url: $${__value.raw}
      datasourceUid: tempo
- name: Tempo
  uid: tempo
  type: tempo
  url: http://tempo.monitoring-dev.svc.cluster.local:3200
  jsonData:
    tracesToLogsV2: {datasourceUid: loki}
    tracesToMetrics: {datasourceUid: prometheus}
    serviceMap: {datasourceUid: prometheus}
"""


def datasources_configmap() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "grafana-datasources",
            "namespace": "monitoring-dev",
            "labels": {**labels("grafana-datasources"), "grafana_datasource": "1"},
        },
        "data": {"datasources.yaml": DATASOURCES_YAML},
    }


def alert(name: str = "TrainingNaNDetected") -> dict[str, Any]:
    return {
        "alert": name,
        "expr": "increase(ml_training_nan_count_total[1m]) > 0",
        "for": "30s",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "Training produced NaN values",
            "description": "Model {{ $labels.model }} fold {{ $labels.fold }} produced NaN.",
            "runbook_url": "https://github.com/foxhunt/foxhunt-observability/blob/main/docs/runbooks.md#trainingnandetected",
        },
    }


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "foxhunt-ml-rules", "namespace": "monitoring-dev", "labels": labels("alert-rules")},
        "spec": {
            "groups": [
                {"name": "ml_training_performance", "rules": [alert(), {"record": "job:x:rate5m", "expr": "vector(1)"}]}
            ]
        },
    }


def rules_configmap() -> dict[str, Any]:
    groups = {"groups": [{"name": "ml_training_availability", "rules": [alert("MLTrainingServiceDown")]}]}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "foxhunt-ml-rules-file", "namespace": "monitoring-dev", "labels": labels("alert-rules")},
        "data": {"foxhunt-ml.rules.yaml": json.dumps(groups)},
    }


def alertmanager_secret() -> dict[str, Any]:
    """A Secret filled from Pulumi secrets: its data is never scanned (offline it holds placeholders)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "alertmanager-config", "namespace": "monitoring-dev", "labels": labels("alertmanager")},
        "type": "Opaque",
        "stringData": {
            "alertmanager.yaml": "receivers:\n- name: page\n  webhook_configs:\n  - url: https://alerts.invalid/dev/x\n",
            "password": "offline-placeholder-registryPassword",
        },
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "gpu-poller", "namespace": "monitoring-dev", "labels": labels("gpu-poller")},
        "spec": {"selector": {"app.kubernetes.io/name": "gpu-poller"}, "ports": [{"name": "metrics", "port": 9400}]},
    }


def network_policy(name: str, namespace: str, app: str, port: int, *, egress: bool) -> dict[str, Any]:
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring-dev"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": app}},
        "policyTypes": ["Ingress"] if egress else ["Ingress", "Egress"],
        "ingress": [{"from": [prometheus], "ports": [{"protocol": "TCP", "port": port}]}],
    }
    if not egress:
        spec["egress"] = []
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(app)},
        "spec": spec,
    }


Stack = dict[str, dict[str, Any]]
PATCH_KEYS = frozenset({"api-gateway-patch"})


def compliant_stack() -> Stack:
    return {
        "gpu-poller": gpu_poller_daemonset(),
        "gpu-poller-service": service(),
        "gpu-poller-network": network_policy("gpu-poller", "monitoring-dev", "gpu-poller", 9400, egress=False),
        "training-network": network_policy("training-job", "training-dev", "training-job", 9094, egress=True),
        "training-job": training_cronjob(),
        "api-gateway-patch": api_gateway_patch(),
        "dashboard-training": dashboard_configmap("grafana-dashboard-training", "foxhunt-training-cockpit"),
        "dashboard-traces": dashboard_configmap("grafana-dashboard-traces", "foxhunt-traces"),
        "datasources": datasources_configmap(),
        "rules": prometheus_rule(),
        "rules-file": rules_configmap(),
        "alertmanager": alertmanager_secret(),
    }


class ReadOnlyMapping(Mapping[str, Any]):
    """Neither a dict nor mutable, like the analyzer's property proxies."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = {k: readonly(v) for k, v in data.items()}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def readonly(value: Any) -> Any:
    if isinstance(value, Mapping):
        return ReadOnlyMapping(value)
    if isinstance(value, list):
        return tuple(readonly(v) for v in value)
    return value


def objects(stack: Stack, wrap: Callable[[Any], Any] = lambda m: m) -> list[KubeObject]:
    return [KubeObject(wrap(m), is_patch=key in PATCH_KEYS, origin=key) for key, m in stack.items()]


def type_token(key: str, manifest: Mapping[str, Any]) -> str:
    """The Pulumi type token that registers this object (what the analyzer is told)."""
    group_version = str(manifest["apiVersion"])
    if "/" not in group_version:
        group_version = f"core/{group_version}"
    return f"kubernetes:{group_version}:{manifest['kind']}{'Patch' if key in PATCH_KEYS else ''}"


@dataclass(frozen=True)
class Case:
    id: str
    policy: str
    mutate: Callable[[Stack], None]
    path: str  # must appear in the violation's field path
    problem: str  # must appear in its problem text
    also: frozenset[str] = field(default=frozenset())  # other policies the same mutation violates


def _pod(stack: Stack, key: str = "gpu-poller") -> dict[str, Any]:
    manifest = stack[key]
    if manifest["kind"] == "CronJob":
        return manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return manifest["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _container(stack: Stack, key: str = "gpu-poller") -> dict[str, Any]:
    return _pod(stack, key)["containers"][0]  # type: ignore[no-any-return]


def _template_annotations(stack: Stack, key: str) -> dict[str, str]:
    manifest = stack[key]
    return manifest["spec"]["template"]["metadata"]["annotations"]  # type: ignore[no-any-return]


def _set(path: Sequence[Any], value: Any, key: str = "gpu-poller") -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        target: Any = stack[key]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def _delete(path: Sequence[Any], key: str = "gpu-poller") -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        target: Any = stack[key]
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


def _do(fn: Callable[[Stack], Any]) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        fn(stack)

    return mutate


POD = ["spec", "template", "spec"]
CONTAINER = [*POD, "containers", 0]
POD_ANNOTATIONS = ["spec", "template", "metadata", "annotations"]


def _oversize(stack: Stack) -> None:
    document = json.loads(stack["dashboard-training"]["data"]["foxhunt-training-cockpit.json"])
    document["panels"] = [{"id": i, "type": "text", "options": {"content": "x" * 2048}} for i in range(520)]
    stack["dashboard-training"]["data"]["foxhunt-training-cockpit.json"] = json.dumps(document)


def _plain_configmap(data: dict[str, str]) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        stack["settings"] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-settings", "namespace": "training-dev", "labels": labels("trainer")},
            "data": data,
        }

    return mutate


def _prometheus_resource(**spec: Any) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        stack["prometheus"] = {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": "k8s", "namespace": "monitoring-dev", "labels": labels("prometheus")},
            "spec": spec,
        }

    return mutate


CASES: tuple[Case, ...] = (
    # --- pod-security-restricted -----------------------------------------------------------------
    Case("privileged", "pod-security-restricted", _set([*CONTAINER, "securityContext", "privileged"], True),
         "containers[gpu-poller].securityContext.privileged", "is privileged"),
    Case("host-network", "pod-security-restricted", _set([*POD, "hostNetwork"], True),
         "spec.template.spec.hostNetwork", "shares the node's Network namespace"),
    Case("host-pid", "pod-security-restricted", _set([*POD, "hostPID"], True), "spec.hostPID", "PID namespace"),
    Case("host-path", "pod-security-restricted",
         _do(lambda s: _pod(s)["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}})),
         "spec.volumes[dev].hostPath", "hostPath volume"),
    Case("host-port", "pod-security-restricted", _set([*CONTAINER, "ports", 0, "hostPort"], 9400),
         "ports[0].hostPort", "binds host port 9400"),
    Case("run-as-root-allowed", "pod-security-restricted", _delete([*POD, "securityContext", "runAsNonRoot"]),
         "spec.template.spec.securityContext.runAsNonRoot", "may run as root"),
    Case("run-as-uid-0", "pod-security-restricted", _set([*CONTAINER, "securityContext", "runAsUser"], 0),
         "securityContext.runAsUser", "uid 0"),
    Case("privilege-escalation", "pod-security-restricted",
         _delete([*CONTAINER, "securityContext", "allowPrivilegeEscalation"]),
         "securityContext.allowPrivilegeEscalation", "may gain privileges"),
    Case("capabilities-kept", "pod-security-restricted", _set([*CONTAINER, "securityContext", "capabilities"], {}),
         "securityContext.capabilities.drop", "default Linux capabilities"),
    Case("capability-added", "pod-security-restricted",
         _set([*CONTAINER, "securityContext", "capabilities", "add"], ["SYS_ADMIN"]),
         "securityContext.capabilities.add", "adds capability SYS_ADMIN"),
    Case("seccomp-unconfined", "pod-security-restricted",
         _set([*POD, "securityContext", "seccompProfile", "type"], "Unconfined"),
         "spec.template.spec.securityContext.seccompProfile.type", "not RuntimeDefault"),
    Case("host-volume-nfs", "pod-security-restricted",
         _do(lambda s: _pod(s)["volumes"].append({"name": "data", "nfs": {"server": "nfs", "path": "/"}})),
         "spec.volumes[data].nfs", "volume type nfs"),
    Case("patch-privileged", "pod-security-restricted",
         _set([*CONTAINER, "securityContext"], {"privileged": True}, key="api-gateway-patch"),
         "containers[gateway].securityContext.privileged", "is privileged"),
    Case("cronjob-root", "pod-security-restricted",
         _do(lambda s: _pod(s, "training-job")["securityContext"].update(runAsUser=0)),
         "spec.jobTemplate.spec.template.spec.securityContext.runAsUser", "non-zero runAsUser"),
    # --- container-resources / container-probes ----------------------------------------------------
    Case("no-memory-limit", "container-resources", _delete([*CONTAINER, "resources", "limits", "memory"]),
         "containers[gpu-poller].resources.limits", "no memory limits"),
    Case("training-no-requests", "container-resources",
         _do(lambda s: _container(s, "training-job")["resources"].pop("requests")),
         "spec.jobTemplate.spec.template.spec.containers[trainer].resources.requests", "no cpu or memory requests"),
    Case("no-readiness", "container-probes", _delete([*CONTAINER, "readinessProbe"]),
         "containers[gpu-poller].readinessProbe", "has no readinessProbe"),
    Case("no-liveness", "container-probes", _delete([*CONTAINER, "livenessProbe"]),
         "containers[gpu-poller].livenessProbe", "has no livenessProbe"),
    # --- images --------------------------------------------------------------------------------------
    Case("image-latest", "image-not-latest",
         _set([*CONTAINER, "image"], "registry.foxhunt.internal/observability/gpu-poller:latest"),
         "containers[gpu-poller].image", "uses the latest tag"),
    Case("image-untagged", "image-not-latest", _set([*CONTAINER, "image"], "registry.foxhunt.internal:5000/poller"),
         "containers[gpu-poller].image", "has no tag"),
    Case("image-version-tag", "image-pinned-by-digest",
         _set([*CONTAINER, "image"], "registry.foxhunt.internal/observability/gpu-poller:1.4.2"),
         "containers[gpu-poller].image", "pinned by a version tag, not by digest"),
    Case("image-mutable-tag", "image-pinned-by-digest",
         _set([*CONTAINER, "image"], "registry.foxhunt.internal/observability/gpu-poller:main"),
         "containers[gpu-poller].image", "mutable tag 'main'"),
    # --- scrape annotations ----------------------------------------------------------------------------
    Case("scrape-undeclared-port", "scrape-annotations",
         _do(lambda s: _template_annotations(s, "api-gateway-patch").update({"prometheus.io/port": "9999"})),
         "spec.template.metadata.annotations.prometheus.io/port",
         "annotated port 9999 is not a port the stack declares for api-gateway (declared: 9090)"),
    Case("scrape-not-true", "scrape-annotations",
         _do(lambda s: _template_annotations(s, "gpu-poller").update({"prometheus.io/scrape": "yes"})),
         "annotations.prometheus.io/scrape", "keeps only pods whose value is the string \"true\""),
    Case("scrape-unknown-service", "scrape-annotations",
         _do(lambda s: s["gpu-poller"]["spec"]["template"]["metadata"]["labels"].update({"app.kubernetes.io/name": "dcgm"})),
         "spec.template.metadata.annotations", "the stack declares no such service",
         frozenset({"network-policy-coverage"})),  # the relabelled pods leave their NetworkPolicy too
    Case("scrape-wrong-path", "scrape-annotations",
         _do(lambda s: _template_annotations(s, "api-gateway-patch").update({"prometheus.io/path": "/stats"})),
         "prometheus.io/path", "serves metrics on /metrics"),
    Case("scrape-port-not-exposed", "scrape-annotations", _set([*CONTAINER, "ports", 0, "containerPort"], 9401),
         "prometheus.io/port", "not a containerPort of the pod"),
    Case("scrape-on-object-metadata", "scrape-annotations",
         _do(lambda s: s["api-gateway-patch"]["metadata"].update(
             annotations=s["api-gateway-patch"]["spec"]["template"]["metadata"].pop("annotations"))),
         "metadata.annotations", "where pod discovery never reads them", frozenset({"scrape-coverage"})),
    Case("service-not-scraped", "scrape-coverage",
         _do(lambda s: s["api-gateway-patch"]["spec"]["template"]["metadata"].pop("annotations")),
         "services[api-gateway]", "declared service api-gateway has no pod template annotated"),
    # --- OTLP ----------------------------------------------------------------------------------------
    Case("otel-wrong-tempo", "otel-endpoint",
         _set([*CONTAINER, "env", 0, "value"], "http://tempo.monitoring.svc.cluster.local:4317", key="api-gateway-patch"),
         "containers[gateway].env[OTEL_EXPORTER_OTLP_ENDPOINT]", "not this stack's Tempo"),
    Case("training-no-otel", "training-job-otel",
         _do(lambda s: _container(s, "training-job").update(env=_container(s, "training-job")["env"][1:])),
         "spec.jobTemplate.spec.template.spec.containers[trainer].env", "has no OTEL_EXPORTER_OTLP_ENDPOINT"),
    Case("training-template-missing", "training-job-otel",
         _do(lambda s: s["training-job"]["metadata"].update(name="trainer")),
         "trainingJob[training-job-template]", "no training job template named 'training-job-template'"),
    # --- training-job-failure-policy -------------------------------------------------------------------
    Case("training-no-pod-failure-policy", "training-job-failure-policy",
         _do(lambda s: s["training-job"]["spec"]["jobTemplate"]["spec"].pop("podFailurePolicy")),
         "spec.jobTemplate.spec.podFailurePolicy", "no podFailurePolicy rule failing it"),
    Case("training-disruptions-counted", "training-job-failure-policy",
         _do(lambda s: s["training-job"]["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"].pop(1)),
         "spec.jobTemplate.spec.podFailurePolicy", "does not ignore disruptions"),
    Case("training-backoff-unbounded", "training-job-failure-policy",
         _do(lambda s: s["training-job"]["spec"]["jobTemplate"]["spec"].pop("backoffLimit")),
         "spec.jobTemplate.spec.backoffLimit", "expected a bound from 0 to 10"),
    Case("training-backoff-too-high", "training-job-failure-policy",
         _do(lambda s: s["training-job"]["spec"]["jobTemplate"]["spec"].update(backoffLimit=50)),
         "spec.jobTemplate.spec.backoffLimit", "backoffLimit is 50"),
    Case("training-rollbacks-unbounded", "training-job-failure-policy",
         _do(lambda s: _container(s, "training-job")["env"].pop(2)),
         "spec.jobTemplate.spec.template.spec.containers[trainer].env", "without a bound"),
    Case("training-remediation-unsaid", "training-job-failure-policy",
         _do(lambda s: _container(s, "training-job")["env"].pop(1)),
         "spec.jobTemplate.spec.template.spec.containers[trainer].env", "does not say whether remediation is on"),
    # --- training-job-autolog --------------------------------------------------------------------------
    Case("training-entrypoint-unwrapped", "training-job-autolog",
         _do(lambda s: [_container(s, "training-job").pop(k) for k in ("command", "args")]),
         "spec.jobTemplate.spec.template.spec.containers[trainer].command",
         "runs the image's entrypoint with FOXHUNT_AUTOLOG=on, not through foxhunt-run or foxhunt-torchrun"),
    Case("training-program-unwrapped", "training-job-autolog",
         _do(lambda s: _container(s, "training-job").update(command=["python"], args=["-m", "train"])),
         "spec.jobTemplate.spec.template.spec.containers[trainer].command", "runs 'python' with FOXHUNT_AUTOLOG=on"),
    Case("training-autolog-unsaid", "training-job-autolog",
         _do(lambda s: _container(s, "training-job")["env"].pop(3)),
         "spec.jobTemplate.spec.template.spec.containers[trainer].env",
         "does not say whether its program is auto-instrumented"),
    Case("training-autolog-misspelt", "training-job-autolog",
         _do(lambda s: _container(s, "training-job")["env"][3].update(value="true")),
         "spec.jobTemplate.spec.template.spec.containers[trainer].env", "FOXHUNT_AUTOLOG is 'true', expected on or off"),
    # --- Grafana ---------------------------------------------------------------------------------------
    Case("dashboard-unlabelled", "dashboard-configmaps",
         _do(lambda s: s["dashboard-training"]["metadata"]["labels"].pop("grafana_dashboard")),
         "metadata.labels.grafana_dashboard", "without the sidecar label"),
    Case("dashboard-uid-too-long", "dashboard-configmaps",
         _set(["data", "foxhunt-training-cockpit.json"], dashboard("foxhunt-ml-training-cockpit-per-fold-gpu-view"),
              key="dashboard-training"),
         "data[foxhunt-training-cockpit.json].uid", "Grafana accepts at most 40"),
    Case("dashboard-oversize", "dashboard-configmaps", _oversize, "data", "the API server rejects objects of 1 MiB"),
    Case("dashboard-invalid-json", "dashboard-configmaps",
         _set(["data", "foxhunt-training-cockpit.json"], '{"uid": "x", ', key="dashboard-training"),
         "data[foxhunt-training-cockpit.json]", "is not valid JSON"),
    Case("dashboard-uid-duplicate", "dashboard-uids-unique",
         _set(["data"], {"foxhunt-traces.json": dashboard("foxhunt-training-cockpit")}, key="dashboard-traces"),
         "data[foxhunt-traces.json].uid", "'foxhunt-training-cockpit' is also used by"),
    Case("datasource-link-dangling", "datasource-links-resolve",
         _set(["data", "datasources.yaml"], DATASOURCES_YAML.replace("datasourceUid: loki", "datasourceUid: logs"),
              key="datasources"),
         "datasources[Tempo].jsonData.tracesToLogsV2.datasourceUid", "links to datasource uid 'logs'"),
    Case("datasource-unlabelled", "datasource-links-resolve",
         _do(lambda s: s["datasources"]["metadata"]["labels"].pop("grafana_datasource")),
         "metadata.labels.grafana_datasource", "lacks the sidecar label"),
    # --- alert rules -----------------------------------------------------------------------------------
    Case("alert-no-runbook", "alert-rule-annotations",
         _do(lambda s: s["rules"]["spec"]["groups"][0]["rules"][0]["annotations"].pop("runbook_url")),
         "spec.groups[ml_training_performance].rules[TrainingNaNDetected].annotations.runbook_url",
         "has no runbook_url"),
    Case("alert-bad-severity", "alert-rule-annotations",
         _do(lambda s: s["rules"]["spec"]["groups"][0]["rules"][0]["labels"].update(severity="page")),
         "rules[TrainingNaNDetected].labels.severity", "has severity 'page'"),
    Case("alert-file-no-summary", "alert-rule-annotations",
         _set(["data", "foxhunt-ml.rules.yaml"],
              "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    labels: {severity: warning}\n"
              "    annotations: {description: d, runbook_url: 'https://x.invalid/r#a'}\n", key="rules-file"),
         "data[foxhunt-ml.rules.yaml].groups[g].rules[A].annotations.summary", "has no summary"),
    # --- Prometheus replicas ------------------------------------------------------------------------
    Case("replicas-without-label", "prometheus-replicas", _prometheus_resource(replicas=2, replicaExternalLabelName=""),
         "spec.replicaExternalLabelName", "2 replicas carry no replica label"),
    Case("replica-label-overridden", "prometheus-replicas",
         _prometheus_resource(replicas=2, externalLabels={"cluster": "dev", "prometheus_replica": "one"}),
         "spec.externalLabels.prometheus_replica", "to one value for every replica"),
    # --- plaintext secrets -----------------------------------------------------------------------------
    Case("secret-url-password", "no-plaintext-secrets",
         _plain_configmap({"import.sh": "curl -X POST http://admin:foxhunt123@localhost:3000/api/dashboards/db"}),
         "data.import.sh", "a URL carries a password (admin:fo…"),
    Case("secret-env-literal", "no-plaintext-secrets",
         _do(lambda s: _container(s)["env"].append({"name": "GF_SECURITY_ADMIN_PASSWORD", "value": "foxhunt123"})),
         "containers[0].env[1].value", "GF_SECURITY_ADMIN_PASSWORD is set to a literal credential"),
    Case("secret-configmap-key", "no-plaintext-secrets", _plain_configmap({"registry-password": "s3cr3t-value"}),
         "data.registry-password", "key 'registry-password' holds a literal credential"),
    Case("secret-embedded-file", "no-plaintext-secrets",
         _plain_configmap({"trainer.yaml": "wandb:\n  api_key: 0123456789abcdef\n"}),
         "data.trainer.yaml", "embedded setting 'api_key' holds a literal credential"),
    Case("secret-token-annotation", "no-plaintext-secrets",
         _do(lambda s: s["gpu-poller"]["metadata"].update(annotations={"ci/token": "ghp_" + "a1B2" * 9})),
         "metadata.annotations.ci/token", "key 'ci/token' holds a literal credential"),
    Case("secret-cli-flag", "no-plaintext-secrets",
         _do(lambda s: _container(s)["args"].extend(["--api-token", "abc123def456"])),
         "containers[0].args[2]", "argument --api-token is given a literal credential"),
    # --- network policies ----------------------------------------------------------------------------
    Case("network-uncovered-poller", "network-policy-coverage", _do(lambda s: s.pop("gpu-poller-network")),
         "spec.template.metadata.labels", "no NetworkPolicy in monitoring-dev selects them"),
    Case("network-selector-misses-training", "network-policy-coverage",
         _set(["spec", "podSelector", "matchLabels", "app.kubernetes.io/name"], "trainer", key="training-network"),
         "spec.jobTemplate.spec.template.metadata.labels", "serve port 9094 but no NetworkPolicy"),
    Case("network-egress-only", "network-policy-coverage", _set(["spec", "policyTypes"], ["Egress"], key="gpu-poller-network"),
         "spec.template.metadata.labels", "every pod of the cluster can reach it"),
    Case("network-open-ingress", "network-policy-coverage",
         _do(lambda s: s["training-network"]["spec"]["ingress"].append({"ports": [{"port": 9094}]})),
         "spec.ingress[1].from", "from anywhere"),
    Case("network-whole-namespace", "network-policy-coverage",
         _do(lambda s: s["gpu-poller-network"]["spec"]["ingress"][0]["from"][0].pop("podSelector")),
         "spec.ingress[0].from[0]", "admits every pod of the namespace it names"),
    Case("network-ip-block", "network-policy-coverage",
         _set(["spec", "ingress", 0, "from"], [{"ipBlock": {"cidr": "0.0.0.0/0"}}], key="gpu-poller-network"),
         "spec.ingress[0].from[0]", "admits an IP block"),
    # --- namespaces and labels ------------------------------------------------------------------------
    Case("namespace-missing", "explicit-namespace", _delete(["metadata", "namespace"], key="gpu-poller-service"),
         "metadata.namespace", "Service gpu-poller has no namespace"),
    Case("namespace-foreign", "explicit-namespace", _set(["metadata", "namespace"], "default", key="training-job"),
         "metadata.namespace", "'default' is not one of this stack's namespaces",
         frozenset({"network-policy-coverage"})),  # its NetworkPolicy stays behind in training-dev
    Case("label-missing", "common-labels", _delete(["metadata", "labels", "app.kubernetes.io/part-of"]),
         "metadata.labels.app.kubernetes.io/part-of", "the common label app.kubernetes.io/part-of is missing"),
)  # fmt: skip
