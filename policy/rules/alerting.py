"""Every alerting rule tells the on-call engineer how bad it is, what is wrong and what to do."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from policy.manifests import is_yaml, mapping, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

SEVERITIES = ("critical", "high", "warning", "info")  # observability.rules.rule_types.Severity values
REQUIRED_ANNOTATIONS = ("summary", "description", "runbook_url")


def rule_group_findings(groups: Any, prefix: str) -> Iterator[Finding]:
    """Findings for a Prometheus rule-groups list (`groups:` of a rules file or a PrometheusRule)."""
    for group_index, item in enumerate(sequence(groups)):
        group = mapping(item)
        group_name = string(group.get("name")) or str(group_index)
        for rule_index, rule_item in enumerate(sequence(group.get("rules"))):
            rule = mapping(rule_item)
            alert = string(rule.get("alert"))
            if alert is None:
                continue  # a recording rule
            where = f"{prefix}[{group_name}].rules[{alert or rule_index}]"
            severity = mapping(rule.get("labels")).get("severity")
            if severity not in SEVERITIES:
                yield Finding(
                    f"{where}.labels.severity",
                    f"alert {alert} has severity {severity!r}; Alertmanager routes only on {', '.join(SEVERITIES)}",
                    f"set labels.severity to one of {', '.join(SEVERITIES)}",
                )
            annotations = mapping(rule.get("annotations"))
            for name in REQUIRED_ANNOTATIONS:
                value = string(annotations.get(name))
                if not value or not value.strip():
                    yield Finding(
                        f"{where}.annotations.{name}",
                        f"alert {alert} has no {name}, so its notification does not say "
                        + {"summary": "what is wrong", "description": "where and how bad", "runbook_url": "what to do"}[
                            name
                        ],
                        f"add annotations.{name}"
                        + (" (a link to the alert's runbook section)" if name == "runbook_url" else ""),
                    )
                elif name == "runbook_url" and not value.startswith(("https://", "http://")):
                    yield Finding(
                        f"{where}.annotations.runbook_url",
                        f"alert {alert} has runbook_url {value!r}, which is not a link",
                        "use an absolute https:// URL to the runbook section",
                    )


def groups_in_text(text: str) -> Any:
    """The `groups` of a rules file, or None when the text is not one."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(document, dict) and "groups" in document:
        return document["groups"]
    return None


def rule_file_findings(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    """The rendered rule files (`prometheus/rules*.yaml`), like a rules ConfigMap's data."""
    for name, text in files.items():
        groups = groups_in_text(text) if is_yaml(name) else None
        if groups is not None:
            yield from ((name, finding) for finding in rule_group_findings(groups, "groups"))


def check_alert_rules(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    if obj.kind == "PrometheusRule":
        yield from rule_group_findings(mapping(obj.manifest.get("spec")).get("groups"), "spec.groups")
    elif obj.kind == "ConfigMap":
        data = mapping(obj.manifest.get("data"))
        for key in data:
            groups = groups_in_text(string(data[key]) or "")
            if groups is not None:
                yield from rule_group_findings(groups, f"data[{key}].groups")


ALERT_RULE_ANNOTATIONS = Policy(
    id="alert-rule-annotations",
    description=(
        f"Every alerting rule (PrometheusRule or rules ConfigMap) has a severity ({', '.join(SEVERITIES)}) and "
        "the annotations summary, description and runbook_url."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Give every alert labels.severity and annotations summary, description and runbook_url.",
    check=check_alert_rules,
    file_check=rule_file_findings,
    tags=("alerting",),
)
