"""Typed, immutable stack settings, read once from Pulumi config and validated before any resource.

- `typed`: the settings dataclasses (one per config section) and `SettingsError`;
- `reading`: where raw config comes from and the `Reader` that checks one value at a time;
- `sections`: one parser per config section;
- `loading`: `load_settings`, the whole config at once (every problem listed, credentials only
  as Pulumi secrets);
- `stack_files`: `Pulumi.<stack>.yaml` read offline, as the Pulumi CLI would hand it over.
"""

from infra.settings.loading import KNOWN_KEYS, load_settings
from infra.settings.reading import (
    ConfigSource,
    DictConfigSource,
    SecretReader,
    pulumi_config_source,
    pulumi_secret_reader,
)
from infra.settings.stack_files import (
    StackConfig,
    StackFileError,
    available_stacks,
    default_provider_conflict,
    placeholder_secret,
    read_stack_config,
    stack_file,
    validate_stack,
)
from infra.settings.typed import (
    DEFAULT_CRITICAL_DETECTION_SECONDS,
    KUBECONFIG_KEY,
    PROJECT,
    RECEIVER_KEYS,
    SCRAPE_CREDENTIAL_KEY,
    SCRAPE_DELIVERIES,
    SCRAPE_MODES,
    SECRET_KEYS,
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
    Resources,
    ScrapeDelivery,
    ScrapeMode,
    ScrapeSettings,
    SecretValue,
    ServiceSettings,
    Settings,
    SettingsError,
    Toleration,
    TrainingJobSettings,
)

__all__ = [
    "DEFAULT_CRITICAL_DETECTION_SECONDS",
    "KNOWN_KEYS",
    "KUBECONFIG_KEY",
    "PROJECT",
    "RECEIVER_KEYS",
    "SCRAPE_CREDENTIAL_KEY",
    "SCRAPE_DELIVERIES",
    "SCRAPE_MODES",
    "SECRET_KEYS",
    "SUPPORTED_KUBERNETES_MINORS",
    "AlertingReceivers",
    "ConfigSource",
    "DictConfigSource",
    "Endpoints",
    "GrafanaSettings",
    "ImageBuild",
    "KubernetesTarget",
    "Namespaces",
    "PinnedImage",
    "PollerSettings",
    "PrometheusSettings",
    "Resources",
    "ScrapeDelivery",
    "ScrapeMode",
    "ScrapeSettings",
    "SecretReader",
    "SecretValue",
    "ServiceSettings",
    "Settings",
    "SettingsError",
    "StackConfig",
    "StackFileError",
    "Toleration",
    "TrainingJobSettings",
    "available_stacks",
    "default_provider_conflict",
    "load_settings",
    "placeholder_secret",
    "pulumi_config_source",
    "pulumi_secret_reader",
    "read_stack_config",
    "stack_file",
    "validate_stack",
]
