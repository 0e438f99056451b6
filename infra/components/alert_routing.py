"""AlertRouting: where alerts go (observability.alertmanager), with the receiver URLs kept secret.

The receiver webhook URLs are Pulumi secrets (`AlertRoutingArgs.receivers`): they are combined with
`Output.all(...).apply(...)` and written only into a Secret's `stringData`, never into any other
object, file or log.

- scrape mode `annotations` (classic Alertmanager): a Secret holding the whole `alertmanager.yaml`.
- scrape mode `operator`: an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) whose webhook
  receivers reference their URL through `urlSecret` (a Secret key selector), plus that Secret. The
  custom resource itself holds no URL. Select it as the Alertmanager's global configuration
  (`Alertmanager.spec.alertmanagerConfiguration.name`), so the operator does not add a
  namespace matcher to its routes.
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

TYPE = "foxhunt:observability:AlertRouting"
APP = "alertmanager-routing"
COMPONENT = "alerting"
CONFIG_SECRET = "foxhunt-alertmanager-config"
CONFIG_KEY = "alertmanager.yaml"
RECEIVERS_SECRET = "foxhunt-alertmanager-receivers"
ALERTMANAGER_CONFIG = "foxhunt-ml-routing"
# With url_secret the CRD spec holds no URL; these stand-ins prove it (they must not appear in it).
_STAND_IN = ReceiverUrls(
    page="https://stand-in.invalid/page",
    chat="https://stand-in.invalid/chat",
    low_priority="https://stand-in.invalid/low",
    heartbeat="https://stand-in.invalid/heartbeat",
)


def alertmanager_config_spec(cfg: ObservabilityConfig) -> dict[str, object]:
    """The AlertmanagerConfig spec, receivers by Secret reference; fails if a URL leaked into it."""
    spec = alertmanager.alertmanager_config_crd_spec(cfg, _STAND_IN, url_secret=RECEIVERS_SECRET)
    if "stand-in.invalid" in json.dumps(spec):
        raise ValueError("the AlertmanagerConfig spec contains a receiver URL; it must reference the Secret")
    return spec


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
        urls: pulumi.Output[list[str]] = pulumi.Output.all(
            pulumi.Output.secret(receivers.page_webhook_url),
            pulumi.Output.secret(receivers.chat_webhook_url),
            pulumi.Output.secret(receivers.low_priority_webhook_url),
            pulumi.Output.secret(receivers.heartbeat_url),
        )

        def receiver_urls(values: Sequence[str]) -> ReceiverUrls:
            return ReceiverUrls(page=values[0], chat=values[1], low_priority=values[2], heartbeat=values[3])

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
            config = k8s.apiextensions.CustomResource(
                f"{name}-config",
                api_version="monitoring.coreos.com/v1alpha1",
                kind="AlertmanagerConfig",
                metadata=meta(ALERTMANAGER_CONFIG, args.operator_selector),
                spec=alertmanager_config_spec(cfg),
                opts=child(self, formerly="alertmanager-config", depends_on=[secret]),
            )
            self.resources = [secret, config]
        else:
            self.resources = [
                k8s.core.v1.Secret(
                    f"{name}-config",
                    metadata=meta(CONFIG_SECRET),
                    type="Opaque",
                    string_data={CONFIG_KEY: urls.apply(config_yaml)},
                    opts=child(self, formerly="alertmanager-config"),
                )
            ]
        self.register_outputs({"mode": args.mode})
