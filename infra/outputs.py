"""Stack outputs (`pulumi stack output`): what was deployed and where, for the people who run it.

- `namespaces`: platform, monitoring, training and Grafana namespaces;
- `pollerImage`: the GPU poller image reference the DaemonSet runs (pinned by digest);
- `dashboards`: uid -> title and URL (under the stack's `grafanaUrl`);
- `rules`, `alertmanager`: the Kubernetes objects that carry the alert rules and the routing;
- `scrape`: the scrape mode and the object that carries the scrape configuration;
- `trainingJobCommand`: the command that starts a training job from the template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from infra.settings import Settings


def object_ref(resource: pulumi.CustomResource) -> pulumi.Output[dict[str, str]]:
    """kind, namespace and name of a Kubernetes object, as the provider reports them."""
    typed: Any = resource  # every Kubernetes resource class has `kind` and `metadata` outputs
    kind, metadata = typed.kind, typed.metadata
    return pulumi.Output.all(kind, metadata).apply(
        lambda values: {
            "kind": str(values[0]),
            "namespace": str((values[1] or {}).get("namespace", "")),
            "name": str((values[1] or {}).get("name", "")),
        }
    )


def dashboard_url(grafana_url: str, uid: str) -> str:
    return f"{grafana_url.rstrip('/')}/d/{uid}"


def export_stack_outputs(
    settings: Settings,
    *,
    poller_image: pulumi.Input[str],
    dashboard_titles: Mapping[str, str],
    rules: pulumi.CustomResource,
    alert_groups: int,
    alerts: int,
    alertmanager: Sequence[pulumi.CustomResource],
    scrape: pulumi.CustomResource | None,
    training_job_command: str,
) -> None:
    ns = settings.namespaces
    pulumi.export(
        "namespaces",
        {
            "platform": ns.platform,
            "monitoring": ns.monitoring,
            "training": ns.training,
            "grafana": settings.grafana.namespace,
        },
    )
    pulumi.export("pollerImage", poller_image)
    pulumi.export(
        "dashboards",
        {
            uid: {"title": title, "url": dashboard_url(settings.grafana.url, uid)}
            for uid, title in sorted(dashboard_titles.items())
        },
    )
    pulumi.export("rules", object_ref(rules).apply(lambda ref: {**ref, "groups": alert_groups, "alerts": alerts}))
    pulumi.export("alertmanager", pulumi.Output.all(*(object_ref(r) for r in alertmanager)))
    pulumi.export(
        "scrape",
        {
            "mode": settings.scrape.mode,
            "intervalSeconds": settings.observability.scrape_interval_seconds,
            "object": object_ref(scrape) if scrape is not None else None,
        },
    )
    pulumi.export("trainingJobCommand", training_job_command.replace("<name>", "<run-name>"))
