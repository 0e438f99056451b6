"""The rendered result of one stack: what the program registered under the mock engine, every
Kubernetes object as it reaches the API server, and every file the render writes. The offline
checks read it; the render CLI builds and writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from infra.offline.mock_engine import MockRun, RecordedResource
from infra.settings import Settings

KUBERNETES_PREFIX = "kubernetes:"


@dataclass
class RenderResult:
    stack: str
    settings: Settings
    run: MockRun
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)  # relative path -> object
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text (all files)


def kubernetes_manifest(resource: RecordedResource) -> dict[str, Any] | None:
    """The object a Kubernetes resource sends to the API server (patches: the patch object)."""
    if not resource.type.startswith(KUBERNETES_PREFIX) or not resource.custom:
        return None
    _, group_version, kind = resource.type.split(":")
    group, _, version = group_version.rpartition("/")
    if group == "core":
        group = ""
    kind = kind.removesuffix("Patch")
    api_version = f"{group}/{version}" if group else version
    manifest = {k: v for k, v in resource.inputs.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **manifest}


def manifest_filename(resource: RecordedResource, manifest: Mapping[str, Any]) -> str:
    kind = resource.type.rsplit(":", 1)[-1].lower()
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or "cluster"
    return f"kubernetes/{kind}_{namespace}_{meta.get('name', resource.name)}.yaml"


def dump_yaml(document: Any) -> str:
    """Deterministic YAML; libyaml's emitter (40x faster than PyYAML's pure-Python one)."""
    return yaml.dump(
        document, Dumper=yaml.CSafeDumper, sort_keys=True, default_flow_style=False, width=120, allow_unicode=True
    )
