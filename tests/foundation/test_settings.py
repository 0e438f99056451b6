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
    KNOWN_KEYS,
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
from infra.settings.sections import CONFIG_FIELDS, SETTINGS, SETTINGS_FIELDS, setting
from infra.stacks import STACKS
from observability.config import RemoteWrite
from observability.rules import goodput, jobs, rules_file_yaml


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
    assert cfg is settings.observability
    assert cfg.scrape_interval_seconds == declared["foxhunt-observability:scrape"].get("intervalSeconds", 15)
    assert cfg.environment == settings.environment == declared["foxhunt-observability:environment"]


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
    ("critical-scrape-too-slow-for-30s", mutated("scrape", ["criticalIntervalSeconds"], 15), "scrape.criticalIntervalSeconds = 15: expected intervals with which critical failures page in time: critical failures cannot page within critical_detection_seconds=30"),
    ("critical-evaluation-too-slow-for-30s", mutated("scrape", ["criticalEvaluationIntervalSeconds"], 20), "scrape.criticalIntervalSeconds = 5: expected intervals with which critical failures page in time: critical failures cannot page within critical_detection_seconds=30"),
    ("poller-passes-slower-than-its-scrapes", mutated("poller", ["minIntervalSeconds"], 5), "poller.minIntervalSeconds = '5': expected at most 4 (scrape.criticalIntervalSeconds - 1)"),
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
    ("replicas-zero", {"prometheus": {"replicas": 0}}, "prometheus.replicas = 0: expected a whole number from 1 to 10"),
    ("replica-label-reserved", {"prometheus": {"replicaLabel": "__replica__"}}, "prometheus.replicaLabel = '__replica__': expected a label name of its own (not starting with __"),
    ("replica-label-a-target-label", {"prometheus": {"replicaLabel": "instance"}}, "prometheus.replicaLabel = 'instance': expected a label name of its own"),
    ("replica-label-not-a-name", {"prometheus": {"replicaLabel": "replica-id"}}, "prometheus.replicaLabel = 'replica-id': expected a Prometheus label name"),
    ("alertmanager-replicas-text", {"alertmanager": {"replicas": "3"}}, "alertmanager.replicas = '3': expected a whole number from 1 to 10 written without quotes"),
    ("alertmanager-peers-not-one-per-replica", {"alertmanager": {"replicas": 3, "peers": ["am-0:9093"]}}, "alertmanager.peers = [\"am-0:9093\"]: expected a list of 3 host:port addresses, one per replica"),
    ("alertmanager-peer-no-port", {"alertmanager": {"replicas": 2, "peers": ["am-0:9093", "am-1"]}}, "alertmanager.peers[1] = 'am-1': expected host:port"),
    ("alertmanager-typo", {"alertmanager": {"replica": 3}}, "alertmanager.replica is not a known setting"),
    ("cluster-not-a-dns-label", {"cluster": "EU_1"}, "cluster = 'EU_1': expected a DNS-1123 label"),
    ("clusters-without-this-one", {"cluster": "eu-1", "prometheus": {"clusters": ["us-1"]}}, "prometheus.clusters = [\"us-1\"]: expected a list that includes this stack's cluster 'eu-1'"),
    ("remote-write-not-a-url", {"prometheus": {"shards": 2, "remoteWriteUrl": "global:9090"}}, "prometheus.remoteWriteUrl = 'global:9090': expected a URL"),
    ("clusters-bad-name", {"prometheus": {"clusters": ["foxhunt-dev", "US 1"]}}, "prometheus.clusters[1] = 'US 1': expected a DNS-1123 label"),
    ("gpu-price-negative", mutated("gpuHourlyCost", ["default"], -1), "gpuHourlyCost.default = -1: expected a price: a finite number of at least 0"),
    ("gpu-price-text", mutated("gpuHourlyCost", ["NVIDIA H100 80GB HBM3"], "cheap"), "gpuHourlyCost.NVIDIA H100 80GB HBM3 = 'cheap': expected a price"),
    ("gpu-price-no-default", {"gpuHourlyCost": {"NVIDIA H100 80GB HBM3": 3.0}}, "with a `default` for every other GPU"),
    ("gpu-prices-not-a-mapping", {"gpuHourlyCost": [3.0]}, "gpuHourlyCost = [3.0]: expected an object"),
    ("gpu-price-beyond-a-float", mutated("gpuHourlyCost", ["default"], 10**400), "expected a price: a finite number of at least 0"),
    ("energy-price-negative", {"energyPricePerKWh": -0.1}, "energyPricePerKWh = -0.1: expected a price: a finite number of at least 0"),
    ("currency-not-iso", {"currency": "dollars"}, "currency = 'dollars': expected an ISO 4217 currency code"),
    ("cost-typo", {"gpuHourlyPrice": {"default": 1}}, "gpuHourlyPrice is not a known setting"),
    ("checkpoint-price-text", {"checkpointStoragePricePerGBMonth": "cheap"}, "checkpointStoragePricePerGBMonth = 'cheap': expected a price"),
    ("checkpoint-price-negative", {"checkpointStoragePricePerGBMonth": -0.02}, "checkpointStoragePricePerGBMonth = -0.02: expected a price: a finite number of at least 0"),
    ("checkpoint-retention-zero", {"checkpointRetentionDays": 0}, "checkpointRetentionDays = 0: expected a number of days above 0 and at most 3650"),
    ("checkpoint-retention-alone", {"checkpointStoragePricePerGBMonth": None, "checkpointRetentionDays": 7}, "checkpointStoragePricePerGBMonth is missing: checkpointStoragePricePerGBMonth and checkpointRetentionDays are set together"),
    ("mig-cost-unknown", {"migCost": "by_memory"}, "migCost = 'by_memory': expected one of 'compute_share', 'whole_gpu'"),
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


@pytest.mark.parametrize(
    ("stack", "missing"),
    [("dev", "alertSlackApiUrl"), ("prod", "alertPagerDutyRoutingKey"), ("prod", "alertSlackApiUrl")],
)
def test_missing_required_secret_names_the_command_to_set_it(stack: str, missing: str) -> None:
    """The credential of each receiver kind the stack's notifications use is required."""
    config = read_stack_config(stack)
    values = {k: v for k, v in config.values.items() if k != missing}
    source = DictConfigSource(stack, values, config.secret_keys)
    with pytest.raises(
        SettingsError, match=rf"{missing} is missing for the .* receiver .*pulumi config set --secret {missing}"
    ):
        load_settings(source, values.get)


def test_the_credentials_of_unused_receiver_kinds_are_not_needed() -> None:
    """prod pages through PagerDuty: no page webhook URL is needed, and none is handed on."""
    config = read_stack_config("prod")
    values = {k: v for k, v in config.values.items() if k not in ("alertPageWebhookUrl", "alertChatWebhookUrl")}
    settings = load_settings(DictConfigSource("prod", values, config.secret_keys), values.get)
    assert settings.alerting.page_webhook_url is None and settings.alerting.chat_webhook_url is None
    assert settings.alerting.pagerduty_routing_key is not None and settings.alerting.slack_api_url is not None


@pytest.mark.parametrize(
    ("notifications", "message"),
    [
        ({"critical": "sms"}, r"alertNotifications.critical = 'sms': expected one of 'pagerduty', 'slack', 'webhook'"),
        ({"high": "slack", "warning": "webhook", "slackChannels": {"high": "#a"}},
         r"high and warning share the chat receiver .* must go to the same kind"),
        ({"info": "slack"}, r"alertNotifications.slackChannels.info = null: expected a channel such as '#ml-alerts'"),
        ({"critical": "pagerduty", "slackChannels": {"critical": "#x"}},
         r"alertNotifications.slackChannels.critical = '#x': expected no channel: critical is not sent to Slack"),
    ],
)  # fmt: skip
def test_bad_notifications_are_rejected_with_a_clear_message(notifications: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load(alertNotifications=notifications)


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
    assert load().observability_config().critical_detection_seconds == 30
    slow = mutated("scrape", ["criticalIntervalSeconds"], 10)["scrape"]
    slow["criticalEvaluationIntervalSeconds"] = 10
    with pytest.raises(SettingsError, match="critical_detection_seconds=30"):
        load(scrape=slow)
    relaxed = load(scrape=slow, criticalDetectionSeconds=60)
    assert relaxed.observability_config().critical_detection_seconds == 60
    assert relaxed.observability_config().critical_scrape_interval_seconds == 10
    # the stack's own intervals are not bound by the promise: only the critical sources and groups are
    calm = load(scrape={**mutated("scrape", ["intervalSeconds"], 60)["scrape"], "evaluationIntervalSeconds": 60})
    assert calm.observability_config().evaluation_interval_seconds == 60


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


def test_replicas_and_the_alertmanager_cluster_reach_the_observability_config() -> None:
    dev = load().observability_config()
    assert (dev.prometheus_replicas, dev.alertmanager_replicas, dev.replica_label) == (1, 1, "prometheus_replica")
    assert dev.alertmanager_peers == ("alertmanager-main-0.alertmanager-operated.monitoring-dev.svc:9093",)
    for stack, prometheus, alertmanager in (("staging", 2, 3), ("prod", 2, 3)):
        cfg = load(stack).observability_config()
        assert (cfg.prometheus_replicas, cfg.alertmanager_replicas) == (prometheus, alertmanager), stack
        assert len(cfg.alertmanager_peers) == alertmanager and len(set(cfg.alertmanager_peers)) == alertmanager
    given = load(
        prometheus={"replicas": 3, "replicaLabel": "replica"},
        alertmanager={"replicas": 2, "peers": ["a:9093", "b:9093"]},
    )
    cfg = given.observability_config()
    assert (cfg.prometheus_replicas, cfg.replica_label, cfg.alertmanager_peers) == (3, "replica", ("a:9093", "b:9093"))


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


def test_checkpoint_storage_prices_reach_the_config_and_the_rules() -> None:
    cfg = load("prod").observability_config()
    assert (cfg.checkpoint_storage_price_per_gb_month, cfg.checkpoint_retention_days) == (0.021, 30.0)
    kept = load(checkpointStoragePricePerGBMonth=0.05, checkpointRetentionDays=60).observability_config()
    per_byte = 0.05 / goodput.BYTES_PER_GB * (60 * 86400 / goodput.SECONDS_PER_MONTH)
    assert f"model_type_job_id:ml_checkpoint_written_bytes:sum * {per_byte:.17g}" in rules_file_yaml(kept)


def test_mig_cost_reaches_the_config_and_the_rules() -> None:
    assert load("dev").observability_config().mig_cost == "compute_share"
    whole = load(migCost="whole_gpu").observability_config()
    assert whole.mig_cost == "whole_gpu"
    hourly = next(r for r in jobs.cost_rules(whole) if r.record == jobs.JOB_HOURLY_COST)
    assert jobs.HELD_SM_SHARE.record not in hourly.expr and "whole GPU's price" in hourly.help
    shared = next(r for r in jobs.cost_rules(load("dev").observability_config()) if r.record == jobs.JOB_HOURLY_COST)
    assert jobs.HELD_SM_SHARE.record in shared.expr


def test_every_field_is_filled_by_one_registered_parser_and_the_known_keys_are_the_parsers_keys() -> None:
    filled = [name for entry in SETTINGS for name in entry.into]
    assert len(filled) == len(set(filled)), "a field filled twice"
    assert set(filled) >= SETTINGS_FIELDS, f"Settings fields without a parser: {SETTINGS_FIELDS - set(filled)}"
    assert set(filled) <= SETTINGS_FIELDS | CONFIG_FIELDS
    keys = [key for entry in SETTINGS for key in entry.keys]
    assert len(keys) == len(set(keys)), "a config key read by two parsers"
    assert set(keys) == KNOWN_KEYS
    # what a stack declares is all known, and what the config holds came from its parser
    for stack in STACKS:
        assert set(stack_entries(stack)) <= KNOWN_KEYS


def test_a_parser_for_a_field_that_does_not_exist_or_is_taken_fails_when_registered() -> None:
    def parse(r: Any, s: Any) -> int:
        return 1

    with pytest.raises(TypeError, match=r"parse: gpu_fan_limit is a field of neither Settings nor ObservabilityConfig"):
        setting("gpuFanLimit", into="gpu_fan_limit")(parse)
    with pytest.raises(TypeError, match=r"parse: shards is filled by another setting already"):
        setting("shardCount", into="shards")(parse)
