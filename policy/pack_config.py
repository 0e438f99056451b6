"""The stack context as CrossGuard policy config, and back.

`pulumi preview --policy-pack policy --policy-pack-config rendered/<stack>/policy/pack-config.json` hands each
policy its own config object. A policy that needs stack context (declared services, the Tempo
endpoint, ...) declares it (`Policy.needs`/`uses`); its entry in the file carries exactly those
keys, in camelCase:

    {"scrape-annotations": {"services": {"api-gateway": {"ports": [9090], "path": "/metrics",
                                                         "required": true, "workloads": []}}},
     "otel-endpoint": {"tempoOtlpEndpoint": "http://tempo.monitoring-dev.svc.cluster.local:4317"}, ...}

`context_to_config` writes that file from a `PolicyContext`; `context_from_config` reads one
policy's entry (numbers may arrive as floats from a protobuf Struct). `enforcementLevel` may be
added to any entry to override a policy's level, as Pulumi's config format allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policy.engine import CONFIG_KEYS
from policy.manifests import as_int, mapping, sequence, string
from policy.rules import ALL_POLICIES
from policy.vocabulary import DeclaredService, Policy, PolicyContext

SERVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ports": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}},
        "path": {"type": "string"},
        "required": {"type": "boolean"},
        "workloads": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["ports"],
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "services": {
        "type": "object",
        "description": "Scrape targets the stack declares: service label value -> ports, metrics path, required",
        "additionalProperties": SERVICE_SCHEMA,
    },
    "tempoOtlpEndpoint": {"type": "string", "description": "The stack's Tempo OTLP gRPC endpoint"},
    "trainingJobName": {"type": "string", "description": "Name of the training job template"},
    "namespaces": {"type": "array", "items": {"type": "string"}, "description": "The stack's namespaces"},
    "commonLabels": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Labels every owned object carries",
    },
}


def policy_config_fields(policy: Policy) -> tuple[str, ...]:
    return (*policy.needs, *policy.uses)


def config_schema(policy: Policy) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """JSON-schema properties and required keys of a policy's config."""
    properties = {CONFIG_KEYS[f]: SCHEMAS[CONFIG_KEYS[f]] for f in policy_config_fields(policy)}
    return properties, [CONFIG_KEYS[f] for f in policy.needs]


def _encode(field: str, value: Any) -> Any:
    if field == "services":
        return {
            s.name: {
                "ports": sorted(s.ports),
                **({"path": s.path} if s.path else {}),
                "required": s.required,
                "workloads": sorted(s.workloads),
            }
            for s in value
        }
    if field == "namespaces":
        return sorted(value)
    if field == "common_labels":
        return dict(sorted(value.items()))
    return value


def context_to_config(ctx: PolicyContext, policies: Iterable[Policy] = ALL_POLICIES) -> dict[str, dict[str, Any]]:
    config: dict[str, dict[str, Any]] = {}
    for policy in policies:
        entry = {
            CONFIG_KEYS[f]: _encode(f, getattr(ctx, f))
            for f in policy_config_fields(policy)
            if getattr(ctx, f) is not None
        }
        if entry:
            config[policy.id] = entry
    return config


def _services(value: Any) -> tuple[DeclaredService, ...]:
    services = []
    for name in mapping(value):
        entry = mapping(mapping(value)[name])
        ports = frozenset(p for item in sequence(entry.get("ports")) if (p := as_int(item)) is not None)
        services.append(
            DeclaredService(
                name=str(name),
                ports=ports,
                path=string(entry.get("path")),
                required=entry.get("required", True) is not False,
                workloads=frozenset(str(w) for w in sequence(entry.get("workloads"))),
            )
        )
    return tuple(sorted(services, key=lambda s: s.name))


def context_from_config(config: Mapping[str, Any] | None, stack: str = "") -> PolicyContext:
    """The context one policy's config entry gives (keys it does not carry stay unknown)."""
    config = config or {}
    labels = config.get("commonLabels")
    namespaces = config.get("namespaces")
    return PolicyContext(
        stack=stack,
        services=_services(config["services"]) if "services" in config else None,
        tempo_otlp_endpoint=string(config.get("tempoOtlpEndpoint")),
        training_job_name=string(config.get("trainingJobName")),
        namespaces=frozenset(str(n) for n in sequence(namespaces)) if namespaces is not None else None,
        common_labels={str(k): str(mapping(labels)[k]) for k in mapping(labels)} if labels is not None else None,
    )
