"""Container hygiene: requests and limits, probes on long-running containers, pinned images."""

from __future__ import annotations

import re
from collections.abc import Iterator

from policy.manifests import containers, mapping, pod_templates, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

RESOURCE_NAMES = ("cpu", "memory")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# A tag that names one release: 1.2.3, v1.2, 2024.05.01, 1.2.3-debian-12-r4 (not latest/main/stable...).
VERSION_TAG = re.compile(r"^v?[0-9]+(\.[0-9]+)+([-+._][0-9A-Za-z.-]+)?$")


def check_resources(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    if obj.is_patch:
        return  # the service owner's Deployment sizes its containers
    for template in pod_templates(obj):
        for container in containers(template, ("containers", "initContainers")):
            resources = mapping(container.spec.get("resources"))
            for section in ("requests", "limits"):
                values = mapping(resources.get(section))
                missing = [name for name in RESOURCE_NAMES if values.get(name) in (None, "")]
                if missing:
                    yield Finding(
                        container.field(f"resources.{section}"),
                        f"container {container.name} has no {' or '.join(missing)} {section}",
                        f"set resources.{section}.{{{', '.join(missing)}}} (e.g. from the stack's resources settings)",
                    )


def check_probes(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    if obj.is_patch:
        return
    for template in pod_templates(obj):
        if not template.long_running:
            continue
        for container in containers(template, ("containers",)):
            for probe in ("livenessProbe", "readinessProbe"):
                if not mapping(container.spec.get(probe)):
                    yield Finding(
                        container.field(probe),
                        f"long-running container {container.name} has no {probe}",
                        f"add {probe} (e.g. httpGet on the container's health endpoint such as /healthz)",
                    )


def _images(obj: KubeObject) -> Iterator[tuple[str, str]]:
    for template in pod_templates(obj):
        for container in containers(template):
            image = string(container.spec.get("image"))
            if image is not None:
                yield container.field("image"), image


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """repository, tag, digest of an image reference (registry ports are not tags)."""
    reference, _, digest = image.partition("@")
    if ":" not in reference.rsplit("/", 1)[-1]:
        return reference, None, digest or None
    repository, _, tag = reference.rpartition(":")
    return repository, tag, digest or None


def check_image_not_latest(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    for path, image in _images(obj):
        _, tag, digest = split_image(image)
        if digest:
            continue
        if tag is None or tag == "latest":
            yield Finding(
                path,
                f"image {image!r} {'has no tag' if tag is None else 'uses the latest tag'}, so every pull may run "
                "different code",
                "pin it by digest: REGISTRY/REPO@sha256:<64 hex> (docker buildx imagetools inspect prints it)",
            )


def check_image_digest(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    for path, image in _images(obj):
        _, tag, digest = split_image(image)
        if digest:
            if not DIGEST.search(image):
                yield Finding(path, f"image {image!r} has a malformed digest", "use @sha256:<64 lower-case hex>")
        elif tag is not None and tag != "latest":
            kind = "a version tag" if VERSION_TAG.match(tag) else f"the mutable tag {tag!r}"
            yield Finding(
                path,
                f"image {image!r} is pinned by {kind}, not by digest; a tag can be re-pushed",
                "pin it by digest: REGISTRY/REPO@sha256:<64 hex> (keep the tag in a comment or label if wanted)",
            )


CONTAINER_RESOURCES = Policy(
    id="container-resources",
    description="Every container (init containers too) requests and limits CPU and memory.",
    enforcement=Enforcement.MANDATORY,
    remediation="Set resources.requests and resources.limits for cpu and memory on every container.",
    check=check_resources,
    tags=("reliability",),
)

CONTAINER_PROBES = Policy(
    id="container-probes",
    description="Every long-running container (Deployment, DaemonSet, StatefulSet) has liveness and readiness probes.",
    enforcement=Enforcement.MANDATORY,
    remediation="Add livenessProbe and readinessProbe, e.g. httpGet on /healthz of the container's port.",
    check=check_probes,
    tags=("reliability",),
)

IMAGE_NOT_LATEST = Policy(
    id="image-not-latest",
    description="No container image is untagged or uses the 'latest' tag.",
    enforcement=Enforcement.MANDATORY,
    remediation="Reference images by digest (REGISTRY/REPO@sha256:...).",
    check=check_image_not_latest,
    tags=("supply-chain",),
)

IMAGE_PINNED_BY_DIGEST = Policy(
    id="image-pinned-by-digest",
    description="Container images are pinned by digest; a version tag alone is reported (advisory).",
    enforcement=Enforcement.ADVISORY,
    remediation="Append @sha256:<digest> to the image reference.",
    check=check_image_digest,
    tags=("supply-chain",),
)
