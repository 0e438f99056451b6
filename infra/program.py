"""The Pulumi program as a function of the typed settings, so tests can run it once per stack."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from infra.settings import Settings, load_settings, pulumi_config_source, pulumi_secret_reader


def main() -> None:
    """Read and validate the stack config, then register every resource."""
    settings = load_settings(pulumi_config_source(), pulumi_secret_reader())
    build(settings)


def build(settings: Settings) -> None:
    k8s.core.v1.ConfigMap(
        "probe",
        metadata={"name": "probe", "namespace": settings.namespaces.monitoring},
        data={"port": str(settings.poller.port)},
    )
