"""Each policy as a pure function: silent on a compliant stack, and for every violating fixture a
violation from the right policy that says what is wrong, where, and how to fix it. Every case runs
on plain dicts and on read-only Mappings/tuples (what the Pulumi analyzer passes)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from infra import REPO_ROOT
from infra.components.alert_rules import RULE_FILES
from observability.config import ObservabilityConfig
from observability.prometheus_config import operator_specs, server_configs
from policy import engine
from policy.engine import check_files, check_stack_file, evaluate, mandatory
from policy.rules import ALL_POLICIES, policy_by_id
from policy.rules.containers import split_image
from policy.rules.replicas import OPERATOR_SPECS
from policy.rules.training_jobs import TRAINING_AUTOLOG
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext
from tests.policy.fixtures import (
    CASES,
    CONTEXT,
    DATASOURCES_YAML,
    compliant_stack,
    dashboard,
    labels,
    objects,
    readonly,
)

WRAPS = {"dict": lambda m: m, "readonly": readonly}


@pytest.mark.parametrize("wrap", WRAPS)
def test_compliant_stack_has_no_violation_at_all(wrap):
    violations = evaluate(objects(compliant_stack(), WRAPS[wrap]), CONTEXT)
    assert violations == [], "\n".join(map(str, violations))


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_violating_fixture_is_reported_actionably(case, wrap):
    stack = compliant_stack()
    case.mutate(stack)
    violations = evaluate(objects(stack, WRAPS[wrap]), CONTEXT)
    assert {v.policy for v in violations} == {case.policy} | case.also, "\n".join(map(str, violations))
    ours = [v for v in violations if v.policy == case.policy]
    matching = [v for v in ours if case.path in v.path and case.problem in v.problem]
    assert matching, f"no violation at {case.path!r} saying {case.problem!r}:\n" + "\n".join(map(str, ours))
    policy = policy_by_id(case.policy)
    for violation in matching:
        assert violation.enforcement is policy.enforcement
        assert violation.subject and violation.fix, violation
        message = violation.message()
        # what (the problem), where (object and field path), how (the fix)
        assert violation.subject in message and violation.path in message and f"Fix: {violation.fix}" in message


def test_every_policy_has_a_violating_fixture():
    covered = {case.policy for case in CASES}
    assert covered == {p.id for p in ALL_POLICIES}
    assert len({case.id for case in CASES}) == len(CASES)


def test_common_labels_are_advisory_and_reported():
    stack = compliant_stack()
    del stack["gpu-poller"]["metadata"]["labels"]["app.kubernetes.io/part-of"]
    stack["gpu-poller-service"]["metadata"]["labels"]["foxhunt.io/environment"] = "prod"
    violations = evaluate(objects(stack), CONTEXT)
    assert {v.policy for v in violations} == {"common-labels"}
    assert not mandatory(violations)
    messages = "\n".join(v.message() for v in violations)
    assert "DaemonSet monitoring-dev/gpu-poller: metadata.labels.app.kubernetes.io/part-of" in messages
    assert "label foxhunt.io/environment is 'prod', expected 'dev'" in messages


def test_explicit_namespace_missing_and_foreign():
    stack = compliant_stack()
    del stack["gpu-poller-service"]["metadata"]["namespace"]
    stack["training-job"]["metadata"]["namespace"] = "default"
    # (the moved training job also leaves its NetworkPolicy behind in training-dev)
    violations = [v for v in evaluate(objects(stack), CONTEXT) if v.policy != "network-policy-coverage"]
    assert {v.policy for v in violations} == {"explicit-namespace"}, "\n".join(map(str, violations))
    problems = sorted(v.problem for v in violations)
    assert any("has no namespace" in p for p in problems)
    assert any("'default' is not one of this stack's namespaces" in p for p in problems)
    # without the stack's namespaces only a missing namespace is a violation
    loose = evaluate(objects(stack), PolicyContext(**{**CONTEXT.__dict__, "namespaces": None}))
    assert [v.problem for v in loose if v.policy == "explicit-namespace"] == [
        "Service gpu-poller has no namespace, so it lands in whatever namespace the provider defaults to"
    ]


def test_patch_is_only_checked_on_the_fields_it_sets():
    """A scrape patch without securityContext, resources or probes is fine; the owner keeps them."""
    stack = compliant_stack()
    violations = evaluate([o for o in objects(stack) if o.is_patch], CONTEXT)
    assert [v for v in violations if v.policy not in ("scrape-coverage", "training-job-otel")] == []
    unpatched = KubeObject(copy.deepcopy(stack["api-gateway-patch"]), is_patch=False, origin="as owned")
    owned = {v.policy for v in evaluate([unpatched], CONTEXT)}
    assert {"pod-security-restricted", "container-resources", "common-labels", "image-not-latest"} - owned == {
        "image-not-latest"  # no image in the patch: nothing to pin
    }


def test_secret_data_is_never_scanned_but_its_metadata_is():
    stack = compliant_stack()
    per_object = [p for p in ALL_POLICIES if not p.is_stack_policy]
    assert not evaluate(objects({"s": stack["alertmanager"]}), CONTEXT, per_object)
    stack["alertmanager"]["metadata"]["annotations"] = {"note": "pushed with https://ci:hunter22@registry.invalid"}
    violations = evaluate(objects({"s": stack["alertmanager"]}), CONTEXT, per_object)
    assert [(v.policy, v.path) for v in violations] == [("no-plaintext-secrets", "metadata.annotations.note")]
    assert "hunter22" not in violations[0].message(), "the credential must not be echoed"


def test_references_and_placeholders_are_not_credentials():
    stack = compliant_stack()
    container = stack["gpu-poller"]["spec"]["template"]["spec"]["containers"][0]
    container["env"] += [
        {"name": "REGISTRY_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "registry", "key": "password"}}},
        {"name": "PASSWORD_FILE", "value": "/var/run/secrets/registry/password"},
        {"name": "API_TOKEN", "value": "$(TOKEN_FROM_SECRET)"},
    ]
    stack["gpu-poller"]["spec"]["template"]["spec"]["volumes"].append(
        {"name": "creds", "secret": {"secretName": "registry-credentials", "items": [{"key": "token", "path": "t"}]}}
    )
    stack["scrape"] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "scrape",
            "namespace": "monitoring-dev",
            "labels": stack["gpu-poller"]["metadata"]["labels"],
        },
        "data": {
            "scrape.yaml": "authorization:\n  credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token\n"
            "bearer_token_file: /var/run/secrets/token\npassword: ${GRAFANA_PASSWORD}\n"
        },
    }
    assert evaluate(objects(stack), CONTEXT) == []


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("registry.foxhunt.internal:5000/obs/poller", ("registry.foxhunt.internal:5000/obs/poller", None, None)),
        ("registry:5000/obs/poller:1.2", ("registry:5000/obs/poller", "1.2", None)),
        ("poller@sha256:" + "a" * 64, ("poller", None, "sha256:" + "a" * 64)),
        ("r.io/p:1.0@sha256:" + "b" * 64, ("r.io/p", "1.0", "sha256:" + "b" * 64)),
    ],
)
def test_split_image(image, expected):
    assert split_image(image) == expected


def test_policy_needing_context_says_how_to_give_it():
    stack = compliant_stack()
    violations = evaluate(objects(stack), PolicyContext(stack="dev"))
    needing = {p.id for p in ALL_POLICIES if p.needs}
    assert {v.policy for v in violations} == needing
    for violation in violations:
        assert "cannot run without its config" in violation.problem
        assert "--policy-pack-config rendered/<stack>/policy/pack-config.json" in violation.fix


def test_policy_ids_descriptions_and_levels():
    for policy in ALL_POLICIES:
        assert isinstance(policy, Policy)
        assert policy.id.replace("-", "").isalnum() and policy.id.islower()
        assert policy.description.endswith(".") and policy.remediation
    advisory = {p.id for p in ALL_POLICIES if p.enforcement is Enforcement.ADVISORY}
    assert advisory == {"image-pinned-by-digest", "common-labels"}


# ------------------------------------------------------------------------------------------------
# Rendered files and stack files
# ------------------------------------------------------------------------------------------------

RULES_FILE = """groups:
- name: ml_training_performance
  rules:
  - record: job:x:rate5m
    expr: vector(1)
  - alert: TrainingSlowdown
    expr: ml_training_epochs_per_second < 0.1
    labels: {severity: warning}
    annotations: {summary: Training is slow, description: slow, runbook_url: 'https://r.invalid/runbooks#slow'}
"""


def test_rendered_files_pass_and_fail():
    good = {
        "prometheus/rules.yaml": RULES_FILE,
        "grafana/datasources.yaml": DATASOURCES_YAML,
        "dashboards/foxhunt-training-cockpit.json": dashboard("foxhunt-training-cockpit"),
        "dashboards/foxhunt-traces.json": dashboard("foxhunt-traces"),
        "kubernetes/secret_monitoring-dev_x.yaml": "stringData:\n  password: offline-placeholder-registryPassword\n",
    }
    assert check_files(good) == []
    bad = {
        **good,
        "prometheus/rules.yaml": RULES_FILE.replace("severity: warning", "severity: urgent"),
        "grafana/datasources.yaml": DATASOURCES_YAML.replace("datasourceUid: tempo", "datasourceUid: jaeger"),
        "dashboards/foxhunt-traces.json": dashboard("foxhunt-training-cockpit"),
        "dashboards/long.json": dashboard("x" * 41),
        "alertmanager/alertmanager.yaml": "global:\n  slack_api_url: https://hooks.slack.com/services/T0001/B0001/abcdefXYZ\n",
    }
    found = {(v.policy, v.subject) for v in check_files(bad)}
    assert found == {
        ("alert-rule-annotations", "prometheus/rules.yaml"),
        ("datasource-links-resolve", "grafana/datasources.yaml"),
        ("dashboard-uids-unique", "dashboards/foxhunt-training-cockpit.json"),
        ("dashboard-configmaps", "dashboards/long.json"),
        ("no-plaintext-secrets", "alertmanager/alertmanager.yaml"),
    }


STACK_FILE = """# Secrets are never written here in plaintext: set them with
#   pulumi config set --secret registryPassword <token>
config:
  foxhunt-observability:environment: dev
  foxhunt-observability:poller:
    image: {registry: registry.foxhunt.internal, username: ci-dev}
  foxhunt-observability:alertPageWebhookUrl:
    secure: v1:AAAABBBBCCCCDDDD:EEEEFFFF
"""


def test_stack_file_with_only_secure_values_passes():
    assert check_stack_file("Pulumi.dev.yaml", STACK_FILE) == []


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        (STACK_FILE + "  foxhunt-observability:registryPassword: hunter2hunter2\n",
         "config.foxhunt-observability:registryPassword", "holds a literal credential"),
        (STACK_FILE + "  foxhunt-observability:runbookBaseUrl: https://admin:foxhunt123@grafana.invalid/d\n",
         "config.foxhunt-observability:runbookBaseUrl", "a URL carries a password (admin:fo…"),
        ("# import: curl http://admin:foxhunt123@localhost:3000/api/dashboards/db\n" + STACK_FILE,
         "line 1", "holds a URL with a password"),
        (STACK_FILE + "  foxhunt-observability:poller2: {token: 'xoxb-1234567890-abcdef'}\n",
         "config.foxhunt-observability:poller2.token", "holds a literal credential"),
    ],
)  # fmt: skip
def test_stack_file_plaintext_credentials(text, path, problem):
    violations = check_stack_file("Pulumi.dev.yaml", text)
    assert any(v.path == path and problem in v.problem for v in violations), "\n".join(map(str, violations))
    assert all(v.policy == "no-plaintext-secrets" and v.mandatory for v in violations)
    assert all("foxhunt123" not in v.message() and "hunter2hunter2" not in v.message() for v in violations)


def test_project_stack_files_have_no_plaintext_secret():
    root = REPO_ROOT
    files = sorted(root.glob("Pulumi.*.yaml"))
    assert len(files) >= 3
    for path in files:
        violations = check_stack_file(path.name, path.read_text())
        assert violations == [], "\n".join(map(str, violations))


def test_file_and_stack_file_checks_come_from_the_one_registry(monkeypatch):
    """A policy reads the rendered files or the stack file because ALL_POLICIES holds it with a
    `file_check` / `stack_file_check`, not because the engine names it."""

    def every_file(files):
        return ((name, Finding("", "seen", "nothing")) for name in files)

    probe = Policy(
        "probe-files",
        "Sees every rendered file and the stack file.",
        Enforcement.ADVISORY,
        "nothing",
        check=lambda obj, ctx: (),
        file_check=every_file,
        stack_file_check=lambda text: [Finding("", "seen", "nothing")],
    )
    files = {"prometheus/rules.yaml": "groups: []\n", "kubernetes/x.yaml": "kind: ConfigMap\n"}
    assert not [v for v in check_files(files) if v.policy == "probe-files"]
    monkeypatch.setattr(engine, "ALL_POLICIES", (*ALL_POLICIES, probe))
    assert [(v.policy, v.subject) for v in engine.check_files(files) if v.policy == "probe-files"] == [
        ("probe-files", "prometheus/rules.yaml")
    ]
    assert [v.policy for v in engine.check_stack_file("Pulumi.dev.yaml", "config: {}\n")] == ["probe-files"]
    with_files = {p.id for p in ALL_POLICIES if p.file_check is not None}
    assert {"alert-rule-annotations", "no-plaintext-secrets"} <= with_files


def test_replicated_prometheus_configs_carry_the_replica_label_and_alerts_drop_it():
    """The rendered configs of an HA stack pass; a replica without its label, replicas sharing one
    value, alerts keeping the label, or no Alertmanager are each reported on the file at fault."""
    cfg = ObservabilityConfig(
        shards=2, prometheus_replicas=2, cluster="dev", alertmanager_peers=("am-0:9093", "am-1:9093")
    )
    files = {
        f"prometheus/{name}": text
        for name, text in server_configs(cfg, ["training-dev"], "http://global:9090/api/v1/write", RULE_FILES).items()
    }
    assert "prometheus/prometheus-shard-1-replica-1.yml" in files
    assert check_files(files) == []

    def edited(name: str, edit: Callable[[dict[str, Any]], None]) -> dict[str, str]:
        document = yaml.safe_load(files[name])
        edit(document)
        return {**files, name: yaml.safe_dump(document)}

    replica = "prometheus/prometheus-shard-0-replica-1.yml"
    cases = {
        "no replica label": edited(replica, lambda d: d["global"]["external_labels"].pop("prometheus_replica")),
        "one value for both": edited(
            replica, lambda d: d["global"]["external_labels"].update(prometheus_replica="replica-0")
        ),
        "alerts keep it": edited(replica, lambda d: d["alerting"].pop("alert_relabel_configs")),
        "no Alertmanager": edited(replica, lambda d: d["alerting"].pop("alertmanagers")),
    }
    problems = {
        "no replica label": "carries no replica label",
        "one value for both": "carries no replica label",
        "alerts keep it": "alerts keep the replica label prometheus_replica",
        "no Alertmanager": "sends its alerts to no Alertmanager",
    }
    for case, broken in cases.items():
        found = [v for v in check_files(broken) if v.policy == "prometheus-replicas"]
        assert found and all(problems[case] in v.message() for v in found), (case, [v.message() for v in found])
        assert replica in {v.subject for v in found}, case
    specs = {OPERATOR_SPECS: yaml.safe_dump(operator_specs(cfg, {"release": "x"}, "http://global/api/v1/write"))}
    assert check_files(specs) == []
    no_label = yaml.safe_load(specs[OPERATOR_SPECS])
    no_label["prometheus-shards"]["replicaExternalLabelName"] = ""
    found = check_files({OPERATOR_SPECS: yaml.safe_dump(no_label)})
    assert [v.policy for v in found] == ["prometheus-replicas"], found


def test_a_job_made_from_the_training_template_is_held_to_it_by_its_pods() -> None:
    """The rendered Job file has only a generateName: it is the training template's by its pods'
    service, and a Job of other pods is not."""
    stack = compliant_stack()
    template = stack["training-job"]
    job_file = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "dqn-training-", "namespace": "training-dev", "labels": labels("training-job")},
        "spec": copy.deepcopy(template["spec"]["jobTemplate"]["spec"]),
    }
    (container,) = job_file["spec"]["template"]["spec"]["containers"]
    del container["command"], container["args"]  # the image's entrypoint with FOXHUNT_AUTOLOG=on
    violations = evaluate(objects({"training-job-file": job_file}), CONTEXT, [TRAINING_AUTOLOG])
    assert [(v.subject, v.path) for v in violations] == [
        ("Job training-dev/", "spec.template.spec.containers[trainer].command")
    ], violations
    job_file["spec"]["template"]["metadata"]["labels"] = labels("batch-export")
    assert evaluate(objects({"training-job-file": job_file}), CONTEXT, [TRAINING_AUTOLOG]) == []
