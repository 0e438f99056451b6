"""NetworkPolicies for every owned pod (poller: ingress from the stack's Prometheus pods only, no
egress; training jobs: the same ingress plus rank to rank), the policy that catches an owned pod
left uncovered, and the scrape security a stack turns on (prod): the exporters' mounts and web
config, the credential beside Prometheus, and the scrape jobs that use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract.web_config import WEB_CONFIG_ENV, parse_web_config, secret_hash
from infra.components import gpu_poller
from infra.components.common import METRICS_TLS_DIR, WEB_CONFIG_KEY
from infra.offline import render
from infra.offline.policy_context import context_from_settings, rendered_objects
from infra.offline.result import RenderResult
from infra.settings import SCRAPE_CREDENTIAL_KEY, placeholder_secret
from observability import scrape_config
from policy.engine import evaluate
from policy.rules.network import NETWORK_POLICY_COVERAGE, selects
from tests.infra.support import STACKS, objects, one


def policies(result: RenderResult) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in objects(result, "NetworkPolicy")}


def prometheus_peer(result: RenderResult) -> dict[str, Any]:
    scrape = result.settings.scrape
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scrape.prometheus_namespace}},
        "podSelector": {"matchLabels": dict(scrape.prometheus_pod_selector)},
    }


@pytest.mark.parametrize("stack", STACKS)
def test_the_poller_is_reached_only_by_prometheus_and_reaches_nothing(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    poller = policies(result)[gpu_poller.CONTAINER]
    template = one(result, "DaemonSet")["spec"]["template"]
    assert poller["metadata"]["namespace"] == result.settings.namespaces.monitoring
    assert selects(poller["spec"]["podSelector"], template["metadata"]["labels"])
    assert poller["spec"]["policyTypes"] == ["Ingress", "Egress"] and poller["spec"]["egress"] == []
    assert poller["spec"]["ingress"] == [
        {"from": [prometheus_peer(result)], "ports": [{"protocol": "TCP", "port": result.settings.poller.port}]}
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_training_pods_admit_prometheus_on_the_metrics_port_and_their_own_ranks(
    rendered: dict[str, RenderResult], stack: str
) -> None:
    result = rendered[stack]
    settings = result.settings
    policy = policies(result)[settings.training_job.name]
    assert policy["metadata"]["namespace"] == settings.namespaces.training
    (job_file,) = [name for name in result.files if name.startswith("kubernetes/job_")]
    for template in (
        one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"],
        yaml.safe_load(result.files[job_file])["spec"]["template"],  # the Job for `kubectl create -f`
    ):
        assert selects(policy["spec"]["podSelector"], template["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: data, checkpoints, OTLP
    metrics, ranks = policy["spec"]["ingress"]
    job = settings.training_job
    port: dict[str, Any] = {"protocol": "TCP", "port": job.metrics_port}
    if job.processes_per_node > 1:  # one metrics port per local rank
        port["endPort"] = job.metrics_port + job.processes_per_node - 1
    assert metrics == {"from": [prometheus_peer(result)], "ports": [port]}
    assert ranks == {"from": [{"podSelector": policy["spec"]["podSelector"]}]}  # any port: rendezvous, collectives


def test_the_prometheus_selector_comes_from_the_stack_file() -> None:
    result = render.render_stack(
        "dev",
        overrides={
            "scrape": {
                "mode": "annotations",
                "delivery": "configmap",
                "objectName": "prometheus-annotation-scrape",
                "prometheusPods": {"namespace": "observability", "podSelector": {"app": "prometheus-server"}},
            }
        },
    )
    for policy in policies(result).values():
        assert policy["spec"]["ingress"][0]["from"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                "podSelector": {"matchLabels": {"app": "prometheus-server"}},
            }
        ]


@pytest.mark.parametrize("stack", STACKS)
def test_the_policy_catches_an_owned_pod_left_uncovered(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    context = context_from_settings(result.settings)
    everything = rendered_objects(result)
    only = (NETWORK_POLICY_COVERAGE,)  # (the render's own checks ran every policy on it already)
    assert not evaluate(everything, context, only)
    for name in (gpu_poller.CONTAINER, result.settings.training_job.name):
        without = [o for o in everything if not (o.kind == "NetworkPolicy" and o.name == name)]
        caught = evaluate(without, context, only)
        assert caught and all(v.mandatory for v in caught), name
        assert all("no NetworkPolicy" in v.problem for v in caught)


def test_prod_serves_tls_with_authentication_and_prometheus_scrapes_with_the_credential(
    rendered: dict[str, RenderResult],
) -> None:
    result = rendered["prod"]
    settings = result.settings
    security = settings.observability.scrape_security
    assert security is not None and security.client_cert_secret
    credential = placeholder_secret("prod", SCRAPE_CREDENTIAL_KEY)
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in objects(result, "Secret")}
    # beside Prometheus: the credential itself, which the PodMonitor's secured endpoint names
    held = secrets[(settings.scrape.prometheus_namespace, security.credentials_secret)]["stringData"]
    assert held == {"token": credential}
    endpoint = one(result, "PodMonitor")["spec"]["podMetricsEndpoints"][1]
    assert endpoint["authorization"]["credentials"] == {"name": security.credentials_secret, "key": "token"}
    assert endpoint["tlsConfig"]["keySecret"] == {"name": security.client_cert_secret, "key": "tls.key"}
    # in each exporter namespace: a web config with the hash only, TLS and client certificates required
    for namespace, name in (
        (settings.namespaces.monitoring, f"{gpu_poller.CONTAINER}-web-config"),
        (settings.namespaces.training, f"{settings.training_job.name}-web-config"),
    ):
        text = secrets[(namespace, name)]["stringData"][WEB_CONFIG_KEY]
        assert credential not in text
        document = yaml.safe_load(text)
        assert document["bearer_token_hashes"] == [secret_hash(credential)]
        tls = document["tls_server_config"]
        assert tls["client_auth_type"] == "RequireAndVerifyClientCert"
        assert tls["cert_file"] == f"{METRICS_TLS_DIR}/tls.crt"
        # the document is what the exporters accept (file checks aside: those are mounted in the pod)
        with pytest.raises(ValueError, match="is not a readable file"):
            parse_web_config(document, Path(METRICS_TLS_DIR))
    # the exporters mount their certificate and read the web config
    poller_pod = one(result, "DaemonSet")["spec"]["template"]["spec"]
    trainer_pod = one(result, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for pod in (poller_pod, trainer_pod):
        assert {"name": "metrics-tls", "secret": {"secretName": security.tls_secret, "defaultMode": 0o440}} in pod[
            "volumes"
        ]
    trainer_env = {e["name"]: e.get("value") for e in trainer_pod["containers"][0]["env"]}
    assert trainer_env[WEB_CONFIG_ENV] == "/etc/foxhunt/metrics-web/web-config.yaml"
    annotations = one(result, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations[scrape_config.SECURED_ANNOTATION] == scrape_config.SECURED_VALUE


def test_annotations_mode_scrapes_the_secured_pods_in_their_own_job() -> None:
    result = render.render_stack(
        "dev",
        overrides={
            "scrapeSecurity": {"certificate": "metrics-tls", "serverName": "metrics.monitoring-dev.svc",
                               "authentication": "basic"},
        },
    )  # fmt: skip
    plain, secured = yaml.safe_load(result.files["prometheus/scrape-config.yaml"])["scrape_configs"]
    assert plain["job_name"] == scrape_config.JOB_NAME and "tls_config" not in plain
    assert plain["relabel_configs"][0] == scrape_config.secured_selection(False)
    assert secured["job_name"] == scrape_config.SECURED_JOB_NAME
    assert secured["relabel_configs"][0] == scrape_config.secured_selection(True)
    assert secured["scheme"] == "https"
    assert secured["tls_config"] == {
        "ca_file": "/etc/prometheus/secrets/metrics-tls/ca.crt",
        "server_name": "metrics.monitoring-dev.svc",
        "insecure_skip_verify": False,
    }
    assert secured["basic_auth"] == {
        "username": "prometheus",
        "password_file": "/etc/prometheus/secrets/foxhunt-scrape-credentials/password",
    }
    # no client certificate for Prometheus: the kubelet probes the poller's /healthz over HTTPS
    probe = one(result, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    assert probe["httpGet"]["scheme"] == "HTTPS"


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ({"serverName": "metrics.svc"}, "scrapeSecurity.certificate"),
        ({"certificate": "tls", "serverName": "Not A Name"}, "scrapeSecurity.serverName"),
        ({"certificate": "tls", "serverName": "m.svc", "authentication": "digest"}, "scrapeSecurity.authentication"),
        ({"certificate": "tls", "serverName": "m.svc", "tlsKey": "x"}, "tlsKey"),
    ],
)
def test_bad_scrape_security_is_named(security: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        render.render_stack("dev", overrides={"scrapeSecurity": security})
