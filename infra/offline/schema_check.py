"""Offline schema validation of every Kubernetes object a stack renders, in strict mode.

- Built-in kinds: the official OpenAPI schemas of the stack's Kubernetes version as
  `kubernetes-validate` ships them (`v<version>-local-strict`: unknown fields rejected), picking the
  newest schema version not newer than the stack's. One compiled validator per (version,
  apiVersion, kind), cached, so a manifest costs well under a millisecond after the first.
- Patches (`*Patch` resources): validated against the same kind's schema with every `required`
  removed: a patch sets only some fields, but each field it sets must exist and have the right
  type, so a misspelled field still fails.
- Custom resources (PodMonitor, PrometheusRule, AlertmanagerConfig): no upstream schema exists in
  `kubernetes-validate`, so `infra/offline/schemas/` vendors the prometheus-operator CRDs' openAPIV3Schema
  (see each file's `$comment`); they are made strict here (unknown fields rejected, as the API server
  does with `fieldValidation=Strict`) and their `metadata` checked against ObjectMeta.
- A kind with no schema at all is a problem too: nothing reaches the cluster unchecked.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs pinned; the validator API used is small
import kubernetes_validate
import yaml
from referencing import Registry, Resource

from infra import REPO_ROOT
from infra.offline.result import RenderResult, kubernetes_manifest

CRD_SCHEMAS = Path(__file__).resolve().parent / "schemas"
DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
OBJECT_META = f"{DEFINITIONS_ID}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


SCHEMA_ROOT = Path(kubernetes_validate.__file__).resolve().parent / "kubernetes-json-schema"


class NoSchemaError(LookupError):
    pass


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@functools.cache
def available_versions() -> tuple[str, ...]:
    found = {m.group(1) for p in SCHEMA_ROOT.iterdir() if (m := re.fullmatch(r"v([0-9.]+)-local-strict", p.name))}
    return tuple(sorted(found, key=_version_key))


def schema_version(kubernetes_version: str) -> str:
    """The newest shipped schema version not newer than the cluster's (same rule as kubernetes-validate)."""
    wanted = _version_key(kubernetes_version.lstrip("v"))[:2]
    usable = [v for v in available_versions() if _version_key(v)[:2] <= wanted]
    if not usable:
        raise NoSchemaError(f"no Kubernetes schemas for version {kubernetes_version} (have {available_versions()})")
    return usable[-1]


def _strip_required(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_required(v) for k, v in node.items() if k != "required"}
    if isinstance(node, list):
        return [_strip_required(v) for v in node]
    return node


@functools.cache
def _definitions(version: str, relaxed: bool) -> dict[str, Any]:
    path = SCHEMA_ROOT / f"v{version}-local-strict" / "_definitions.json"
    definitions: dict[str, Any] = json.loads(path.read_text())
    return _strip_required(definitions) if relaxed else definitions


@functools.cache
def _registry(version: str, relaxed: bool) -> Registry[Any]:
    resource: Resource[Any] = Resource.from_contents(_definitions(version, relaxed))
    return resource @ Registry()


def _api_slug(api_version: str) -> str:
    # rbac.authorization.k8s.io/v1 -> rbac-v1, apps/v1 -> apps-v1, v1 -> v1 (kubernetes-validate's naming)
    return re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)


def crd_schema_path(api_version: str, kind: str) -> Path:
    group, _, version = api_version.rpartition("/")
    return CRD_SCHEMAS / f"{group}_{version}_{kind.lower()}.json"


def strict_crd_schema(openapi: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A CRD's openAPIV3Schema as a strict JSON Schema: objects with `properties` reject unknown
    fields (unless `x-kubernetes-preserve-unknown-fields`), metadata is ObjectMeta."""

    def strict(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: strict(v) for k, v in node.items()}
            if (
                "properties" in out
                and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")
            ):
                out["additionalProperties"] = False
            return out
        if isinstance(node, list):
            return [strict(v) for v in node]
        return node

    schema: dict[str, Any] = strict(copy.deepcopy(dict(openapi)))
    properties = schema["properties"]
    properties["metadata"] = {"$ref": OBJECT_META}
    properties["apiVersion"] = {"const": api_version}
    properties["kind"] = {"const": kind}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return schema


@functools.cache
def validator(version: str, api_version: str, kind: str, relaxed: bool = False) -> Any:
    """Compiled validator for one kind at one schema version (cached)."""
    crd_path = crd_schema_path(api_version, kind) if "." in api_version.split("/")[0] else None
    if crd_path is not None and crd_path.is_file():
        schema = strict_crd_schema(json.loads(crd_path.read_text()), api_version, kind)
    else:
        path = SCHEMA_ROOT / f"v{version}-local-strict" / f"{kind.lower()}-{_api_slug(api_version)}.json"
        if not path.is_file():
            raise NoSchemaError(
                f"no schema for {api_version} {kind} (Kubernetes {version}); for a custom resource vendor its CRD "
                f"schema as {crd_schema_path(api_version, kind).relative_to(REPO_ROOT)}"
            )
        schema = json.loads(path.read_text())
    if relaxed:
        schema = _strip_required(schema)
    cls = jsonschema.validators.Draft202012Validator
    return cls(schema, registry=_registry(version, relaxed))


def _where(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(object)"


def validate_manifest(manifest: Mapping[str, Any], kubernetes_version: str, *, patch: bool = False) -> list[str]:
    """Problems with one object (empty when valid); `patch=True` relaxes `required` only."""
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind must be set"]
    try:
        check = validator(schema_version(kubernetes_version), api_version, kind, patch)
    except NoSchemaError as exc:
        return [str(exc)]
    errors = sorted(check.iter_errors(dict(manifest)), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems = [f"{_where(e.absolute_path)}: {e.message}" for e in errors]
    if patch and not (set(manifest) - {"apiVersion", "kind", "metadata"}):
        problems.append("the patch sets nothing besides metadata")
    return problems


def _label(manifest: Mapping[str, Any]) -> str:
    meta = manifest.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName", "?")
    return f"{manifest.get('kind')} {meta.get('namespace', '-')}/{name}"


def check_render(result: RenderResult) -> list[str]:
    """The render check: every object the program registers and every standalone manifest file."""
    version = result.settings.kubernetes_version
    problems: list[str] = []
    for resource in result.run.resources:
        manifest = kubernetes_manifest(resource)
        if manifest is None:
            continue
        patch = resource.type.endswith("Patch")
        label = f"{_label(manifest)}{' (patch)' if patch else ''}"
        problems += [f"{label}: {p}" for p in validate_manifest(manifest, version, patch=patch)]
    for path, text in sorted(result.files.items()):
        if path.startswith("kubernetes/") and path not in result.manifests:
            for document in yaml.safe_load_all(text):
                if document:
                    problems += [f"{path} {_label(document)}: {p}" for p in validate_manifest(document, version)]
    return problems
