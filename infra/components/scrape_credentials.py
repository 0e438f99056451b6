"""ScrapeCredentials: what secured scrapes need besides the exporters (`scrapeSecurity`).

- beside Prometheus, the Secret `foxhunt-scrape-credentials` with the credential Prometheus sends
  (`token`, or `username` and `password`), from the Pulumi secret `scrapeCredential`; the
  scrape config and the PodMonitor refer to it, and the operator's Prometheus resources mount it;
- in each exporter namespace (the poller's, the training jobs'), the Secret of the web config the
  exporters read: TLS with the mounted certificate (client certificates required when Prometheus
  has one) and the SHA-256 hash of the credential, never the credential itself.

The certificate Secrets themselves (tls.crt, tls.key, ca.crt) are the stack's: a cert-manager
Certificate in each of those namespaces, named by `scrapeSecurity.certificate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from foxhunt_trainer.contract.web_config import secret_hash, web_config_document
from infra.components.common import METRICS_TLS_DIR, WEB_CONFIG_KEY, ExporterWeb, child, metadata
from observability.config import ScrapeSecurity
from observability.scrape_config import CA_KEY, CERT_KEY, KEY_KEY

TYPE = "foxhunt:observability:ScrapeCredentials"
APP = "scrape-credentials"
COMPONENT = "monitoring"


def exporter_web(security: ScrapeSecurity, web_config_secret: str) -> ExporterWeb:
    return ExporterWeb(security.tls_secret, web_config_secret, security.client_cert_secret is not None)


def web_config_yaml(security: ScrapeSecurity, credential: str) -> str:
    """The exporters' web config: their certificate, the CA clients must present a certificate of
    (when Prometheus has a client certificate), and the hash of the credential."""
    digest = secret_hash(credential)
    document = web_config_document(
        cert_file=f"{METRICS_TLS_DIR}/{CERT_KEY}",
        key_file=f"{METRICS_TLS_DIR}/{KEY_KEY}",
        client_ca_file=f"{METRICS_TLS_DIR}/{CA_KEY}" if security.client_cert_secret else None,
        basic_auth_users={security.username: digest} if security.authentication == "basic" else None,
        bearer_token_hashes=(digest,) if security.authentication == "bearer" else (),
    )
    text: str = yaml.safe_dump(document, sort_keys=False)
    return text


def credential_data(security: ScrapeSecurity, credential: str) -> dict[str, str]:
    if security.authentication == "bearer":
        return {"token": credential}
    return {"username": security.username, "password": credential}


@dataclass(frozen=True)
class ScrapeCredentialsArgs:
    security: ScrapeSecurity
    credential: Any  # the Pulumi secret scrapeCredential (a placeholder offline)
    prometheus_namespace: str
    web_config_secrets: Mapping[str, str]  # exporter namespace -> name of its web config Secret
    common_labels: Mapping[str, str]


class ScrapeCredentials(pulumi.ComponentResource):
    def __init__(self, name: str, args: ScrapeCredentialsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        security = args.security
        credential: pulumi.Output[str] = pulumi.Output.secret(args.credential)
        self.credentials = k8s.core.v1.Secret(
            f"{name}-prometheus",
            metadata=metadata(
                args.common_labels, security.credentials_secret, args.prometheus_namespace, app=APP,
                component=COMPONENT,
            ),
            type="Opaque",
            string_data=credential.apply(lambda value: credential_data(security, value)),
            opts=child(self),
        )  # fmt: skip
        self.web_configs = [
            k8s.core.v1.Secret(
                f"{name}-web-config-{namespace}",
                metadata=metadata(args.common_labels, secret_name, namespace, app=APP, component=COMPONENT),
                type="Opaque",
                string_data={WEB_CONFIG_KEY: credential.apply(lambda value: web_config_yaml(security, value))},
                opts=child(self),
            )
            for namespace, secret_name in sorted(args.web_config_secrets.items())
        ]
        self.register_outputs({})
