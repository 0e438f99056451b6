"""Strict schema validation: every object of every stack passes, and a misspelled field anywhere fails."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infra.offline import checks, schema_check
from infra.offline.result import RenderResult, kubernetes_manifest
from tests.infra.support import STACKS

# Keys whose values are free-form maps (any key is valid there), so a stray key proves nothing.
FREE_FORM_MAPS = {"labels", "annotations", "data", "stringData", "nodeSelector", "matchLabels", "requests", "limits"}
FREE_FORM_PATHS = {("Service", ("spec", "selector"))}  # a Service's selector is a plain label map
TYPO = "misspeltField"


def dict_nodes(node: Any, kind: str, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every dict in a manifest that describes a typed object (free-form maps left out)."""
    if isinstance(node, dict):
        if not path or (path[-1] not in FREE_FORM_MAPS and (kind, path) not in FREE_FORM_PATHS):
            yield path, node
        for key, value in node.items():
            yield from dict_nodes(value, kind, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from dict_nodes(value, kind, (*path, i))


def at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def validated_objects(result: RenderResult) -> list[tuple[str, dict[str, Any], bool]]:
    """(label, manifest, is_patch) for every object the program registers, plus standalone files."""
    out = []
    for resource in result.run.resources:
        manifest = kubernetes_manifest(resource)
        if manifest is not None:
            out.append((f"{resource.type}/{resource.name}", manifest, resource.type.endswith("Patch")))
    for path, text in result.files.items():
        if path.startswith("kubernetes/") and path not in result.manifests:
            out.append((path, yaml.safe_load(text), False))
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_every_stack_validates_strictly(rendered: dict[str, RenderResult], stack: str) -> None:
    result = rendered[stack]
    assert schema_check.check_render(result) == []
    kinds = {m["kind"] for _, m, _ in validated_objects(result)}
    expected = {"ConfigMap", "CronJob", "DaemonSet", "Deployment", "Job", "NetworkPolicy", "Secret", "Service"}
    if result.settings.scrape.mode == "operator":
        expected |= {"PodMonitor", "PrometheusRule", "AlertmanagerConfig"}
    assert kinds == expected


def test_the_render_runs_the_schema_check() -> None:
    assert ("kubernetes-schema", schema_check.check_render) in checks.ALL_CHECKS


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_a_misspelled_field_anywhere_in_any_object_fails(rendered: dict[str, RenderResult], stack: str) -> None:
    """Insert an unknown field into every typed object of every manifest (dev covers the classic
    kinds, staging the custom resources): each single insertion must be rejected, naming the spot."""
    version = rendered[stack].settings.kubernetes_version
    checked = 0
    for label, manifest, patch in validated_objects(rendered[stack]):
        assert schema_check.validate_manifest(manifest, version, patch=patch) == [], label
        for path, _ in list(dict_nodes(manifest, manifest["kind"])):
            broken = copy.deepcopy(manifest)
            at(broken, path)[TYPO] = "x"
            problems = schema_check.validate_manifest(broken, version, patch=patch)
            assert problems, f"{label}: an unknown field at {path} was accepted"
            assert any(TYPO in p for p in problems), problems
            checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    ("kind", "path", "typo"),
    [
        (
            "DaemonSet",
            ("spec", "template", "spec", "containers", 0, "securityContext"),
            ("runAsNonRoot", "runAsNonroot"),
        ),
        ("DaemonSet", ("spec", "template", "spec"), ("runtimeClassName", "runtimeClass")),
        ("CronJob", ("spec",), ("suspend", "suspended")),
        ("CronJob", ("spec", "jobTemplate", "spec"), ("ttlSecondsAfterFinished", "ttlSecondsAfterFinish")),
        ("Deployment", ("spec", "template", "spec", "containers", 0, "env", 0, "valueFrom"), ("fieldRef", "fieldref")),
        ("Service", ("spec",), ("clusterIP", "clusterIp")),
        ("ConfigMap", (), ("data", "datas")),
        ("Secret", (), ("stringData", "stringdata")),
    ],
)
def test_realistic_typos_are_rejected(
    rendered: dict[str, RenderResult], kind: str, path: tuple[Any, ...], typo: tuple[str, str]
) -> None:
    result = rendered["dev"]
    label, manifest, patch = next(o for o in validated_objects(result) if o[1]["kind"] == kind)
    broken = copy.deepcopy(manifest)
    node = at(broken, path)
    right, wrong = typo
    node[wrong] = node.pop(right)
    problems = schema_check.validate_manifest(broken, result.settings.kubernetes_version, patch=patch)
    assert any(wrong in p for p in problems), (label, problems)


@pytest.mark.parametrize(
    ("kind", "mutate", "needle"),
    [
        ("PodMonitor", lambda m: m["spec"]["podMetricsEndpoints"][0].update(relabellings=[]), "relabellings"),
        ("PodMonitor", lambda m: m["spec"]["podMetricsEndpoints"][0]["relabelings"][0].update(action="Keepp"), "Keepp"),
        ("PodMonitor", lambda m: m["metadata"].update(lables={}), "lables"),
        ("PrometheusRule", lambda m: m["spec"]["groups"][0]["rules"][0].update(expresion="up"), "expresion"),
        ("PrometheusRule", lambda m: m["spec"]["groups"][0].update(interval="15 seconds"), "15 seconds"),
        ("AlertmanagerConfig", lambda m: m["spec"]["route"].update(groupby=["x"]), "groupby"),
        ("AlertmanagerConfig", lambda m: m["spec"]["route"]["routes"][0].update(reciever="page"), "reciever"),
        (
            "AlertmanagerConfig",
            lambda m: m["spec"]["receivers"][-1]["webhookConfigs"][0].update(urlSecrets={}),
            "urlSecrets",
        ),
    ],
)
def test_custom_resources_are_checked_strictly(
    rendered: dict[str, RenderResult], kind: str, mutate: Any, needle: str
) -> None:
    result = rendered["staging"]
    manifest = copy.deepcopy(next(m for m in result.manifests.values() if m["kind"] == kind))
    mutate(manifest)
    problems = schema_check.validate_manifest(manifest, result.settings.kubernetes_version)
    assert any(needle in p for p in problems), problems


def test_patches_are_checked_for_the_fields_they_set_only(rendered: dict[str, RenderResult]) -> None:
    result = rendered["dev"]
    version = result.settings.kubernetes_version
    patch = next(m for m in result.manifests.values() if m["kind"] == "Deployment")
    # As a full Deployment it is incomplete (no selector, no image) ...
    full = schema_check.validate_manifest(patch, version)
    assert any("selector" in p for p in full)
    # ... as a patch it is fine, but a wrong type or a bad value still fails.
    assert schema_check.validate_manifest(patch, version, patch=True) == []
    broken = copy.deepcopy(patch)
    broken["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"] = 42
    assert schema_check.validate_manifest(broken, version, patch=True)
    empty = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "y"}}
    assert schema_check.validate_manifest(empty, version, patch=True) == ["the patch sets nothing besides metadata"]


def test_an_unknown_kind_is_a_problem_not_a_pass() -> None:
    manifest = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}}
    (problem,) = schema_check.validate_manifest(manifest, "1.30.0")
    assert "no schema for example.com/v1 Widget" in problem
    assert schema_check.validate_manifest({"kind": "ConfigMap"}, "1.30.0") == ["apiVersion and kind must be set"]


def test_the_stacks_kubernetes_version_picks_the_schema() -> None:
    assert schema_check.schema_version("1.30.0") == "1.30.0"
    assert schema_check.schema_version("1.32.7") == "1.32.0"
    newest = schema_check.available_versions()[-1]
    assert schema_check.schema_version("1.99.0") == newest
    # a field that only exists in newer Kubernetes (container resizePolicy, 1.27) fails against an older schema
    pod_template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "i", "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]}
            ],
        }
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"},
           "spec": {"template": pod_template}}  # fmt: skip
    assert schema_check.validate_manifest(job, "1.30.0") == []
    assert any("resizePolicy" in p for p in schema_check.validate_manifest(job, "1.26.0"))


def test_validators_are_cached_and_fast(rendered: dict[str, RenderResult]) -> None:
    result = rendered["prod"]
    version = schema_check.schema_version(result.settings.kubernetes_version)
    first = schema_check.validator(version, "apps/v1", "DaemonSet")
    assert schema_check.validator(version, "apps/v1", "DaemonSet") is first
    objects = validated_objects(result)
    started = time.perf_counter()
    rounds = 5
    for _ in range(rounds):
        for _, manifest, patch in objects:
            schema_check.validate_manifest(manifest, result.settings.kubernetes_version, patch=patch)
    per_manifest = (time.perf_counter() - started) / (rounds * len(objects))
    assert per_manifest < 0.05, f"{per_manifest * 1000:.1f} ms per manifest"
