"""AlertRouting: where alerts go (observability.alertmanager), with the receiver credentials kept
secret.

The receivers' credentials (webhook URLs, the Slack API URL, the PagerDuty routing key) are Pulumi
secrets (`AlertRoutingArgs.receivers`): they are combined with `Output.all(...).apply(...)` and
written only into a Secret's `stringData`, never into any other object, file or log.

- scrape mode `annotations` (classic Alertmanager): a Secret holding the whole `alertmanager.yaml`
  and the notification template file it loads (`notifications.tmpl`, beside it).
- scrape mode `operator`: an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) whose receivers
  reference their credential through Secret key selectors, plus that Secret, plus a ConfigMap
  holding the template file. The custom resource itself holds no credential. Select it as the
  Alertmanager's global configuration (`Alertmanager.spec.alertmanagerConfiguration.name`, so the
  operator does not add a namespace matcher to its routes) and list the ConfigMap's key in
  `spec.alertmanagerConfiguration.templates`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child, metadata
from infra.settings import AlertingReceivers, ScrapeMode
from observability import alertmanager
from observability.alertmanager import ReceiverUrls
from observability.config import ObservabilityConfig
from observability.notifications import TEMPLATE_FILE, template_text

TYPE = "foxhunt:observability:AlertRouting"
APP = "alertmanager-routing"
COMPONENT = "alerting"
CONFIG_SECRET = "foxhunt-alertmanager-config"
CONFIG_KEY = "alertmanager.yaml"
TEMPLATES_CONFIG_MAP = "foxhunt-alertmanager-templates"
RECEIVERS_SECRET = "foxhunt-alertmanager-receivers"
ALERTMANAGER_CONFIG = "foxhunt-ml-routing"
# With url_secret the CRD spec holds no URL; these stand-ins prove it (they must not appear in it).
_STAND_IN = ReceiverUrls(
    page="https://stand-in.invalid/page",
    chat="https://stand-in.invalid/chat",
    low_priority="https://stand-in.invalid/low",
    heartbeat="https://stand-in.invalid/heartbeat",
    slack_api_url="https://stand-in.invalid/slack",
    pagerduty_routing_key="stand-in.invalid-routing-key",
)


def alertmanager_config_spec(cfg: ObservabilityConfig) -> dict[str, object]:
    """The AlertmanagerConfig spec, receivers by Secret reference; fails if a URL leaked into it."""
    spec = alertmanager.alertmanager_config_crd_spec(cfg, _STAND_IN, url_secret=RECEIVERS_SECRET)
    if "stand-in.invalid" in json.dumps(spec):
        raise ValueError("the AlertmanagerConfig spec contains a receiver URL; it must reference the Secret")
    return spec


def _credential_fields(receivers: AlertingReceivers) -> list[tuple[str, object]]:
    """(ReceiverUrls field, secret) of every receiver credential."""
    return [
        ("page", receivers.page_webhook_url),
        ("chat", receivers.chat_webhook_url),
        ("low_priority", receivers.low_priority_webhook_url),
        ("heartbeat", receivers.heartbeat_url),
        ("slack_api_url", receivers.slack_api_url),
        ("pagerduty_routing_key", receivers.pagerduty_routing_key),
    ]


@dataclass(frozen=True)
class AlertRoutingArgs:
    receivers: AlertingReceivers  # Pulumi secrets
    cfg: ObservabilityConfig  # the routing tree is generated from it
    mode: ScrapeMode
    operator_selector: Mapping[str, str]
    namespace: str
    common_labels: Mapping[str, str]


class AlertRouting(pulumi.ComponentResource):
    def __init__(self, name: str, args: AlertRoutingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        cfg, receivers = args.cfg, args.receivers
        # Secret in a real run already; marked again so offline placeholders are treated the same.
        # Only the credentials the stack's notifications use are set (the others are None).
        present = [(field, pulumi.Output.secret(value)) for field, value in _credential_fields(receivers) if value]
        urls: pulumi.Output[list[str]] = pulumi.Output.all(*(value for _, value in present))
        names = [field for field, _ in present]

        def receiver_urls(values: Sequence[str]) -> ReceiverUrls:
            return ReceiverUrls(**dict(zip(names, values, strict=True)))

        def secret_data(values: Sequence[str]) -> dict[str, str]:
            return alertmanager.receiver_secret_data(receiver_urls(values))

        def config_yaml(values: Sequence[str]) -> str:
            return alertmanager.alertmanager_config_yaml(cfg, receiver_urls(values))

        def meta(object_name: str, extra_labels: Mapping[str, str] | None = None) -> object:
            return metadata(
                args.common_labels, object_name, args.namespace, app=APP, component=COMPONENT, extra_labels=extra_labels
            )

        self.resources: list[pulumi.CustomResource] = []
        if args.mode == "operator":
            secret = k8s.core.v1.Secret(
                f"{name}-receivers",
                metadata=meta(RECEIVERS_SECRET),
                type="Opaque",
                string_data=urls.apply(secret_data),
                opts=child(self, formerly="alertmanager-receivers"),
            )
            templates = k8s.core.v1.ConfigMap(
                f"{name}-templates",
                metadata=meta(TEMPLATES_CONFIG_MAP),
                data={TEMPLATE_FILE: template_text()},
                opts=child(self),
            )
            config = k8s.apiextensions.CustomResource(
                f"{name}-config",
                api_version="monitoring.coreos.com/v1alpha1",
                kind="AlertmanagerConfig",
                metadata=meta(ALERTMANAGER_CONFIG, args.operator_selector),
                spec=alertmanager_config_spec(cfg),
                opts=child(self, formerly="alertmanager-config", depends_on=[secret]),
            )
            self.resources = [secret, templates, config]
        else:
            self.resources = [
                k8s.core.v1.Secret(
                    f"{name}-config",
                    metadata=meta(CONFIG_SECRET),
                    type="Opaque",
                    string_data={CONFIG_KEY: urls.apply(config_yaml), TEMPLATE_FILE: template_text()},
                    opts=child(self, formerly="alertmanager-config"),
                )
            ]
        self.register_outputs({"mode": args.mode})
