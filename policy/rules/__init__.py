"""Every policy, in one registry: pytest and the CrossGuard pack both iterate `ALL_POLICIES`.

To add a policy: write a check in the module of its topic (or a new one), wrap it in a `Policy`
with a stable id, and append it here; then add a violating fixture to tests/policy. A policy that
also reads the rendered files or the stack file says so with its `file_check` /
`stack_file_check`: the engine runs whatever this registry holds.
"""

from __future__ import annotations

from policy.rules.alerting import ALERT_RULE_ANNOTATIONS
from policy.rules.containers import CONTAINER_PROBES, CONTAINER_RESOURCES, IMAGE_NOT_LATEST, IMAGE_PINNED_BY_DIGEST
from policy.rules.grafana import DASHBOARD_CONFIGMAPS, DASHBOARD_UIDS_UNIQUE, DATASOURCE_LINKS_RESOLVE
from policy.rules.metadata import COMMON_LABELS, EXPLICIT_NAMESPACE
from policy.rules.network import NETWORK_POLICY_COVERAGE
from policy.rules.plaintext import NO_PLAINTEXT_SECRETS
from policy.rules.pod_security import POD_SECURITY_RESTRICTED
from policy.rules.replicas import PROMETHEUS_REPLICAS
from policy.rules.telemetry import OTEL_ENDPOINT_POLICY, SCRAPE_ANNOTATIONS, SCRAPE_COVERAGE, TRAINING_JOB_OTEL
from policy.rules.training_jobs import TRAINING_AUTOLOG, TRAINING_FAILURE_POLICY
from policy.vocabulary import Policy

ALL_POLICIES: tuple[Policy, ...] = (
    POD_SECURITY_RESTRICTED,
    CONTAINER_RESOURCES,
    CONTAINER_PROBES,
    IMAGE_NOT_LATEST,
    IMAGE_PINNED_BY_DIGEST,
    SCRAPE_ANNOTATIONS,
    SCRAPE_COVERAGE,
    NETWORK_POLICY_COVERAGE,
    OTEL_ENDPOINT_POLICY,
    TRAINING_JOB_OTEL,
    TRAINING_FAILURE_POLICY,
    TRAINING_AUTOLOG,
    DASHBOARD_CONFIGMAPS,
    DASHBOARD_UIDS_UNIQUE,
    DATASOURCE_LINKS_RESOLVE,
    ALERT_RULE_ANNOTATIONS,
    PROMETHEUS_REPLICAS,
    NO_PLAINTEXT_SECRETS,
    EXPLICIT_NAMESPACE,
    COMMON_LABELS,
)

_BY_ID = {p.id: p for p in ALL_POLICIES}
if len(_BY_ID) != len(ALL_POLICIES):
    raise RuntimeError("policy ids must be unique")


def policy_by_id(policy_id: str) -> Policy:
    try:
        return _BY_ID[policy_id]
    except KeyError:
        raise KeyError(f"no policy {policy_id!r}; known: {', '.join(sorted(_BY_ID))}") from None
