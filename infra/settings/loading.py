"""`load_settings`: the whole stack config, read and validated before any resource is registered.

It turns the stack's config (`Pulumi.<stack>.yaml`) into a `Settings` object or raises
`SettingsError` listing every problem at once, one line each, naming the key, the value and what
is expected. Credentials (Alertmanager receiver URLs, the registry password) are read only as
Pulumi secrets; a credential given in plaintext, or any URL carrying a password, is an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from infra.settings import sections
from infra.settings.model import KUBECONFIG_KEY, PROJECT, SECRET_KEYS, ImageBuild, Settings, SettingsError
from infra.settings.reading import ConfigSource, Reader, SecretReader

_CREDENTIAL_KEY = re.compile(r"(password|passwd|secret|token|api[_-]?key|credential|webhook)", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)

KNOWN_KEYS = {
    "environment", "kubernetesVersion", "namespaces", "endpoints", "services", "scrape", "poller",
    "trainingJob", "grafana", "grafanaUrl", "runbookBaseUrl", "criticalDetectionSeconds", "kubeContext",
    KUBECONFIG_KEY, "cluster", "prometheus", "kubeStateMetrics", "gpuHourlyCost", "energyPricePerKWh", "currency",
    *SECRET_KEYS,
}  # fmt: skip


def _leaves(path: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(f"{path}.{k}", v)]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(f"{path}[{i}]", v)]
    return [(path, value)]


def check_plaintext_credentials(r: Reader) -> None:
    for key in r.source.keys():  # noqa: SIM118 (a ConfigSource, not a dict)
        if r.source.is_secret(key):
            continue
        text = r.source.get(key) or ""
        if key in (*SECRET_KEYS, KUBECONFIG_KEY) or (_CREDENTIAL_KEY.search(key) and text):
            r.problems.append(
                f"{key} is a credential given in plaintext: remove it from Pulumi.{r.source.stack}.yaml and run "
                f"`pulumi config set --secret {key} <value>`"
            )
            continue
        parsed = r.raw(key)
        for path, leaf in _leaves(key, parsed):
            leaf_key = path.rsplit(".", 1)[-1].split("[", 1)[0]
            if _CREDENTIAL_KEY.search(leaf_key) and leaf not in (None, "", False):
                r.problems.append(
                    f"{path} looks like a credential given in plaintext: keep credentials only in Pulumi secrets "
                    "(`pulumi config set --secret ...`)"
                )
            elif isinstance(leaf, str) and _URL_WITH_PASSWORD.search(leaf):
                r.problems.append(
                    f"{path} holds a URL with a password (user:password@host): drop the credentials from the URL "
                    "and keep them in a Pulumi secret"
                )


def load_settings(source: ConfigSource, secret: SecretReader) -> Settings:
    """Read and validate the whole stack config; raise `SettingsError` listing every problem."""
    r = Reader(source)
    given = set(source.keys())
    for key in sorted(given - KNOWN_KEYS):
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS - given), n=1, cutoff=0.75)
        if close:
            # One problem for one typo: the key it was meant to be is not reported missing too.
            r.problems.append(f"{key} is not a known setting: did you mean {close[0]}?")
            r.reported.add(close[0])
        else:
            r.problems.append(f"{key} is not a known setting: expected one of {', '.join(sorted(KNOWN_KEYS))}")
    check_plaintext_credentials(r)

    environment = sections.environment(r)
    kubernetes_version = sections.kubernetes_version(r)
    namespaces = sections.namespaces(r)
    endpoints = sections.endpoints(r, namespaces)
    services = sections.services(r)
    budget = sections.critical_detection_seconds(r)
    scrape = sections.scrape(r, budget)
    poller = sections.poller(r, secret)
    training_job = sections.training_job(r)
    grafana = sections.grafana(r, namespaces)
    runbook_base_url = sections.runbook_base_url(r)
    alerting = sections.alerting(r, secret)
    kubernetes = sections.kubernetes_target(r, secret)
    prometheus = sections.prometheus(r, environment, endpoints)
    cost = sections.cost(r)
    kube_state_metrics = sections.kube_state_metrics(r)
    if poller.min_interval_seconds > scrape.critical_interval_seconds - 1:
        # A scrape within min_interval of the last pass gets that pass: the GPU data could be one
        # scrape interval older than the detection budget allows for.
        r.problem(
            "poller.minIntervalSeconds",
            f"{poller.min_interval_seconds:g}",
            f"at most {scrape.critical_interval_seconds - 1} (scrape.criticalIntervalSeconds - 1), so that every "
            "scrape of the poller gets a fresh NVML pass and a GPU failure is seen at the next scrape",
        )
    if isinstance(poller.image, ImageBuild) and source.get("registryPassword") is None:
        r.problems.append(
            "registryPassword is missing: the poller image is built and pushed, so set it with "
            "`pulumi config set --secret registryPassword <token>` (or pin poller.image.digest instead)"
        )

    if r.problems:
        raise SettingsError(source.stack, r.problems)
    return Settings(
        project=PROJECT,
        stack=source.stack,
        environment=environment,
        kubernetes_version=kubernetes_version,
        namespaces=namespaces,
        endpoints=endpoints,
        services=services,
        scrape=scrape,
        poller=poller,
        training_job=training_job,
        grafana=grafana,
        alerting=alerting,
        runbook_base_url=runbook_base_url,
        critical_detection_seconds=budget,
        kubernetes=kubernetes,
        prometheus=prometheus,
        cost=cost,
        kube_state_metrics=kube_state_metrics,
        common_labels={
            "app.kubernetes.io/part-of": PROJECT,
            "app.kubernetes.io/managed-by": "pulumi",
            "foxhunt.io/environment": environment,
        },
    )
