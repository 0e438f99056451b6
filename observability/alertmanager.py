"""Alertmanager routing for the stack: who hears about which alert, and what silences what.

- Watchdog (always firing) goes to the heartbeat receiver, every minute, and nowhere else; nothing
  else goes there. An external dead man's switch behind that receiver pages when the beat stops.
- critical pages; high and warning go to chat; info goes to a low-priority receiver; anything
  without a known severity falls back to chat, so no alert is ever dropped.
- Inhibition: a critical alert silences the warnings it explains on the same GPU,
  MLTrainingServiceDown silences the alerts its outage causes, a down GPU poller silences the GPU
  and poller alerts of its node, and NVML down silences what follows from it on the node.

Receiver URLs are credentials: they arrive as `ReceiverUrls` (plain strings the infra side unwraps
from Pulumi secrets inside `Output.apply`) and never appear in the repository.

Two shapes of the same tree:
- `alertmanager_config(cfg, receivers)`: classic `alertmanager.yml` (the config Secret).
- `alertmanager_config_crd_spec(cfg, receivers)`: `spec` of a `monitoring.coreos.com/v1alpha1`
  AlertmanagerConfig (operator mode). Give `url_secret` to reference the URLs from a Secret
  (`receiver_secret_data`) instead of writing them into the custom resource. The operator adds a
  `namespace="<the CR's namespace>"` matcher to a namespaced AlertmanagerConfig; alerts here come
  from several namespaces (and `absent()` has none), so select it as the Alertmanager's global
  configuration (`spec.alertmanagerConfiguration.name`), where that matcher is not added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

import yaml

from observability.config import PAGERDUTY, SLACK, WEBHOOK, ObservabilityConfig
from observability.notifications import TEMPLATE_FILE, pagerduty_fields, slack_fields
from observability.promql import duration
from observability.rules import alert_rules, gpu, health
from observability.rules.detection import PAGE_GROUP_WAIT_SECONDS
from observability.rules.rule_types import Severity

PAGE = "page"
CHAT = "chat"
LOW_PRIORITY = "low-priority"
HEARTBEAT = "heartbeat"
RECEIVERS: tuple[str, ...] = (PAGE, CHAT, LOW_PRIORITY, HEARTBEAT)

# One notification per alert name and the place it happened (GPU alerts of one node together).
GROUP_BY: tuple[str, ...] = ("alertname", "namespace", "service", "node", "model_type")


@dataclass(frozen=True)
class ReceiverUrls:
    """Credentials of the receivers (secret values: never logged, never committed). Only those of the
    kinds the stack's notifications use are needed; the heartbeat is always a webhook."""

    page: str | None = None
    chat: str | None = None
    low_priority: str | None = None
    heartbeat: str | None = None  # the dead man's switch that expects Watchdog every minute
    slack_api_url: str | None = None  # a Slack incoming-webhook URL
    pagerduty_routing_key: str | None = None  # the Events API v2 integration key of the PagerDuty service
    # The Events API v2 endpoint; None: Alertmanager's default (PagerDuty's own).
    pagerduty_url: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "pagerduty_routing_key":
                if not isinstance(value, str) or not value or any(c.isspace() for c in value):
                    raise ValueError(f"ReceiverUrls.{f.name} must be a non-empty key without spaces")
                continue
            parts = urlsplit(value) if isinstance(value, str) else None
            valid = parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc)
            if not valid or any(c.isspace() for c in value):
                # Never echo the value: it is a credential.
                raise ValueError(f"ReceiverUrls.{f.name} must be an http(s) URL with a host")

    def url_for(self, receiver: str) -> str:
        field_name = {PAGE: "page", CHAT: "chat", LOW_PRIORITY: "low_priority", HEARTBEAT: "heartbeat"}[receiver]
        return self.required(field_name, f"the {receiver} receiver is a webhook")

    def required(self, field_name: str, why: str) -> str:
        value = getattr(self, field_name)
        if value is None:
            raise ValueError(f"ReceiverUrls.{field_name} is missing: {why}")
        text: str = value
        return text


@dataclass(frozen=True)
class SeverityRoute:
    """A child route: alerts of these severities go to `receiver` with these timings."""

    receiver: str
    severities: tuple[Severity, ...]
    group_wait_seconds: int
    group_interval_seconds: int
    repeat_interval_seconds: int


# Pages must not wait: group_wait is part of the detection budget (observability.rules.detection
# counts it from the failure to the page). Info waits long and repeats daily: it is for business hours.
ROUTES: tuple[SeverityRoute, ...] = (
    SeverityRoute(PAGE, (Severity.CRITICAL,), PAGE_GROUP_WAIT_SECONDS, 60, 3600),
    SeverityRoute(CHAT, (Severity.HIGH, Severity.WARNING), 30, 300, 4 * 3600),
    SeverityRoute(LOW_PRIORITY, (Severity.INFO,), 300, 1800, 24 * 3600),
)
DEFAULT_ROUTE = SeverityRoute(CHAT, (), 30, 300, 4 * 3600)


@dataclass(frozen=True)
class HeartbeatRoute:
    """The first child route: only `alertname` goes to the heartbeat receiver, at once and then every
    `repeat_interval_seconds` (no `continue`, so it reaches no other receiver)."""

    alertname: str
    receiver: str
    group_wait_seconds: int
    group_interval_seconds: int
    repeat_interval_seconds: int


HEARTBEAT_ROUTE = HeartbeatRoute(health.WATCHDOG, HEARTBEAT, 0, 60, 60)


@dataclass(frozen=True)
class Inhibition:
    """While a `sources` alert fires, matching `targets` alerts with equal `equal` labels are muted."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    equal: tuple[str, ...]
    reason: str


def _node_alerts(*groups: str) -> tuple[str, ...]:
    """The alerts of these groups that locate a node (derived, so new GPU alerts are covered)."""
    return tuple(
        alert.name
        for alert in alert_rules(ObservabilityConfig())
        if alert.group in groups and "node" in alert.locating_labels
    )


_POLLER_HEALTH_ON_NODE = tuple(name for name in _node_alerts(health.GROUP) if name != health.POLLER_DOWN)

INHIBITIONS: tuple[Inhibition, ...] = (
    Inhibition(
        sources=("GPUMemoryExhausted",),
        targets=("GPUMemoryUsageHigh", "GPUMemoryExhaustionPredicted"),
        equal=("node", "gpu_id"),
        reason=(
            "Memory above 95% is also above 90%, and a prediction of running out is moot once it has: the "
            "critical alert says it all for that GPU."
        ),
    ),
    Inhibition(
        sources=("GPUErrorsDetected",),
        targets=("GPUMemoryUsageHigh", "GPUMemoryExhaustionPredicted"),
        equal=("node", "gpu_id"),
        reason="A GPU with hardware errors reports meaningless memory figures.",
    ),
    Inhibition(
        sources=("GPUErrorsDetected",),
        targets=("GPUUtilizationLow", "GPUUtilizationCritical"),
        equal=("model_type", "job_id"),
        reason=(
            "A job with a failing GPU reports meaningless utilization (errors on a GPU no job holds carry no "
            "job_id and mute nothing here)."
        ),
    ),
    Inhibition(
        sources=("MLTrainingServiceDown",),
        targets=("TrainingSlowdown", "MLInferenceLatencyHigh", "ModelLoadingFailures", "ModelCacheMissesHigh"),
        equal=(),
        reason=(
            "Without the training service, jobs stall and model loads fail or go cold; these follow from the "
            "outage (one service per stack, so no label has to be equal)."
        ),
    ),
    Inhibition(
        sources=(health.POLLER_DOWN,),
        targets=(*_node_alerts(gpu.GROUP), *_POLLER_HEALTH_ON_NODE),
        equal=("node",),
        reason=(
            "Without its poller a node's GPU series go stale or reset: the GPU and poller alerts of that node "
            "say nothing new (a restarted poller re-reports a lost GPU) until the poller is back."
        ),
    ),
    Inhibition(
        sources=(health.NVML_DOWN,),
        targets=(health.GPUS_NOT_ANSWERING, health.COLLECTION_FAILING),
        equal=("node",),
        reason="With NVML down no GPU answers and every NVML call fails: NVMLDown says it all for that node.",
    ),
)


def _check_inhibitions(cfg: ObservabilityConfig) -> None:
    known = {alert.name for alert in alert_rules(cfg)}
    for inhibition in INHIBITIONS:
        unknown = sorted(set(inhibition.sources + inhibition.targets) - known)
        if unknown:
            raise ValueError(f"inhibition refers to alerts that do not exist: {unknown}")


def _alternation(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else "|".join(values)


def _severities(route: SeverityRoute) -> list[str]:
    return [s.value for s in route.severities]


def _send_resolved(receiver: str) -> bool:
    """Resolved notifications, except to the heartbeat: Alertmanager resolves Watchdog when Prometheus
    stops sending it, and a dead man's switch would take that notification for one more beat."""
    return receiver != HEARTBEAT


def _camel(key: str) -> str:
    first, *rest = key.split("_")
    return first + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class _Shape:
    """How one of the two formats spells the tree: key case, matchers, inhibition keys, webhooks."""

    key: Callable[[str], str]
    matcher: Callable[[str, Sequence[str]], Any]
    source_key: str
    target_key: str
    receiver: Callable[[str, str], dict[str, Any]]  # (name, kind) -> the receiver's configs


def _tree(cfg: ObservabilityConfig, shape: _Shape) -> dict[str, Any]:
    """The one routing tree (HEARTBEAT_ROUTE, ROUTES, INHIBITIONS, RECEIVERS) in the given shape."""
    _check_inhibitions(cfg)
    key = shape.key

    def timings(route: SeverityRoute | HeartbeatRoute) -> dict[str, str]:
        return {
            key("group_wait"): duration(route.group_wait_seconds),
            key("group_interval"): duration(route.group_interval_seconds),
            key("repeat_interval"): duration(route.repeat_interval_seconds),
        }

    heartbeat = HEARTBEAT_ROUTE
    return {
        "route": {
            "receiver": DEFAULT_ROUTE.receiver,
            key("group_by"): list(GROUP_BY),
            **timings(DEFAULT_ROUTE),
            "routes": [
                {
                    "receiver": heartbeat.receiver,
                    "matchers": [shape.matcher("alertname", [heartbeat.alertname])],
                    **timings(heartbeat),
                },
                *(
                    {
                        "receiver": route.receiver,
                        "matchers": [shape.matcher("severity", _severities(route))],
                        **timings(route),
                    }
                    for route in ROUTES
                ),
            ],
        },
        key("inhibit_rules"): [
            {
                shape.source_key: [shape.matcher("alertname", i.sources)],
                shape.target_key: [shape.matcher("alertname", i.targets)],
                **({"equal": list(i.equal)} if i.equal else {}),
            }
            for i in INHIBITIONS
        ],
        "receivers": [{"name": name, **shape.receiver(name, receiver_kind(cfg, name))} for name in RECEIVERS],
    }


def receiver_severities(receiver: str) -> tuple[str, ...]:
    """The severities a receiver is sent (the heartbeat's Watchdog has none of its own)."""
    return tuple(s.value for route in ROUTES if route.receiver == receiver for s in route.severities)


def receiver_kind(cfg: ObservabilityConfig, receiver: str) -> str:
    """PagerDuty, Slack or webhook: what the stack chose for the receiver's severities. The severities
    of one receiver share it (they share its timings and grouping); the heartbeat is a webhook."""
    severities = receiver_severities(receiver)
    if not severities:
        return WEBHOOK
    kinds = {cfg.notifications.kind(s) for s in severities}
    if len(kinds) > 1:
        raise ValueError(
            f"notifications: {' and '.join(severities)} share the {receiver} receiver (its timings and grouping) "
            f"and must go to the same kind, got {sorted(kinds)}"
        )
    (kind,) = kinds
    return kind


def _matcher_text(name: str, values: Sequence[str]) -> str:
    op = "=" if len(values) == 1 else "=~"
    return f'{name}{op}"{_alternation(values)}"'


def _matcher_crd(name: str, values: Sequence[str]) -> dict[str, str]:
    return {"name": name, "value": _alternation(values), "matchType": "=" if len(values) == 1 else "=~"}


def _classic_receiver(cfg: ObservabilityConfig, receivers: ReceiverUrls) -> Callable[[str, str], dict[str, Any]]:
    def receiver(name: str, kind: str) -> dict[str, Any]:
        if kind == SLACK:
            api_url = receivers.required("slack_api_url", f"the {name} receiver posts to Slack")
            return {
                "slack_configs": [{"api_url": api_url, **slack_fields(cfg.notifications, receiver_severities(name))}]
            }
        if kind == PAGERDUTY:
            key = receivers.required("pagerduty_routing_key", f"the {name} receiver pages through PagerDuty")
            url = {"url": receivers.pagerduty_url} if receivers.pagerduty_url else {}
            return {"pagerduty_configs": [{"routing_key": key, **url, **pagerduty_fields()}]}
        return {"webhook_configs": [{"url": receivers.url_for(name), "send_resolved": _send_resolved(name)}]}

    return receiver


def alertmanager_config(cfg: ObservabilityConfig, receivers: ReceiverUrls) -> dict[str, Any]:
    """Classic `alertmanager.yml` as a dict (its `templates` name TEMPLATE_FILE, beside it)."""
    shape = _Shape(lambda k: k, _matcher_text, "source_matchers", "target_matchers", _classic_receiver(cfg, receivers))
    return {"templates": [TEMPLATE_FILE], **_tree(cfg, shape)}


def alertmanager_config_yaml(cfg: ObservabilityConfig, receivers: ReceiverUrls) -> str:
    """The classic config as YAML: the `alertmanager.yaml` key of the config Secret."""
    text: str = yaml.safe_dump(alertmanager_config(cfg, receivers), sort_keys=False, width=10_000)
    return text


SLACK_API_URL_KEY = "slack-api-url"
PAGERDUTY_ROUTING_KEY_KEY = "pagerduty-routing-key"


def receiver_secret_data(receivers: ReceiverUrls) -> dict[str, str]:
    """Secret data (key per receiver, and the Slack and PagerDuty credentials given) that
    `alertmanager_config_crd_spec(url_secret=...)` refers to."""
    data = {name: value for name in RECEIVERS if (value := getattr(receivers, _FIELD[name])) is not None}
    if receivers.slack_api_url is not None:
        data[SLACK_API_URL_KEY] = receivers.slack_api_url
    if receivers.pagerduty_routing_key is not None:
        data[PAGERDUTY_ROUTING_KEY_KEY] = receivers.pagerduty_routing_key
    return data


_FIELD = {PAGE: "page", CHAT: "chat", LOW_PRIORITY: "low_priority", HEARTBEAT: "heartbeat"}


def _crd_fields(classic: dict[str, Any]) -> dict[str, Any]:
    renamed = {"title_link": "titleLink", "send_resolved": "sendResolved", "client_url": "clientURL"}
    # The resource has no PagerDuty `description`: the template file redefines Alertmanager's default.
    out = {renamed.get(k, k): v for k, v in classic.items() if k not in ("links", "details", "description")}
    if "links" in classic:
        out["pagerDutyLinkConfigs"] = [{"href": link["href"], "alt": link["text"]} for link in classic["links"]]
    if "details" in classic:
        out["details"] = [{"key": k, "value": v} for k, v in classic["details"].items()]
    return out


def alertmanager_config_crd_spec(
    cfg: ObservabilityConfig, receivers: ReceiverUrls, *, url_secret: str | None = None
) -> dict[str, Any]:
    """`spec` of an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) with the same tree.

    With `url_secret`, receivers read their URL from that Secret (keys: `receiver_secret_data`);
    Slack and PagerDuty receivers always do (the resource takes their credentials only that way).
    The Alertmanager resource loads TEMPLATE_FILE through `spec.alertmanagerConfiguration.templates`.
    """

    def receiver(name: str, kind: str) -> dict[str, Any]:
        if kind in (SLACK, PAGERDUTY) and url_secret is None:
            raise ValueError(f"the {name} receiver ({kind}) needs url_secret: its credential is a Secret reference")
        if kind == SLACK:
            ref = {"name": url_secret, "key": SLACK_API_URL_KEY}
            return {
                "slackConfigs": [
                    {"apiURL": ref, **_crd_fields(slack_fields(cfg.notifications, receiver_severities(name)))}
                ]
            }
        if kind == PAGERDUTY:
            ref = {"name": url_secret, "key": PAGERDUTY_ROUTING_KEY_KEY}
            url = {"url": receivers.pagerduty_url} if receivers.pagerduty_url else {}
            return {"pagerdutyConfigs": [{"routingKey": ref, **url, **_crd_fields(pagerduty_fields())}]}
        if url_secret is None:
            return {"webhookConfigs": [{"url": receivers.url_for(name), "sendResolved": _send_resolved(name)}]}
        return {
            "webhookConfigs": [{"urlSecret": {"name": url_secret, "key": name}, "sendResolved": _send_resolved(name)}]
        }

    return _tree(cfg, _Shape(_camel, _matcher_crd, "sourceMatch", "targetMatch", receiver))
