"""Typed settings: every stack loads; every bad config fails early with a message naming the key,
the value and what is expected; credentials only as Pulumi secrets."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from infra import REPO_ROOT
from infra.settings import (
    DictConfigSource,
    ImageBuild,
    PinnedImage,
    SettingsError,
    StackConfig,
    StackFileError,
    load_settings,
    read_stack_config,
    validate_stack,
)
from infra.stacks import STACKS
from observability.config import RemoteWrite
from observability.rules import rules_file_yaml


def stack_entries(stack: str) -> dict[str, Any]:
    document = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in document["config"].items()}


def load(stack: str = "dev", **overrides: Any) -> Any:
    return validate_stack(read_stack_config(stack, overrides=overrides))


# The dev stack's declared services, whatever they are called and however many are added.
SERVICE_NAMES: list[str] = [service["name"] for service in stack_entries("dev")["services"]]
FIRST_SERVICE = SERVICE_NAMES[0]


def mutated(key: str, path: list[Any], value: Any, stack: str = "dev") -> dict[str, Any]:
    """The stack's value for `key` with the element at `path` replaced by `value`."""
    entry = copy.deepcopy(stack_entries(stack)[key])
    node = entry
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return {key: entry}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_loads(stack: str) -> None:
    settings = load(stack)
    assert settings.stack == stack
    declared = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    assert settings.environment == declared["foxhunt-observability:environment"]
    names = [s["name"] for s in declared["foxhunt-observability:services"]]
    assert [s.name for s in settings.services] == names and len(set(names)) == len(names)
    cfg = settings.observability_config()
    assert cfg.platform_services == tuple(s.name for s in settings.services)
    assert cfg.scrape_interval_seconds == settings.scrape.interval_seconds


def test_stacks_really_differ() -> None:
    dev, staging, prod = (load(s) for s in ("dev", "staging", "prod"))
    assert len({dev.namespaces.monitoring, staging.namespaces.monitoring, prod.namespaces.monitoring}) == 3
    assert dev.scrape.mode == "annotations" and prod.scrape.mode == "operator"
    assert isinstance(dev.poller.image, ImageBuild) and isinstance(prod.poller.image, PinnedImage)
    assert prod.training_job.gpu_count > dev.training_job.gpu_count
    assert len({dev.kubernetes_version, staging.kubernetes_version, prod.kubernetes_version}) == 3
    assert dev.endpoints.tempo_otlp_grpc == "http://tempo.monitoring-dev.svc.cluster.local:4317"


def test_settings_are_immutable() -> None:
    settings = load()
    with pytest.raises(AttributeError):
        settings.environment = "prod"


BAD_CONFIGS = [
    # (case id, overrides, fragment of the expected message)
    ("otlp-not-a-url", mutated("endpoints", ["tempoOtlpGrpc"], "tempo:4317"), "endpoints.tempoOtlpGrpc = 'tempo:4317': expected a URL"),
    ("loki-bad-scheme", mutated("endpoints", ["loki"], "ftp://loki:3100"), "endpoints.loki = 'ftp://loki:3100': expected a URL with scheme http or https"),
    ("port-zero", mutated("services", [0, "port"], 0), f"services['{SERVICE_NAMES[0]}'].port = 0: expected a whole number from 1 to 65535"),
    ("port-too-big", mutated("poller", ["port"], 70000), "poller.port = 70000: expected a whole number from 1 to 65535"),
    ("port-not-a-number", mutated("services", [2, "port"], "http"), f"services['{SERVICE_NAMES[2]}'].port = 'http': expected a whole number"),
    ("poll-interval-zero", mutated("poller", ["minIntervalSeconds"], 0), "poller.minIntervalSeconds = 0: expected a number above 0"),
    ("unknown-scrape-mode", mutated("scrape", ["mode"], "servicemonitor"), "scrape.mode = 'servicemonitor': expected one of 'annotations', 'operator'"),
    ("duplicate-service", mutated("services", [1, "name"], FIRST_SERVICE), f"services[1].name = '{FIRST_SERVICE}': expected a unique service name"),
    ("path-without-slash", mutated("services", [0, "path"], "metrics"), f"services['{FIRST_SERVICE}'].path = 'metrics': expected an HTTP path starting with '/'"),
    ("bad-namespace", mutated("namespaces", ["training"], "Training_NS"), "namespaces.training = 'Training_NS': expected a DNS-1123 label"),
    ("bad-environment", {"environment": "Prod!"}, "environment = 'Prod!': expected a lower-case name such as dev, staging, prod or gpu-lab"),
    ("port-as-string", mutated("services", [3, "port"], "9096"), f"services['{SERVICE_NAMES[3]}'].port = '9096': expected a whole number from 1 to 65535 written without quotes"),
    ("model-type-not-a-label", mutated("services", [1, "modelType"], "DQN,v2"), f"services['{SERVICE_NAMES[1]}'].modelType = 'DQN,v2': expected a model type"),
    ("budget-too-small", {"criticalDetectionSeconds": 5}, "criticalDetectionSeconds = 5: expected a whole number from 10 to 600"),
    ("kubeconfig-in-plaintext", {"kubeconfig": "apiVersion: v1"}, "kubeconfig is a credential given in plaintext"),
    ("unsupported-kubernetes", {"kubernetesVersion": "1.19.0"}, "kubernetesVersion = '1.19.0': expected a version 1.27.x to 1.37.x"),
    ("image-not-by-digest", mutated("trainingJob", ["image"], "registry.foxhunt.internal/ml/train:latest"), "trainingJob.image = 'registry.foxhunt.internal/ml/train:latest': expected an image reference pinned by digest"),
    ("scrape-too-slow-for-30s", mutated("scrape", ["intervalSeconds"], 60), "scrape.intervalSeconds = 60: expected at most 15"),
    ("evaluation-too-slow-for-30s", mutated("scrape", ["evaluationIntervalSeconds"], 45), "scrape.evaluationIntervalSeconds = 45: expected an interval that critical failures cannot be detected within critical_detection_seconds=30"),
    ("unknown-key", {"alertRoute": "pager"}, "alertRoute is not a known setting: expected one of"),
    ("typo-in-nested-key", mutated("poller", ["minIntervalSecs"], 5), "poller.minIntervalSecs is not a known setting"),
    ("services-empty", {"services": []}, "services = []: expected a non-empty list"),
    ("gpu-count-zero", mutated("trainingJob", ["gpuCount"], 0), "trainingJob.gpuCount = 0: expected a whole number from 1 to 16"),
    ("bad-quantity", mutated("poller", ["resources", "memoryLimit"], "lots"), "poller.resources.memoryLimit = 'lots': expected a Kubernetes quantity"),
    ("plaintext-webhook", {"alertPageWebhookUrl": "https://hooks.example.invalid/T0/B0/x"}, "alertPageWebhookUrl is a credential given in plaintext"),
    ("plaintext-heartbeat", {"alertHeartbeatUrl": "https://hooks.example.invalid/beat"}, "alertHeartbeatUrl is a credential given in plaintext"),
    ("kube-state-metrics-not-a-bool", {"kubeStateMetrics": "maybe"}, "kubeStateMetrics = 'maybe': expected true or false"),
    ("password-in-url", mutated("endpoints", ["loki"], "http://admin:foxhunt123@loki:3100"), "no credentials in a URL"),
    ("credential-in-nested-key", mutated("poller", ["image", "password"], "hunter2"), "poller.image.password looks like a credential given in plaintext"),
    ("shards-zero", {"prometheus": {"shards": 0}}, "prometheus.shards = 0: expected a whole number from 1 to 64"),
    ("shards-too-many", {"prometheus": {"shards": 65}}, "prometheus.shards = 65: expected a whole number from 1 to 64"),
    ("shards-fraction", {"prometheus": {"shards": 2.5}}, "prometheus.shards = 2.5: expected a whole number from 1 to 64"),
    ("shards-typo", {"prometheus": {"shard": 2}}, "prometheus.shard is not a known setting"),
    ("remote-write-mode", {"prometheus": {"shards": 2, "remoteWrite": "partials"}}, "prometheus.remoteWrite = 'partials': expected one of 'all', 'aggregates'"),
    ("cluster-not-a-dns-label", {"cluster": "EU_1"}, "cluster = 'EU_1': expected a DNS-1123 label"),
    ("clusters-without-this-one", {"cluster": "eu-1", "prometheus": {"clusters": ["us-1"]}}, "prometheus.clusters = [\"us-1\"]: expected a list that includes this stack's cluster 'eu-1'"),
    ("remote-write-not-a-url", {"prometheus": {"shards": 2, "remoteWriteUrl": "global:9090"}}, "prometheus.remoteWriteUrl = 'global:9090': expected a URL"),
    ("clusters-bad-name", {"prometheus": {"clusters": ["foxhunt-dev", "US 1"]}}, "prometheus.clusters[1] = 'US 1': expected a DNS-1123 label"),
    ("gpu-price-negative", mutated("gpuHourlyCost", ["default"], -1), "gpuHourlyCost.default = -1: expected a price: a number of at least 0"),
    ("gpu-price-text", mutated("gpuHourlyCost", ["NVIDIA H100 80GB HBM3"], "cheap"), "gpuHourlyCost.NVIDIA H100 80GB HBM3 = 'cheap': expected a price"),
    ("gpu-price-no-default", {"gpuHourlyCost": {"NVIDIA H100 80GB HBM3": 3.0}}, "with a `default` for every other GPU"),
    ("gpu-prices-not-a-mapping", {"gpuHourlyCost": [3.0]}, "gpuHourlyCost = [3.0]: expected an object"),
    ("energy-price-negative", {"energyPricePerKWh": -0.1}, "energyPricePerKWh = -0.1: expected a price: a number of at least 0"),
    ("currency-not-iso", {"currency": "dollars"}, "currency = 'dollars': expected an ISO 4217 currency code"),
    ("cost-typo", {"gpuHourlyPrice": {"default": 1}}, "gpuHourlyPrice is not a known setting"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_rejected_with_a_clear_message(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(**overrides)
    assert any(message in p for p in caught.value.problems), caught.value.problems
    assert "Pulumi.dev.yaml" in str(caught.value)
    assert "foxhunt123" not in str(caught.value), "an error message must not echo a credential"


def test_every_problem_is_reported_at_once() -> None:
    overrides = {
        **mutated("endpoints", ["tempoOtlpGrpc"], "nope"),
        **mutated("scrape", ["mode"], "magic"),
        "environment": "Prod!",
    }
    with pytest.raises(SettingsError) as caught:
        load(**overrides)
    assert len(caught.value.problems) == 3, caught.value.problems


def test_missing_required_secret_names_the_command_to_set_it() -> None:
    config = read_stack_config("dev")
    values = {k: v for k, v in config.values.items() if k != "alertChatWebhookUrl"}
    source = DictConfigSource("dev", values, config.secret_keys)
    with pytest.raises(SettingsError, match=r"pulumi config set --secret alertChatWebhookUrl"):
        load_settings(source, values.get)


def test_missing_heartbeat_url_names_the_command_to_set_it() -> None:
    config = read_stack_config("dev")
    values = {k: v for k, v in config.values.items() if k != "alertHeartbeatUrl"}
    source = DictConfigSource("dev", values, config.secret_keys)
    with pytest.raises(SettingsError, match=r"pulumi config set --secret alertHeartbeatUrl"):
        load_settings(source, values.get)


def test_kube_state_metrics_reaches_the_rules_config() -> None:
    assert load("dev").observability_config().kube_state_metrics is False
    assert load("prod").observability_config().kube_state_metrics is True
    assert load(kubeStateMetrics=True).observability_config().kube_state_metrics is True


def test_secure_values_are_secrets_and_never_plaintext() -> None:
    config = read_stack_config("dev", overrides={"alertPageWebhookUrl": {"secure": "v1:abc"}})
    assert "alertPageWebhookUrl" in config.secret_keys
    assert config.values["alertPageWebhookUrl"].startswith("https://alerts.invalid/")
    load(alertPageWebhookUrl={"secure": "v1:abc"})


def test_pinned_poller_image_needs_no_registry_password() -> None:
    prod = load("prod")
    assert isinstance(prod.poller.image, PinnedImage)
    assert prod.poller.image.ref.startswith("registry.foxhunt.internal/observability/gpu-poller@sha256:")
    bad = mutated("poller", ["image"], {"digest": "registry.foxhunt.internal/x:1.0"}, stack="prod")
    with pytest.raises(SettingsError, match=r"poller.image.digest .*pinned by digest"):
        load("prod", **bad)


def test_objects_reach_the_program_as_json_like_the_cli_passes_them() -> None:
    config = read_stack_config("dev")
    assert json.loads(config.values["services"]) == stack_entries("dev")["services"]
    assert config.pulumi_config()["foxhunt-observability:environment"] == "dev"


def _without(stack: str, key: str, **extra: Any) -> StackConfig:
    """The stack's config with `key` removed (as if the file lacked it) plus `extra`."""
    config = read_stack_config(stack, overrides=extra)
    values = {k: v for k, v in config.values.items() if k != key}
    return StackConfig(stack, values, config.secret_keys)


@pytest.mark.parametrize("typo", ["servics", "Services", "endpoint", "scrap"])
def test_a_misspelled_top_level_key_is_one_problem(typo: str) -> None:
    key = {"servics": "services", "Services": "services", "endpoint": "endpoints", "scrap": "scrape"}[typo]
    value = stack_entries("dev")[key]
    with pytest.raises(SettingsError) as caught:
        validate_stack(_without("dev", key, **{typo: value}))
    assert caught.value.problems == (f"{typo} is not a known setting: did you mean {key}?",)


def test_a_missing_section_is_one_problem() -> None:
    with pytest.raises(SettingsError) as caught:
        validate_stack(_without("dev", "endpoints"))
    assert caught.value.problems == ("endpoints is missing: set it in Pulumi.dev.yaml",)


def test_environment_is_free_but_validated() -> None:
    assert load(environment="gpu-lab").environment == "gpu-lab"
    assert load(environment="gpu-lab").common_labels["foxhunt.io/environment"] == "gpu-lab"
    for bad in ("GPU-Lab", "lab_1", "-lab", "x" * 64, 7):
        with pytest.raises(SettingsError, match=r"environment = .*: expected a lower-case name"):
            load(environment=bad)


def test_model_type_is_any_label_safe_name() -> None:
    """Documented acceptance: a new model family needs no code change, only a label-safe name."""
    services = mutated("services", [0, "modelType"], "mamba-2")["services"]
    assert load(services=services).services[0].model_type == "mamba-2"
    job = mutated("trainingJob", ["modelType"], "graph-net")
    assert load(**job).training_job.model_type == "graph-net"


def test_critical_detection_budget_defaults_to_30_and_a_longer_one_allows_slower_intervals() -> None:
    assert load().critical_detection_seconds == 30
    assert load().observability_config().critical_detection_seconds == 30
    slow = mutated("scrape", ["intervalSeconds"], 30)["scrape"]
    slow["evaluationIntervalSeconds"] = 30
    with pytest.raises(SettingsError) as caught:
        load(scrape=slow)
    assert any("scrape.intervalSeconds = 30: expected at most 15 (half of criticalDetectionSeconds = 30)" in p
               for p in caught.value.problems)  # fmt: skip
    relaxed = load(scrape=slow, criticalDetectionSeconds=60)
    assert relaxed.observability_config().critical_detection_seconds == 60
    with pytest.raises(SettingsError, match="critical_detection_seconds=45"):
        load(scrape={**slow, "evaluationIntervalSeconds": 60, "intervalSeconds": 20}, criticalDetectionSeconds=45)


def test_a_stack_names_its_cluster() -> None:
    assert load().kubernetes.context == "foxhunt-dev"
    with pytest.raises(SettingsError, match=r"kubeContext is missing: name the kubeconfig context"):
        validate_stack(_without("dev", "kubeContext"))
    secret_only = _without("dev", "kubeContext", kubeconfig={"secure": "v1:abc"})
    settings = validate_stack(secret_only)
    assert settings.kubernetes.context is None and settings.kubernetes.kubeconfig is not None


def test_yaml_errors_name_the_file(tmp_path) -> None:
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  foxhunt-observability:services: [\n")
    with pytest.raises(StackFileError) as caught:
        read_stack_config("broken", root=tmp_path)
    assert str(caught.value).startswith("Pulumi.broken.yaml, line 3, column 1 is not valid YAML: ")
    assert "<unicode string>" not in str(caught.value)


def test_one_shard_and_the_environment_s_cluster_by_default() -> None:
    cfg = load().observability_config()
    assert (cfg.shards, cfg.cluster, cfg.clusters) == (1, "foxhunt-dev", ("foxhunt-dev",))


def test_shards_and_clusters_reach_the_observability_config() -> None:
    settings = load(cluster="eu-1", prometheus={"shards": 4, "clusters": ["eu-1", "us-1"], "remoteWrite": "aggregates"})
    cfg = settings.observability_config()
    assert (cfg.shards, cfg.cluster, cfg.clusters) == (4, "eu-1", ("eu-1", "us-1"))
    assert cfg.remote_write is RemoteWrite.AGGREGATES and load().observability_config().remote_write is RemoteWrite.ALL


def test_prices_reach_the_observability_config() -> None:
    cfg = load("prod").observability_config()
    assert cfg.currency == "USD" and cfg.energy_price_per_kwh == 0.12 and cfg.gpu_hourly_cost_default == 2.0
    assert dict(cfg.gpu_hourly_cost) == {"NVIDIA A100-SXM4-80GB": 2.9, "NVIDIA H100 80GB HBM3": 3.2}
    cheap = load(gpuHourlyCost={"default": 0, "NVIDIA L4": 0.5}, energyPricePerKWh=0, currency="EUR")
    cfg = cheap.observability_config()
    assert (cfg.gpu_hourly_cost, cfg.gpu_hourly_cost_default, cfg.energy_price_per_kwh, cfg.currency) == (
        (("NVIDIA L4", 0.5),),
        0.0,
        0.0,
        "EUR",
    )
    rules = rules_file_yaml(cfg)
    assert '{gpu_name="NVIDIA L4"} * 0 + 0.5' in rules and "EUR" not in rules
