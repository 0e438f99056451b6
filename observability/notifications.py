"""What a notification says and where it goes: native PagerDuty and Slack receivers, or a generic
webhook, chosen per severity by the stack (`ObservabilityConfig.notifications`), and the
Alertmanager template file their texts come from.

The template file (`TEMPLATE_FILE`, rendered next to `alertmanager.yaml` and loaded by its
`templates:`) defines:
- `foxhunt.dashboard`: an alert's `dashboard_url` annotation (the dashboard filtered to its job,
  node or GPU, `observability.alert_links`) with the time range around it (from an hour before it
  started; to now while firing, else a quarter of an hour after it ended);
- `foxhunt.slack.*`: title (status, firing count, alert name, severity), text (the summary, the
  counts, the first `SHOWN_ALERTS` alerts each with its description, runbook and dashboard link,
  then a link to all of them in Alertmanager), colour;
- `foxhunt.pagerduty.*`: the incident's description (alert name, summary, count), its severity
  mapped from the alert's (`PAGERDUTY_SEVERITY`), the details. Alertmanager sends the same
  `dedup_key` (its group key) with the trigger and the resolve event, so the incident resolves.
A group of many alerts stays one readable message: counts, the first few, a link to the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from observability.config import Notifications

TEMPLATE_FILE = "notifications.tmpl"
SHOWN_ALERTS = 5
# Alert severity -> PagerDuty Events API v2 severity (critical, error, warning, info).
PAGERDUTY_SEVERITY = {"critical": "critical", "high": "error", "warning": "warning", "info": "info"}
CLIENT = "foxhunt-observability"

_TEMPLATE_SOURCE = Path(__file__).with_name(TEMPLATE_FILE)


def _pagerduty_severity_template() -> str:
    text = ""
    for i, (severity, pagerduty) in enumerate(PAGERDUTY_SEVERITY.items()):
        keyword = "if" if i == 0 else "else if"
        text += f'{{{{ {keyword} eq .CommonLabels.severity "{severity}" }}}}{pagerduty}'
    return text + "{{ else }}critical{{ end }}"


def template_text() -> str:
    """The Alertmanager template file (Go templates), as rendered next to `alertmanager.yaml`."""
    source = _TEMPLATE_SOURCE.read_text(encoding="utf-8")
    return source.replace("SHOWN_ALERTS", str(SHOWN_ALERTS)).replace(
        "PAGERDUTY_SEVERITY\n", _pagerduty_severity_template() + "\n"
    )


def _template(name: str, data: str = ".") -> str:
    return f'{{{{ template "{name}" {data} }}}}'


def _channel(channels: Mapping[str, str], severities: Sequence[str]) -> str:
    """The Slack channel of the group's severity (a receiver serving several severities picks it)."""
    chosen = [channels[s] for s in severities]
    if len(set(chosen)) == 1:
        return chosen[0]
    text = ""
    for i, severity in enumerate(severities[:-1]):
        keyword = "if" if i == 0 else "else if"
        text += f'{{{{ {keyword} eq .CommonLabels.severity "{severity}" }}}}{channels[severity]}'
    return text + f"{{{{ else }}}}{channels[severities[-1]]}{{{{ end }}}}"


def slack_fields(notifications: Notifications, severities: Sequence[str]) -> dict[str, Any]:
    """The fields of a Slack receiver for these severities, without its API URL (classic keys)."""
    return {
        "channel": _channel(dict(notifications.slack_channels), severities),
        "send_resolved": True,
        "title": _template("foxhunt.slack.title"),
        "title_link": _template("foxhunt.slack.title_link"),
        "text": _template("foxhunt.slack.text"),
        "color": _template("foxhunt.slack.color"),
    }


def pagerduty_fields() -> dict[str, Any]:
    """The fields of a PagerDuty receiver, without its routing key and URL (classic keys)."""
    first = "(index .Alerts 0)"
    return {
        "send_resolved": True,
        "severity": _template("foxhunt.pagerduty.severity"),
        "description": _template("foxhunt.pagerduty.description"),
        "client": CLIENT,
        "client_url": _template("__alertmanagerURL"),
        "links": [
            {"href": f"{{{{ {first}.Annotations.runbook_url }}}}", "text": "Runbook"},
            {"href": _template("foxhunt.dashboard", first), "text": "Grafana dashboard"},
        ],
        "details": {
            "summary": f"{{{{ {first}.Annotations.summary }}}}",
            "alerts": _template("foxhunt.pagerduty.alerts"),
            "counts": _template("foxhunt.counts"),
            "runbook": f"{{{{ {first}.Annotations.runbook_url }}}}",
            "dashboard": _template("foxhunt.dashboard", first),
        },
    }
