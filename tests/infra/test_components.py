"""What every component puts onto the cluster, for all three stacks, read from the mock-engine run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer import termination, trainer_env
from foxhunt_trainer.contract import catalog
from infra import REPO_ROOT, components, generated_content, program
from infra.components import alert_routing, common, gpu_poller, grafana, training_job
from infra.components.service_scrape import PATCH_FIELD_MANAGER_ANNOTATION
from infra.kube_provider import PROVIDER_TYPE
from infra.offline import artifacts, render
from infra.offline.checks import ALL_CHECKS
from infra.offline.mock_engine import run_program
from infra.offline.result import RenderResult
from infra.settings import (
    PROJECT,
    RECEIVER_KEYS,
    ImageBuild,
    PinnedImage,
    Settings,
    placeholder_secret,
    read_stack_config,
    validate_stack,
)
from observability import alertmanager, notifications, scrape_config
from observability.config import ObservabilityConfig
from observability.partials import PARTIAL_SERIES_REGEX, is_partial
from observability.rules import Tier
from observability.scrape_config import PATH_ANNOTATION, PORT_ANNOTATION, SCRAPE_ANNOTATION, SERVICE_LABEL
from tests.infra.support import STACKS, is_secret, objects, one, run_raw

COMPONENT_TYPES = {
    "foxhunt:observability:ServiceScrapeAnnotations",
    "foxhunt:observability:ScrapeDiscovery",
    "foxhunt:observability:TrainingJobTemplate",
    "foxhunt:observability:GpuPoller",
    "foxhunt:observability:AlertRules",
    "foxhunt:observability:AlertRouting",
    "foxhunt:observability:GrafanaProvisioning",
    "foxhunt:observability:NetworkIsolation",
}
# Only in stacks with scrapeSecurity.
SECURED_COMPONENT_TYPES = {"foxhunt:observability:ScrapeCredentials"}


def component_types(settings: Settings) -> set[str]:
    return COMPONENT_TYPES | (SECURED_COMPONENT_TYPES if settings.observability.scrape_security else set())


def expected_scrape_annotations(port: int, path: str, secured: bool, cfg: ObservabilityConfig) -> dict[str, str]:
    if not secured:
        return scrape_config.pod_scrape_annotations(port, path, critical=cfg)
    return {
        **scrape_config.pod_scrape_annotations(port, path, "https", critical=cfg),
        scrape_config.SECURED_ANNOTATION: scrape_config.SECURED_VALUE,
    }


COMMON_LABEL_KEYS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def env_value(container: dict[str, Any], name: str) -> str:
    value = env_of(container)[name]["value"]
    assert isinstance(value, str)
    return value


def field_ref(container: dict[str, Any], name: str) -> str:
    path = env_of(container)[name]["valueFrom"]["fieldRef"]["fieldPath"]
    assert isinstance(path, str)
    return path


def check_otel_env(container: dict[str, Any], endpoint: str, service: str, environment: str) -> dict[str, str]:
    """OTEL env present, downward-API variables defined before the attributes that reference them."""
    names = [e["name"] for e in container["env"]]
    assert env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT") == endpoint
    assert env_value(container, "OTEL_SERVICE_NAME") == service
    assert field_ref(container, common.POD_NAME_ENV) == "metadata.name"
    assert field_ref(container, common.NAMESPACE_ENV) == "metadata.namespace"
    assert field_ref(container, common.NODE_NAME_ENV) == "spec.nodeName"
    raw = env_value(container, "OTEL_RESOURCE_ATTRIBUTES")
    attributes = dict(item.split("=", 1) for item in raw.split(","))
    assert attributes["deployment.environment"] == environment
    for key, var in (
        ("k8s.namespace.name", common.NAMESPACE_ENV),
        ("k8s.pod.name", common.POD_NAME_ENV),
        ("k8s.node.name", common.NODE_NAME_ENV),
    ):
        assert attributes[key] == f"$({var})"
        # Kubernetes expands $(VAR) only for variables defined earlier in the list.
        assert names.index(var) < names.index("OTEL_RESOURCE_ATTRIBUTES")
    return attributes


# ------------------------------------------------------------------------------------------------
# Structure: components, parenting, names, namespaces, labels
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_is_a_child_of_one_component(rendered: dict[str, RenderResult], stack: str) -> None:
    resources = rendered[stack].run.resources
    expected = component_types(rendered[stack].settings)
    components = {r.urn: r for r in resources if r.type in expected}
    assert {r.type for r in components.values()} == expected
    assert all(not r.custom for r in components.values())
    for resource in resources:
        if resource.type in expected or resource.type == PROVIDER_TYPE:
            assert resource.parent_urn.endswith(f"pulumi:pulumi:Stack::{PROJECT}-{stack}")
        else:
            assert resource.parent_urn in components, f"{resource.type} {resource.name} is not parented to a component"


@pytest.mark.parametrize("stack", STACKS)
def test_objects_have_explicit_names_namespaces_and_common_labels(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    settings = result.settings
    known_namespaces = {settings.namespaces.platform, settings.namespaces.monitoring, settings.namespaces.training}
    for path, manifest in result.manifests.items():
        meta = manifest["metadata"]
        assert meta.get("name") and meta.get("namespace") in known_namespaces, path
        if path.startswith("kubernetes/deploymentpatch_"):
            # Another system's Deployment: no labels of ours on its metadata (see ServiceScrapeAnnotations).
            assert "labels" not in meta
            continue
        labels = meta["labels"]
        assert set(labels) >= COMMON_LABEL_KEYS, path
        for key, value in settings.common_labels.items():
            assert labels[key] == value
    # Logical names equal the object names' stable parts: nothing auto-named.
    for resource in result.run.resources:
        if resource.type.startswith("kubernetes:"):
            assert "name" in resource.inputs["metadata"]


# ------------------------------------------------------------------------------------------------
# ServiceScrapeAnnotations
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_service_gets_scrape_annotations_and_otel_env(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    patches = {p["metadata"]["name"]: p for p in objects(result, "Deployment")}
    assert sorted(patches) == sorted(s.name for s in settings.services)
    assert len(patches) == len(settings.services)
    for service in settings.services:
        patch = patches[service.name]
        assert patch["apiVersion"] == "apps/v1"
        assert patch["metadata"]["namespace"] == settings.namespaces.platform
        assert patch["metadata"]["annotations"] == {PATCH_FIELD_MANAGER_ANNOTATION: common.FIELD_MANAGER}
        template = patch["spec"]["template"]
        assert set(patch["spec"]) == {"template"}, "a patch must touch only the pod template"
        cfg = settings.observability_config()
        # the training service reports NaN values: scraped at the critical interval
        critical = scrape_config.critical_scrape_annotations(cfg) if service.name == cfg.training_service else {}
        assert template["metadata"]["annotations"] == {
            SCRAPE_ANNOTATION: "true",
            PORT_ANNOTATION: str(service.port),
            PATH_ANNOTATION: service.path,
            scrape_config.SCHEME_ANNOTATION: "http",
            **critical,
        }
        assert template["metadata"]["labels"] == {SERVICE_LABEL: service.name}
        (container,) = template["spec"]["containers"]
        assert container["name"] == service.container
        assert set(container) == {"name", "env"}
        attributes = check_otel_env(container, settings.endpoints.tempo_otlp_grpc, service.name, settings.environment)
        if service.model_type != "none":
            assert attributes["ml.model_type"] == service.model_type


def test_patches_remove_their_fields_on_destroy_and_do_not_force_conflicts(
    rendered: dict[str, RenderResult],
) -> None:
    raw = run_raw("dev")
    patches = [r for r in raw if r.type == "kubernetes:apps/v1:DeploymentPatch"]
    assert len(patches) == len(rendered["dev"].settings.services)
    for patch in patches:
        assert patch.retain_on_delete is False
        assert "pulumi.com/patchForce" not in patch.inputs["metadata"]["annotations"]


# ------------------------------------------------------------------------------------------------
# ScrapeDiscovery
# ------------------------------------------------------------------------------------------------


def test_annotations_mode_delivers_the_scrape_config_in_the_named_configmap(
    rendered: dict[str, RenderResult],
) -> None:
    result = rendered["dev"]
    settings = result.settings
    assert settings.scrape.mode == "annotations" and settings.scrape.delivery == "configmap"
    assert not objects(result, "PodMonitor")
    (configmap,) = [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == settings.scrape.object_name]
    assert configmap["metadata"]["namespace"] == settings.namespaces.monitoring
    text = configmap["data"][scrape_config.CONFIGMAP_KEY]
    assert text == result.files["prometheus/scrape-config.yaml"]
    (job,) = yaml.safe_load(text)["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": sorted(["foxhunt-dev", "training-dev", "monitoring-dev"])}}
    ]
    assert job["scrape_interval"] == "15s"
    assert job["relabel_configs"] == scrape_config.annotation_relabel_configs()


def test_annotations_mode_can_deliver_the_operators_additional_scrape_configs_secret() -> None:
    result = render.render_stack(
        "staging",
        overrides={"scrape": {"mode": "annotations", "delivery": "secret", "objectName": "additional-scrape-configs"}},
    )
    assert not objects(result, "PodMonitor")
    secret = next(s for s in objects(result, "Secret") if s["metadata"]["name"] == "additional-scrape-configs")
    jobs = yaml.safe_load(secret["stringData"][scrape_config.SECRET_KEY])
    assert isinstance(jobs, list) and [j["job_name"] for j in jobs] == [scrape_config.JOB_NAME]
    # annotations mode also means classic rule and alertmanager delivery
    assert objects(result, "PrometheusRule") == [] and objects(result, "AlertmanagerConfig") == []


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_operator_mode_uses_a_podmonitor_the_prometheus_selects(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    monitor = one(result, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == scrape_config.POD_MONITOR_NAME
    for key, value in settings.scrape.operator_selector.items():
        assert monitor["metadata"]["labels"][key] == value
    spec = monitor["spec"]
    assert spec["namespaceSelector"]["matchNames"] == sorted(
        [settings.namespaces.platform, settings.namespaces.training, settings.namespaces.monitoring]
    )
    security = settings.observability.scrape_security
    endpoints = spec["podMetricsEndpoints"]
    assert len(endpoints) == (2 if security else 1)
    endpoint = endpoints[0]
    assert endpoint["interval"] == f"{settings.observability.scrape_interval_seconds}s"
    if security:
        # the plain endpoint leaves the secured pods to the second, which speaks TLS with the credential
        drop, secured = scrape_config.secured_selection(False), scrape_config.secured_selection(True)
        assert endpoint["relabelings"][0] == scrape_config.to_operator_relabeling(drop)
        assert endpoints[1]["relabelings"][0] == scrape_config.to_operator_relabeling(secured)
        assert endpoints[1]["scheme"] == "https"
        assert endpoints[1]["tlsConfig"]["serverName"] == security.server_name
        assert endpoints[1]["authorization"]["credentials"] == {
            "name": security.credentials_secret,
            "key": security.credential_key,
        }
    keep = endpoint["relabelings"][1 if security else 0]
    assert keep == {
        "sourceLabels": [scrape_config.annotation_label(SCRAPE_ANNOTATION)],
        "regex": "true",
        "action": "keep",
    }
    # no scrape-config object of the annotations mode alongside (would scrape everything twice)
    names = {m["metadata"]["name"] for m in result.manifests.values()}
    assert settings.scrape.object_name not in names


# ------------------------------------------------------------------------------------------------
# TrainingJobTemplate
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_training_cronjob_is_a_suspended_template_with_otel_env_for_the_stacks_tempo(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    settings = result.settings
    job_settings = settings.training_job
    cfg = settings.observability_config()
    cronjob = one(result, "CronJob")
    assert cronjob["metadata"]["name"] == job_settings.name
    assert cronjob["metadata"]["namespace"] == settings.namespaces.training
    assert cronjob["metadata"]["annotations"][training_job.DELETION_POLICY_ANNOTATION] == "orphan"
    spec = cronjob["spec"]
    assert spec["suspend"] is True
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == job_settings.backoff_limit
    assert job["ttlSecondsAfterFinished"] == job_settings.ttl_seconds_after_finished
    pod = job["template"]
    annotations = dict(pod["metadata"]["annotations"])
    annotations.pop(scrape_config.RANK_PORTS_ANNOTATION, None)
    secured = settings.observability.scrape_security is not None
    assert annotations == expected_scrape_annotations(9094, "/metrics", secured, cfg)
    assert pod["metadata"]["labels"][SERVICE_LABEL] == cfg.training_job_service
    pod_spec = pod["spec"]
    assert pod_spec["restartPolicy"] == "Never"
    assert pod_spec["runtimeClassName"] == "nvidia"
    assert pod_spec["nodeSelector"] == dict(job_settings.node_selector)
    (container,) = pod_spec["containers"]
    assert container["image"] == job_settings.image and "@sha256:" in container["image"]
    gpus = str(job_settings.gpu_count)
    assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    if job_settings.command:  # torchrun: one metrics port per local rank, scraped one by one
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert {n: v for n, v in ports.items() if n.startswith("metrics-")} == {
            f"metrics-{i}": 9094 + i for i in range(job_settings.gpu_count)
        }
        assert pod["metadata"]["annotations"][scrape_config.RANK_PORTS_ANNOTATION] == "true"
    else:
        assert container["ports"] == [{"name": "metrics", "containerPort": 9094, "protocol": "TCP"}]
    tempo = f"http://tempo.{settings.namespaces.monitoring}.svc.cluster.local:4317"
    assert settings.endpoints.tempo_otlp_grpc == tempo
    attributes = check_otel_env(container, tempo, cfg.training_job_service, settings.environment)
    assert attributes["ml.model_type"] == job_settings.model_type
    assert attributes["k8s.job.name"] == f"$({trainer_env.JOB_NAME_ENV})"
    assert field_ref(container, trainer_env.JOB_NAME_ENV) == "metadata.labels['batch.kubernetes.io/job-name']"
    names = [e["name"] for e in container["env"]]
    assert names.index(trainer_env.JOB_NAME_ENV) < names.index("OTEL_RESOURCE_ATTRIBUTES")
    # The trainer waits for one more scrape before exiting: two of this stack's scrape intervals.
    wait = {e["name"]: e.get("value") for e in container["env"]}[trainer_env.FINAL_SCRAPE_WAIT_ENV]
    assert wait == str(2 * cfg.scrape_interval_seconds) == {"prod": "20"}.get(stack, "30")
    # On SIGTERM it stops the job and flushes within the pod's grace period, which it reads from here.
    grace = {e["name"]: e.get("value") for e in container["env"]}[trainer_env.TERMINATION_GRACE_ENV]
    assert grace == str(pod_spec["terminationGracePeriodSeconds"])
    assert termination.flush_budget(float(grace)) >= int(wait)  # the final-scrape wait fits into it
    # NVML in the container (the `utility` capability) names the job's GPUs; no privilege is added.
    assert {e["name"]: e.get("value") for e in container["env"]}["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert not any("hostPath" in v for v in pod_spec.get("volumes", []))


@pytest.mark.parametrize("stack", STACKS)
def test_the_job_template_file_carries_the_cronjobs_pod_template(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    path = f"kubernetes/job_{settings.namespaces.training}_{settings.training_job.name}.yaml"
    job = yaml.safe_load(result.files[path])
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    assert job["metadata"]["generateName"].endswith("-training-") and "name" not in job["metadata"]
    assert job["metadata"]["namespace"] == settings.namespaces.training
    assert job["spec"] == one(result, "CronJob")["spec"]["jobTemplate"]["spec"]


def test_the_otel_endpoint_comes_from_the_stack_settings() -> None:
    """A different Tempo/collector endpoint in the settings reaches the template and every service."""
    result = render.render_stack(
        "dev",
        overrides={
            "endpoints": {
                "tempoOtlpGrpc": "http://otel-gateway.observability.svc:4317",
                "tempoQuery": "http://tempo.monitoring-dev.svc.cluster.local:3200",
                "loki": "http://loki-gateway.monitoring-dev.svc.cluster.local:80",
                "prometheus": "http://prometheus-operated.monitoring-dev.svc.cluster.local:9090",
            },
        },
    )
    container = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT") == "http://otel-gateway.observability.svc:4317"
    for patch in objects(result, "Deployment"):
        (service_container,) = patch["spec"]["template"]["spec"]["containers"]
        assert (
            env_value(service_container, "OTEL_EXPORTER_OTLP_ENDPOINT") == "http://otel-gateway.observability.svc:4317"
        )


# ------------------------------------------------------------------------------------------------
# GpuPoller
# ------------------------------------------------------------------------------------------------


def assert_pss_restricted(pod_spec: dict[str, Any]) -> None:
    pod_context = pod_spec["securityContext"]
    assert pod_context["runAsNonRoot"] is True and pod_context["runAsUser"] == common.NONROOT_UID
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod_spec.get(forbidden)
    for volume in pod_spec.get("volumes", []):
        assert set(volume) - {"name"} <= {"emptyDir", "configMap", "secret", "projected", "downwardAPI"}
        assert "hostPath" not in volume
    for container in pod_spec["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["privileged"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == common.NONROOT_UID
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])


@pytest.mark.parametrize("stack", STACKS)
def test_poller_daemonset_runs_restricted_on_gpu_nodes_only(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    poller = settings.poller
    daemonset = one(result, "DaemonSet")
    assert daemonset["metadata"]["namespace"] == settings.namespaces.monitoring
    spec = daemonset["spec"]
    strategy = spec["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    expected_unavailable = int(poller.max_unavailable) if poller.max_unavailable.isdigit() else poller.max_unavailable
    assert strategy["rollingUpdate"]["maxUnavailable"] == expected_unavailable
    template = spec["template"]
    assert set(spec["selector"]["matchLabels"].items()) <= set(template["metadata"]["labels"].items())
    security = settings.observability.scrape_security
    assert template["metadata"]["annotations"] == expected_scrape_annotations(
        poller.port, "/metrics", bool(security), result.settings.observability_config()
    )
    pod_spec = template["spec"]
    assert pod_spec["nodeSelector"] == dict(poller.node_selector) == {"nvidia.com/gpu.present": "true"}
    assert pod_spec["tolerations"] == common.tolerations(poller.tolerations)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec["tolerations"]
    assert pod_spec["runtimeClassName"] == "nvidia"
    assert pod_spec["priorityClassName"] == poller.priority_class
    assert pod_spec["automountServiceAccountToken"] is False
    assert_pss_restricted(pod_spec)
    (container,) = pod_spec["containers"]
    web_args = ["--web-config-file", "/etc/foxhunt/metrics-web/web-config.yaml"] if security else []
    assert container["args"] == ["--listen", f"0.0.0.0:{poller.port}", "--min-interval",
                                 f"{poller.min_interval_seconds:g}", *web_args]  # fmt: skip
    assert env_value(container, "NVIDIA_VISIBLE_DEVICES") == "all"
    assert env_value(container, "NVIDIA_DRIVER_CAPABILITIES") == "utility"
    assert field_ref(container, "NODE_NAME") == "spec.nodeName"
    assert "nvidia.com/gpu" not in container["resources"]["limits"], "the poller observes GPUs, it must not claim one"
    for probe in ("livenessProbe", "readinessProbe"):
        if security and security.client_cert_secret:  # the kubelet has no client certificate
            assert container[probe]["tcpSocket"] == {"port": "metrics"}
        else:
            scheme = "HTTPS" if security else "HTTP"
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": scheme}
    assert container["ports"] == [{"name": "metrics", "containerPort": poller.port, "protocol": "TCP"}]
    if stack == "prod":
        assert len(pod_spec["tolerations"]) == 2


@pytest.mark.parametrize("stack", STACKS)
def test_poller_image_is_built_and_pushed_or_pinned_by_digest(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    images = result.run.of_type("docker-build:index:Image")
    container = one(result, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    if isinstance(settings.poller.image, PinnedImage):
        assert stack == "prod"
        assert images == [], "a pinned image must not be built"
        assert container["image"] == settings.poller.image.ref
        return
    assert isinstance(settings.poller.image, ImageBuild)
    (image,) = images
    inputs = image.inputs
    build = settings.poller.image
    assert inputs["push"] is True
    assert inputs["tags"] == [f"{build.registry}/{build.repository}:{stack}"]
    assert inputs["registries"] == [
        {
            "address": build.registry,
            "username": build.username,
            "password": placeholder_secret(stack, "registryPassword"),
        }
    ]
    context = Path(REPO_ROOT) / inputs["context"]["location"]
    assert context.resolve() == Path(REPO_ROOT).resolve()
    assert (Path(REPO_ROOT) / inputs["dockerfile"]["location"]).resolve() == (
        Path(REPO_ROOT) / "poller" / "Dockerfile"
    ).resolve()
    assert (Path(REPO_ROOT) / inputs["dockerfile"]["location"]).is_file()
    # the DaemonSet runs the pushed digest, never the tag
    assert container["image"].startswith(f"{build.registry}/{build.repository}@sha256:")
    assert ":" + stack not in container["image"]


def test_registry_password_is_sent_as_a_secret() -> None:
    (image,) = [r for r in run_raw("dev") if r.type == "docker-build:index:Image"]
    registries = image.inputs["registries"]
    # the secret password makes the engine treat the whole list as secret (or at least the password)
    assert is_secret(registries) or is_secret(registries[0]["password"])
    plain = registries["value"] if is_secret(registries) else registries
    assert "offline-placeholder" in json.dumps(plain)


@pytest.mark.parametrize("stack", STACKS)
def test_poller_service_is_headless_and_selects_the_pods(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    (service,) = [
        s for s in objects(result, "Service") if s["metadata"]["namespace"] == result.settings.namespaces.monitoring
    ]
    pod_labels = one(result, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert set(service["spec"]["selector"].items()) <= set(pod_labels.items())
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": result.settings.poller.port, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_training_pods_are_restricted_too(rendered: dict[str, RenderResult]) -> None:
    for result in rendered.values():
        assert_pss_restricted(one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"])


# ------------------------------------------------------------------------------------------------
# AlertRules and AlertRouting
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_rules_are_delivered_by_mode_from_the_rendered_rule_groups(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    settings = result.settings
    rules_file = yaml.safe_load(result.files[artifacts.RULES_PATH])
    assert rules_file["groups"], "no rule groups rendered"
    if settings.scrape.mode == "operator":
        rule = one(result, "PrometheusRule")
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        for key, value in settings.scrape.operator_selector.items():
            assert rule["metadata"]["labels"][key] == value
        assert rule["spec"]["groups"] == rules_file["groups"]
        assert not [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == "foxhunt-ml-rules"]
    else:
        assert objects(result, "PrometheusRule") == []
        (configmap,) = [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == "foxhunt-ml-rules"]
        assert configmap["data"] == {"foxhunt-rules.yaml": result.files[artifacts.RULES_PATH]}


@pytest.mark.parametrize("stack", STACKS)
def test_receiver_urls_appear_only_in_secret_string_data(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    urls = [placeholder_secret(stack, k) for k in RECEIVER_KEYS]
    holders = []
    for path, manifest in result.manifests.items():
        text = json.dumps(manifest)
        if any(url in text for url in urls):
            holders.append(path)
            assert manifest["kind"] == "Secret"
            assert all(url not in json.dumps({k: v for k, v in manifest.items() if k != "stringData"}) for url in urls)
    assert len(holders) == 1
    for path, text in result.files.items():
        if path not in result.manifests:
            assert not any(url in text for url in urls), path
    raw = run_raw(stack)
    routing_secrets = (alert_routing.CONFIG_SECRET, alert_routing.RECEIVERS_SECRET)
    secrets = [
        r for r in raw if r.type == "kubernetes:core/v1:Secret" and r.inputs["metadata"]["name"] in routing_secrets
    ]
    (secret,) = secrets
    string_data = secret.inputs["stringData"]
    assert is_secret(string_data) or all(is_secret(v) for v in string_data.values())


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_operator_mode_routes_through_an_alertmanagerconfig_reading_urls_from_the_secret(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    config = one(result, "AlertmanagerConfig")
    assert config["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    secret = next(s for s in objects(result, "Secret") if s["metadata"]["name"] == alert_routing.RECEIVERS_SECRET)
    receivers = config["spec"]["receivers"]
    cfg = result.settings.observability_config()
    referenced = set()
    for receiver in receivers:
        kind = alertmanager.receiver_kind(cfg, receiver["name"])
        (configs_key,) = [k for k in receiver if k.endswith("Configs")]
        (receiver_config,) = receiver[configs_key]
        if kind == "webhook":
            assert configs_key == "webhookConfigs" and "url" not in receiver_config
            ref = receiver_config["urlSecret"]
            assert ref == {"name": alert_routing.RECEIVERS_SECRET, "key": receiver["name"]}
        elif kind == "slack":
            ref = receiver_config["apiURL"]
            assert configs_key == "slackConfigs" and ref["key"] == alertmanager.SLACK_API_URL_KEY
            assert receiver_config["channel"] and receiver_config["sendResolved"] is True
        else:
            ref = receiver_config["routingKey"]
            assert configs_key == "pagerdutyConfigs" and ref["key"] == alertmanager.PAGERDUTY_ROUTING_KEY_KEY
            assert "url" not in receiver_config  # PagerDuty's own Events API v2 endpoint
        assert ref["name"] == alert_routing.RECEIVERS_SECRET
        referenced.add(ref["key"])
    assert referenced == set(secret["stringData"])
    assert config["spec"]["route"]["routes"], "no severity routes"
    templates = next(
        c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == alert_routing.TEMPLATES_CONFIG_MAP
    )
    assert templates["data"] == {notifications.TEMPLATE_FILE: notifications.template_text()}


def test_classic_mode_ships_a_whole_alertmanager_config(rendered: dict[str, RenderResult]) -> None:
    """dev posts every severity to Slack: one Slack API URL, the heartbeat's webhook, the templates."""
    result = rendered["dev"]
    secret = next(s for s in objects(result, "Secret") if s["metadata"]["name"] == alert_routing.CONFIG_SECRET)
    config = yaml.safe_load(secret["stringData"][alert_routing.CONFIG_KEY])
    assert config["templates"] == [notifications.TEMPLATE_FILE]
    assert secret["stringData"][notifications.TEMPLATE_FILE] == notifications.template_text()
    urls = {c["url"] for r in config["receivers"] for c in r.get("webhook_configs", [])}
    assert urls == {placeholder_secret("dev", "alertHeartbeatUrl")}
    slack = {c["api_url"] for r in config["receivers"] for c in r.get("slack_configs", [])}
    assert slack == {placeholder_secret("dev", "alertSlackApiUrl")}
    assert objects(result, "AlertmanagerConfig") == []


# ------------------------------------------------------------------------------------------------
# GrafanaProvisioning
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_grafana_datasources_and_one_configmap_per_dashboard(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    settings = result.settings
    configmaps = objects(result, "ConfigMap")
    (datasources,) = [c for c in configmaps if c["metadata"]["labels"].get(grafana.DATASOURCE_LABEL) == "1"]
    assert datasources["metadata"]["namespace"] == settings.grafana.namespace
    assert datasources["data"] == {grafana.DATASOURCES_KEY: result.files[artifacts.DATASOURCES_PATH]}
    dashboards = [c for c in configmaps if c["metadata"]["labels"].get(grafana.DASHBOARD_LABEL) == "1"]
    dashboard_files = {p: t for p, t in result.files.items() if p.startswith("dashboards/")}
    assert len(dashboards) == len(dashboard_files) >= 4
    for configmap in dashboards:
        assert configmap["metadata"]["annotations"] == {
            grafana.FOLDER_ANNOTATION: settings.observability.grafana_folder
        }
        assert configmap["metadata"]["namespace"] == settings.grafana.namespace
        ((key, text),) = configmap["data"].items()
        uid = key.removesuffix(".json")
        assert configmap["metadata"]["name"] == grafana.dashboard_configmap_name(uid)
        assert dashboard_files[f"dashboards/{uid}.json"] == text
        assert json.loads(text)["uid"] == uid
        assert grafana.object_size(configmap) < grafana.OBJECT_LIMIT_BYTES


def test_a_dashboard_over_the_object_limit_fails_before_registering(monkeypatch: pytest.MonkeyPatch) -> None:
    real = generated_content.generated

    def huge(cfg: Any) -> generated_content.Generated:
        gen = real(cfg)
        big = json.dumps({"uid": "huge", "panels": ["x" * 1024] * 1100})
        return dataclasses.replace(gen, dashboards={**gen.dashboards, "huge": big})

    monkeypatch.setattr(generated_content, "generated", huge)
    with pytest.raises(Exception, match=r"dashboard 'huge'.*over the 1 MiB"):
        render.render_stack("dev")


# ------------------------------------------------------------------------------------------------
# Rendered files
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_files_come_from_the_generators(rendered: dict[str, RenderResult], stack: str) -> None:
    from observability import rules

    result = rendered[stack]
    cfg = result.settings.observability_config()
    assert result.files[artifacts.RULES_PATH] == rules.rules_file_yaml(cfg)
    scrape = yaml.safe_load(result.files[artifacts.SCRAPE_CONFIG_PATH])
    assert scrape["scrape_configs"][0]["scrape_interval"] == f"{result.settings.observability.scrape_interval_seconds}s"
    datasources = yaml.safe_load(result.files[artifacts.DATASOURCES_PATH])
    assert [d["uid"] for d in datasources["datasources"]] == ["prometheus", "loki", "tempo"]


def test_gpu_poller_build_context_is_relative(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(Path(REPO_ROOT) / "infra")
    assert gpu_poller.build_context() == ".."
    monkeypatch.chdir(REPO_ROOT)
    assert gpu_poller.build_context() == "."


@pytest.mark.parametrize("stack", STACKS)
def test_two_instances_of_every_component_register_without_colliding(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    """Children are named after their component, so a second instance under another name registers
    its own children (Pulumi rejects two resources with the same URN)."""
    settings = validate_stack(read_stack_config(stack))
    args = program.component_args(settings)

    def twice() -> None:
        for suffix in ("a", "b"):
            components.ServiceScrapeAnnotations(f"platform-services-{suffix}", args.service_scrape)
            components.ScrapeDiscovery(f"scrape-discovery-{suffix}", args.scrape_discovery)
            components.TrainingJobTemplate(f"training-job-{suffix}", args.training_job)
            components.GpuPoller(f"gpu-poller-{suffix}", args.gpu_poller)
            components.AlertRules(f"alert-rules-{suffix}", args.alert_rules)
            components.AlertRouting(f"alert-routing-{suffix}", args.alert_routing)
            components.GrafanaProvisioning(f"grafana-{suffix}", args.grafana)
            components.NetworkIsolation(f"network-{suffix}", args.network)
            if args.scrape_credentials is not None:
                components.ScrapeCredentials(f"scrape-credentials-{suffix}", args.scrape_credentials)

    run = run_program(twice, project=PROJECT, stack=stack, config={}, secret_keys=[])
    # (the stack's one Kubernetes provider is the program's, not a component's)
    assert len(run.resources) == 2 * len([r for r in rendered[stack].run.resources if r.type != PROVIDER_TYPE])
    urns = [r.urn for r in run.resources]
    assert len(set(urns)) == len(urns)


# ------------------------------------------------------------------------------------------------
# Scrape shards and rule tiers
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded() -> dict[str, RenderResult]:
    """dev (annotations mode, ConfigMap) and prod (operator mode, the global tier receiving the
    aggregates only) rendered with 3 scrape shards."""
    return {
        "dev": render.render_stack("dev", overrides={"prometheus": {"shards": 3}}),
        "prod": render.render_stack("prod", overrides={"prometheus": {"shards": 3, "remoteWrite": "aggregates"}}),
    }


@pytest.mark.slow
def test_sharded_annotations_mode_delivers_one_scrape_config_and_the_rule_tiers_per_key(
    sharded: dict[str, RenderResult],
) -> None:
    result = sharded["dev"]
    settings = result.settings
    (configmap,) = [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == settings.scrape.object_name]
    paths = artifacts.scrape_config_paths(3)
    assert sorted(configmap["data"]) == [f"scrape-config-shard-{i}.yaml" for i in range(3)]
    assert artifacts.SCRAPE_CONFIG_PATH not in result.files
    for shard, path in enumerate(paths):
        text = configmap["data"][f"scrape-config-shard-{shard}.yaml"]
        assert result.files[path] == text
        (job,) = yaml.safe_load(text)["scrape_configs"]
        assert job["job_name"] == scrape_config.JOB_NAME
        assert {"source_labels": ["__tmp_hash"], "regex": str(shard), "action": "keep"} in job["relabel_configs"]
    (rules_map,) = [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == "foxhunt-ml-rules"]
    assert rules_map["data"] == {
        f"foxhunt-rules-{tier.value}.yaml": result.files[artifacts.TIER_RULES_PATHS[tier]] for tier in Tier
    }
    assert objects(result, "PrometheusRule") == []
    for name, check in ALL_CHECKS:
        assert check(result) == [], name


def test_sharded_operator_mode_labels_a_prometheus_rule_per_tier_and_the_pod_monitor_hands_over_the_node(
    sharded: dict[str, RenderResult], rendered: dict[str, RenderResult]
) -> None:
    result = sharded["prod"]
    selector = result.settings.scrape.operator_selector
    by_tier = {r["metadata"]["labels"]["foxhunt.io/rule-tier"]: r for r in objects(result, "PrometheusRule")}
    assert sorted(by_tier) == ["global", "shard"]
    for tier in Tier:
        rule = by_tier[tier.value]
        assert rule["metadata"]["name"] == f"foxhunt-ml-rules-{tier.value}"
        assert selector.items() <= rule["metadata"]["labels"].items()
        assert rule["spec"]["groups"] == yaml.safe_load(result.files[artifacts.TIER_RULES_PATHS[tier]])["groups"]
    # The operator shards the PodMonitor itself; the PodMonitor's last relabeling gives it the pod's
    # node name to hash, so a node's poller and the training pods holding its GPUs share a shard.
    sharded_spec, one_spec = one(result, "PodMonitor")["spec"], one(rendered["prod"], "PodMonitor")["spec"]
    assert len(sharded_spec["podMetricsEndpoints"]) == len(one_spec["podMetricsEndpoints"])
    for sharded_endpoint, one_endpoint in zip(
        sharded_spec["podMetricsEndpoints"], one_spec["podMetricsEndpoints"], strict=True
    ):
        assert sharded_endpoint["relabelings"] == [
            *one_endpoint["relabelings"],
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "__tmp_hash", "action": "replace"},
        ]
        assert {**sharded_endpoint, "relabelings": []} == {**one_endpoint, "relabelings": []}
    assert {k: v for k, v in sharded_spec.items() if k != "podMetricsEndpoints"} == {
        k: v for k, v in one_spec.items() if k != "podMetricsEndpoints"
    }


@pytest.mark.parametrize("stack", STACKS)
def test_one_shard_renders_the_single_rules_object_and_both_tier_files(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    whole = yaml.safe_load(result.files[artifacts.RULES_PATH])["groups"]
    tiers = [yaml.safe_load(result.files[artifacts.TIER_RULES_PATHS[t]])["groups"] for t in Tier]
    names = sorted(str(r.get("alert") or r.get("record")) for g in whole for r in g["rules"])
    # The tier files hold every rule, and the shard tier's partials besides (the global rules combine them).
    split = [str(r.get("alert") or r.get("record")) for groups in tiers for g in groups for r in g["rules"]]
    assert names == sorted(n for n in split if not is_partial(n)) and any(is_partial(n) for n in split)
    assert artifacts.scrape_config_paths(1) == [artifacts.SCRAPE_CONFIG_PATH]
    assert all("foxhunt.io/rule-tier" not in r["metadata"]["labels"] for r in objects(result, "PrometheusRule"))


def _checkable(config_text: str, tmp_path: Path) -> Path:
    """The config with Kubernetes discovery swapped for file discovery (Debian's build lacks it)."""
    document = yaml.safe_load(config_text)
    for job in document.get("scrape_configs") or []:
        job.pop("kubernetes_sd_configs")
        job["file_sd_configs"] = [{"files": [str(tmp_path / "none.json")]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.slow
def test_every_server_of_a_sharded_stack_gets_a_config_promtool_accepts(
    sharded: dict[str, RenderResult], tmp_path: Path
) -> None:
    result = sharded["dev"]
    settings = result.settings
    (rules_map,) = [c for c in objects(result, "ConfigMap") if c["metadata"]["name"] == "foxhunt-ml-rules"]
    names = ["prometheus-shard-0.yml", "prometheus-shard-1.yml", "prometheus-shard-2.yml", "prometheus-global.yml"]
    scrape_files = artifacts.scrape_config_paths(3)
    for key, rules_text in rules_map["data"].items():  # mounted next to the config
        (tmp_path / key).write_text(rules_text)
    for name in names:
        text = result.files[f"prometheus/{name}"]
        document = yaml.safe_load(text)
        assert document["global"]["external_labels"] == {"cluster": "foxhunt-dev"}
        assert set(document["rule_files"]) <= set(rules_map["data"])
        if name == "prometheus-global.yml":
            assert "scrape_configs" not in document and "remote_write" not in document
            assert document["rule_files"] == ["foxhunt-rules-global.yaml"]
        else:
            shard = int(name.removesuffix(".yml").rsplit("-", 1)[1])
            assert document["rule_files"] == ["foxhunt-rules-shard.yaml"]
            assert document["scrape_configs"] == yaml.safe_load(result.files[scrape_files[shard]])["scrape_configs"]
            (remote,) = document["remote_write"]
            assert (remote["url"], remote["send_exemplars"]) == (settings.prometheus.remote_write_url, True)
            # Every partial gets this shard's number as `shard`; with `remoteWrite: all` nothing is dropped.
            assert remote["write_relabel_configs"] == [
                {"source_labels": ["__name__"], "regex": PARTIAL_SERIES_REGEX, "target_label": "shard",
                 "replacement": str(shard)},
            ]  # fmt: skip
            assert settings.prometheus.remote_write_url == f"{settings.endpoints.prometheus}/api/v1/write"
        proc = subprocess.run(
            ["promtool", "check", "config", str(_checkable(text, tmp_path))], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, name + proc.stdout + proc.stderr


def test_one_shard_annotations_stack_gets_one_server_config(rendered: dict[str, RenderResult]) -> None:
    document = yaml.safe_load(rendered["dev"].files["prometheus/prometheus.yml"])
    assert document["global"]["external_labels"] == {"cluster": "foxhunt-dev"}
    assert document["rule_files"] == ["foxhunt-rules.yaml"]
    assert "remote_write" not in document
    assert not any(p.startswith("prometheus/prometheus-") for p in rendered["dev"].files)


def test_sharded_operator_stack_says_what_the_prometheus_resources_set(sharded: dict[str, RenderResult]) -> None:
    result = sharded["prod"]
    specs = yaml.safe_load(result.files[artifacts.OPERATOR_SPECS_PATH])
    shards, global_tier = specs["prometheus-shards"], specs["prometheus-global"]
    assert shards["shards"] == 3 and global_tier["enableRemoteWriteReceiver"] is True
    assert shards["enableFeatures"] == global_tier["enableFeatures"] == ["exemplar-storage"]
    assert shards["remoteWrite"][0]["sendExemplars"] is True
    # The operator's config reloader puts each shard's number in for $(SHARD); `aggregates` keeps the
    # partials and what the global rules and fleet-wide panels read, nothing per GPU.
    label, keep = shards["remoteWrite"][0]["writeRelabelConfigs"]
    assert label == {"sourceLabels": ["__name__"], "regex": PARTIAL_SERIES_REGEX, "targetLabel": "shard",
                     "replacement": "$(SHARD)"}  # fmt: skip
    kept = set(keep["regex"].split("|"))
    assert keep["action"] == "keep" and {"ALERTS", "up", "ml_training_loss"} <= kept
    assert catalog.GPU_UTILIZATION_PERCENT.name not in kept and "job_gpu:ml_gpu_utilization_percent:held" not in kept
    assert shards["externalLabels"] == global_tier["externalLabels"] == {"cluster": "foxhunt-prod"}
    for spec, rule in ((shards, "foxhunt-ml-rules-shard"), (global_tier, "foxhunt-ml-rules-global")):
        (selected,) = [
            r for r in objects(result, "PrometheusRule")
            if spec["ruleSelector"]["matchLabels"].items() <= r["metadata"]["labels"].items()
        ]  # fmt: skip
        assert selected["metadata"]["name"] == rule
    pod_monitor = one(result, "PodMonitor")
    assert shards["podMonitorSelector"]["matchLabels"].items() <= pod_monitor["metadata"]["labels"].items()
