"""The typed shape of a rule: alerting rules, recording rules, severities, runbook queries.

A rule is data first (name, expression, thresholds' prose, runbook content) and becomes a plain
Prometheus rule-file dict only in `to_rule`, so the rules file, the runbooks and the tests all
read the same object.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from observability.alert_links import dashboard_url_template
from observability.config import ObservabilityConfig
from observability.promql import duration

_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]", re.UNICODE)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped, spaces to '-')."""
    return _NOT_IN_ANCHOR.sub("", heading.strip().lower()).replace(" ", "-")


def alert_heading(alert_name: str) -> str:
    """An alert's section heading in docs/runbooks.md."""
    return alert_name


def runbook_url(cfg: ObservabilityConfig, alert_name: str) -> str:
    """`cfg.runbook_base_url` plus the anchor of the alert's section in docs/runbooks.md."""
    return f"{cfg.runbook_base_url}#{github_anchor(alert_heading(alert_name))}"


class Severity(enum.Enum):
    """Severity label values, most urgent first; Alertmanager routes on them."""

    CRITICAL = "critical"
    HIGH = "high"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class RecordingRule:
    """A `level:metric:operations` recording rule; dashboards and alerts refer to `.record`."""

    record: str
    expr: str
    help: str

    def to_rule(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr}

    def __str__(self) -> str:
        return self.record


@dataclass(frozen=True)
class RunbookQuery:
    """A PromQL query an on-call engineer runs while working the alert, with what it shows."""

    title: str
    promql: str


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule with everything its notification and its runbook section need."""

    name: str
    group: str
    severity: Severity
    expr: str
    for_seconds: int
    # Static, one sentence: what is wrong.
    summary: str
    # Go template naming the labels that locate the problem (and the value, formatted).
    description: str
    impact: str
    # Numbered action steps, in order.
    action: tuple[str, ...]
    # Labels the expression keeps so the notification locates the problem.
    locating_labels: tuple[str, ...]
    queries: tuple[RunbookQuery, ...]
    # Why the rule is written as it is (window choices, departures from the obvious); shown in the
    # runbook, so it must make sense to an on-call engineer on its own.
    rationale: str = ""

    @property
    def action_text(self) -> str:
        """The action steps on one line, numbered (the `action` annotation)."""
        return " ".join(f"{i}. {step}" for i, step in enumerate(self.action, start=1))

    def to_rule(self, cfg: ObservabilityConfig) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_seconds > 0:
            rule["for"] = duration(self.for_seconds)
        rule["labels"] = {"severity": self.severity.value}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "impact": self.impact,
            "action": self.action_text,
            "runbook_url": runbook_url(cfg, self.name),
            "dashboard_url": dashboard_url_template(cfg, self.group, self.locating_labels),
        }
        return rule
