"""The glue between the typed stack settings and the policies: a `PolicyContext` per stack, and the
rendered stack as `KubeObject`s. Lives in `infra/` because `policy/` must not import `infra`
(policies read manifests); the render's offline checks and the policy tests both use it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from infra.offline.result import RenderResult
from infra.settings import Settings
from policy.manifests import kube_object_from_pulumi
from policy.pack_config import context_to_config
from policy.vocabulary import DeclaredService, KubeObject, PolicyContext

# The CrossGuard pack's config (`--policy-pack-config`) under rendered/<stack>/: the policies' stack
# context, derived from the stack's settings here and nowhere else.
PACK_CONFIG_PATH = "policy/pack-config.json"


def context_from_settings(settings: Settings) -> PolicyContext:
    """What the policies know about a stack: its platform services (must be scraped), the poller and
    the training job (scraped when annotated), its Tempo, namespaces and common labels."""
    cfg = settings.observability_config()
    services = [DeclaredService(s.name, frozenset({s.port}), s.path, required=True) for s in settings.services]
    services.append(DeclaredService(cfg.gpu_poller_service, frozenset({settings.poller.port}), "/metrics", False))
    services.append(
        DeclaredService(
            cfg.training_job_service,
            frozenset({settings.training_job.metrics_port}),
            "/metrics",
            False,
            frozenset({settings.training_job.name}),
        )
    )
    namespaces = settings.namespaces
    return PolicyContext(
        stack=settings.stack,
        services=tuple(sorted(services, key=lambda s: s.name)),
        tempo_otlp_endpoint=settings.endpoints.tempo_otlp_grpc,
        training_job_name=settings.training_job.name,
        namespaces=frozenset(
            {namespaces.platform, namespaces.monitoring, namespaces.training, settings.grafana.namespace}
        ),
        common_labels=dict(settings.common_labels),
    )


def rendered_objects(result: RenderResult) -> list[KubeObject]:
    """Every Kubernetes object of the render: the registered resources (type tokens tell patches
    apart), plus the Kubernetes files the render writes besides them (e.g. a Job template)."""
    objects = []
    for resource in result.run.resources:
        if resource.custom and (obj := kube_object_from_pulumi(resource.type, resource.inputs, resource.name)):
            objects.append(obj)
    from_resources = set(result.manifests)
    for name, text in sorted(result.files.items()):
        if name.startswith("kubernetes/") and name not in from_resources:
            document: Any = yaml.safe_load(text)
            is_patch = Path(name).name.split("_", 1)[0].endswith("patch")
            objects.append(KubeObject(document, is_patch=is_patch, origin=name))
    return objects


def pack_config_json(settings: Settings) -> str:
    """rendered/<stack>/policy/pack-config.json: what `pulumi preview --policy-pack-config` hands the pack."""
    return json.dumps(context_to_config(context_from_settings(settings)), indent=2, sort_keys=True) + "\n"
