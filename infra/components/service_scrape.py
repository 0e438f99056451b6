"""ServiceScrapeAnnotations: scrape annotations and OTEL env on the platform's own Deployments.

The Deployments belong to another system, so each gets a `DeploymentPatch` (server-side apply),
never a Deployment: Pulumi owns only the fields below, under the field manager
`foxhunt-observability`, and the owner keeps everything else.

Per service the patch sets, on the pod template:
- the label `app.kubernetes.io/name: <service>` (scrape discovery's `service` target label),
- the annotations `prometheus.io/scrape|port|path|scheme`,
- on the named container: OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
  (environment; namespace, pod and node from the downward API) and the three downward-API
  variables the attributes reference.

Decisions (docs/outputs.md, "What `pulumi destroy` does"):
- Conflicts are not forced (`pulumi.com/patchForce` is not set): if another field manager already
  owns one of these fields with a different value, `pulumi up` fails naming that manager instead of
  silently taking the field over. Fields the owner sets to the same value are shared, no conflict.
- Destroy removes the fields (no `retainOnDelete`): deleting a Patch relinquishes our ownership, so
  the annotations, label and env vars that only we own are removed and each Deployment rolls out
  once more. Scraping and tracing of those services stop with the stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import FIELD_MANAGER, OtelExport, child, otel_env
from infra.settings import ServiceSettings
from observability.scrape_config import SERVICE_LABEL, pod_scrape_annotations

TYPE = "foxhunt:observability:ServiceScrapeAnnotations"
PATCH_FIELD_MANAGER_ANNOTATION = "pulumi.com/patchFieldManager"


@dataclass(frozen=True)
class ServiceScrapeArgs:
    services: tuple[ServiceSettings, ...]
    namespace: str  # where the platform's Deployments live
    otel: OtelExport
    # Services that are sources of critical alerts (the training service reports NaN values), and
    # the interval/timeout annotations they are scraped with.
    critical_services: tuple[str, ...] = ()
    critical_scrape: Mapping[str, str] = field(default_factory=dict)


def service_otel_env(otel: OtelExport, service: ServiceSettings) -> list[dict[str, Any]]:
    extra = [("ml.model_type", service.model_type)] if service.model_type != "none" else []
    return otel_env(otel, service.name, extra)


def deployment_patch(args: ServiceScrapeArgs, service: ServiceSettings) -> dict[str, Any]:
    """The patch object (apiVersion/kind aside) for one service's Deployment."""
    return {
        "metadata": {
            "name": service.name,
            "namespace": args.namespace,
            "annotations": {PATCH_FIELD_MANAGER_ANNOTATION: FIELD_MANAGER},
        },
        "spec": {
            "template": {
                "metadata": {
                    "labels": {SERVICE_LABEL: service.name},
                    "annotations": {
                        **pod_scrape_annotations(service.port, service.path),
                        **(args.critical_scrape if service.name in args.critical_services else {}),
                    },
                },
                "spec": {"containers": [{"name": service.container, "env": service_otel_env(args.otel, service)}]},
            }
        },
    }


class ServiceScrapeAnnotations(pulumi.ComponentResource):
    """One DeploymentPatch per configured platform service."""

    def __init__(self, name: str, args: ServiceScrapeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.patches: dict[str, k8s.apps.v1.DeploymentPatch] = {}
        for service in args.services:
            patch = deployment_patch(args, service)
            self.patches[service.name] = k8s.apps.v1.DeploymentPatch(
                f"{name}-{service.name}",
                metadata=patch["metadata"],
                spec=patch["spec"],
                opts=child(self, formerly=f"{service.name}-observability"),
            )
        self.register_outputs({"services": sorted(self.patches)})
