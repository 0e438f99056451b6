"""Grafana provisioning through the sidecar: dashboard ConfigMaps and the datasources ConfigMap."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from policy.manifests import is_yaml, mapping, parsed_file, plain, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

DASHBOARD_LABEL = "grafana_dashboard"
DATASOURCE_LABEL = "grafana_datasource"
SIDECAR_LABEL_VALUE = "1"
MAX_CONFIGMAP_BYTES = 1024 * 1024  # the API server rejects a ConfigMap of 1 MiB or more
MAX_UID_LENGTH = 40  # Grafana rejects longer dashboard UIDs
UID_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Dashboard:
    key: str  # the ConfigMap data key
    uid: str | None
    title: str


def _json_object(text: str) -> Mapping[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, Mapping) else None


def looks_like_dashboard(document: Mapping[str, Any]) -> bool:
    return "panels" in document or ("schemaVersion" in document and "title" in document)


def dashboards_in(obj: KubeObject) -> tuple[list[Dashboard], list[str]]:
    """Dashboards in a ConfigMap's data, and data keys that should be dashboard JSON but do not parse."""
    found: list[Dashboard] = []
    broken: list[str] = []
    labelled = obj.labels.get(DASHBOARD_LABEL) is not None
    data = mapping(obj.manifest.get("data"))
    for key in data:
        text = string(data[key]) or ""
        document = _json_object(text)
        if document is None:
            if labelled and str(key).endswith(".json"):
                broken.append(str(key))
            continue
        if looks_like_dashboard(document):
            uid = document.get("uid")
            found.append(Dashboard(str(key), uid if isinstance(uid, str) else None, str(document.get("title") or "")))
    return found, broken


def configmap_size(obj: KubeObject) -> int:
    return len(json.dumps(plain(obj.manifest), separators=(",", ":"), ensure_ascii=False).encode())


def uid_findings(uid: str | None, where: str) -> Iterator[Finding]:
    if not uid:
        yield Finding(
            where, "the dashboard has no uid, so links to it and its provisioning identity change", "set a uid"
        )
    elif len(uid) > MAX_UID_LENGTH or not UID_PATTERN.match(uid):
        yield Finding(
            where,
            f"dashboard uid {uid!r} is {len(uid)} characters; Grafana accepts at most {MAX_UID_LENGTH} of "
            "letters, digits, '-' and '_'",
            f"shorten it to {MAX_UID_LENGTH} characters or fewer (e.g. 'foxhunt-training-cockpit')",
        )


def check_dashboard_configmap(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    if obj.kind != "ConfigMap":
        return
    dashboards, broken = dashboards_in(obj)
    labelled = obj.labels.get(DASHBOARD_LABEL)
    if not dashboards and labelled is None:
        return
    if labelled != SIDECAR_LABEL_VALUE:
        yield Finding(
            f"metadata.labels.{DASHBOARD_LABEL}",
            f'a dashboard ConfigMap without the sidecar label {DASHBOARD_LABEL}: "1" (it is {labelled!r}), so '
            "Grafana never loads it",
            f'set metadata.labels.{DASHBOARD_LABEL}: "1"',
        )
    if labelled is not None and not dashboards:
        yield Finding("data", "labelled as a dashboard ConfigMap but holds no dashboard JSON", "add the dashboard JSON")
    for key in broken:
        yield Finding(f"data[{key}]", f"{key} is not valid JSON", "write the dashboard with json.dumps")
    size = configmap_size(obj)
    if size >= MAX_CONFIGMAP_BYTES:
        yield Finding(
            "data",
            f"the ConfigMap is {size} bytes; the API server rejects objects of 1 MiB "
            f"({MAX_CONFIGMAP_BYTES} bytes) or more",
            "split the dashboard into several (one per ConfigMap) or drop unused panels",
        )
    for dashboard in dashboards:
        yield from uid_findings(dashboard.uid, f"data[{dashboard.key}].uid")


def _bare_dashboards(files: Mapping[str, str]) -> Iterator[tuple[str, str | None]]:
    """(path, uid) of every rendered dashboard file (`dashboards/<uid>.json`)."""
    for name, text in files.items():
        document = parsed_file(name, text) if name.endswith(".json") else None
        if isinstance(document, Mapping) and looks_like_dashboard(document):
            uid = document.get("uid")
            yield name, uid if isinstance(uid, str) else None


def dashboard_file_findings(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    for name, uid in _bare_dashboards(files):
        yield from ((name, finding) for finding in uid_findings(uid, "uid"))


def dashboard_file_uids_unique(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    seen: dict[str, str] = {}
    for name, uid in _bare_dashboards(files):
        if uid and uid in seen:
            yield name, Finding("uid", f"dashboard uid {uid!r} is also used by {seen[uid]}", "use unique uids")
        elif uid:
            seen[uid] = name


def datasource_file_findings(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    """The rendered datasource provisioning files."""
    for name, text in files.items():
        sources = datasources_in_text(text) if is_yaml(name) else []
        yield from ((name, f) for _, f in datasource_link_findings([("", s) for s in sources]))


def check_dashboard_uids_unique(
    objects: Sequence[KubeObject], _ctx: PolicyContext
) -> Iterator[tuple[KubeObject | None, Finding]]:
    seen: dict[str, str] = {}
    for obj in objects:
        if obj.kind != "ConfigMap":
            continue
        for dashboard in dashboards_in(obj)[0]:
            if not dashboard.uid:
                continue
            where = f"{obj.ref} data[{dashboard.key}]"
            if dashboard.uid in seen:
                yield (
                    obj,
                    Finding(
                        f"data[{dashboard.key}].uid",
                        f"dashboard uid {dashboard.uid!r} is also used by {seen[dashboard.uid]}; "
                        "Grafana keeps only one",
                        "give each dashboard its own uid",
                    ),
                )
            else:
                seen[dashboard.uid] = where


def datasources_in(obj: KubeObject) -> list[tuple[str, Mapping[str, Any]]]:
    """(data key, datasource) for every datasource a provisioning ConfigMap or Secret stringData holds."""
    if obj.kind not in ("ConfigMap", "Secret"):
        return []
    data = mapping(obj.manifest.get("data" if obj.kind == "ConfigMap" else "stringData"))
    found = []
    for key in data:
        found += [(str(key), ds) for ds in datasources_in_text(string(data[key]) or "")]
    return found


def datasources_in_text(text: str) -> list[Mapping[str, Any]]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    if not isinstance(document, Mapping):
        return []
    return [mapping(item) for item in sequence(document.get("datasources"))]


def _uid_references(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every `datasourceUid` under jsonData (derivedFields, tracesToLogsV2, serviceMap, exemplars, ...)."""
    if isinstance(value, Mapping):
        for key in value:
            child = f"{path}.{key}"
            if key == "datasourceUid" and isinstance(value[key], str):
                yield child, value[key]
            else:
                yield from _uid_references(value[key], child)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for index, item in enumerate(value):
            yield from _uid_references(item, f"{path}[{index}]")


def datasource_link_findings(sources: Sequence[tuple[str, Mapping[str, Any]]]) -> Iterator[tuple[int, Finding]]:
    """(index into `sources`, finding) for datasources without uid and cross-links that do not resolve."""
    uids = {uid for _, ds in sources if (uid := string(ds.get("uid")))}
    for index, (key, ds) in enumerate(sources):
        name = string(ds.get("name")) or f"#{index}"
        where = f"data[{key}].datasources[{name}]"
        if not string(ds.get("uid")):
            yield index, Finding(f"{where}.uid", f"datasource {name} has no uid", "set a fixed uid for cross-links")
        for path, target in _uid_references(ds.get("jsonData"), f"{where}.jsonData"):
            if target not in uids:
                yield (
                    index,
                    Finding(
                        path,
                        f"datasource {name} links to datasource uid {target!r}, which no provisioned datasource has "
                        f"(known: {', '.join(sorted(uids)) or 'none'})",
                        "point it at a provisioned datasource's uid (observability.config.DatasourceUids)",
                    ),
                )


def check_datasource_links(
    objects: Sequence[KubeObject], _ctx: PolicyContext
) -> Iterator[tuple[KubeObject | None, Finding]]:
    owners: list[KubeObject] = []
    sources: list[tuple[str, Mapping[str, Any]]] = []
    for obj in objects:
        found = datasources_in(obj)
        if found and obj.labels.get(DATASOURCE_LABEL) != SIDECAR_LABEL_VALUE:
            yield (
                obj,
                Finding(
                    f"metadata.labels.{DATASOURCE_LABEL}",
                    f"{obj.kind} provisions datasources but lacks the sidecar label "
                    f'{DATASOURCE_LABEL}: "1", so Grafana '
                    "never loads them",
                    f'set metadata.labels.{DATASOURCE_LABEL}: "1"',
                ),
            )
        for item in found:
            owners.append(obj)
            sources.append(item)
    for index, finding in datasource_link_findings(sources):
        yield owners[index], finding


DASHBOARD_CONFIGMAPS = Policy(
    id="dashboard-configmaps",
    description=(
        f'Dashboard ConfigMaps carry the sidecar label {DASHBOARD_LABEL}: "1", are under 1 MiB, hold valid JSON '
        f"and their dashboard uids have at most {MAX_UID_LENGTH} characters."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation=f'Label the ConfigMap {DASHBOARD_LABEL}: "1", keep one dashboard per ConfigMap and uids short.',
    check=check_dashboard_configmap,
    file_check=dashboard_file_findings,
    tags=("grafana",),
)

DASHBOARD_UIDS_UNIQUE = Policy(
    id="dashboard-uids-unique",
    description="Dashboard uids are unique across the stack.",
    enforcement=Enforcement.MANDATORY,
    remediation="Give every dashboard its own uid.",
    stack_check=check_dashboard_uids_unique,
    file_check=dashboard_file_uids_unique,
    tags=("grafana",),
)

DATASOURCE_LINKS_RESOLVE = Policy(
    id="datasource-links-resolve",
    description=(
        f'Datasource provisioning ConfigMaps carry {DATASOURCE_LABEL}: "1", every datasource has a uid and every '
        "cross-link "
        "(derivedFields, tracesToLogsV2, tracesToMetrics, serviceMap, exemplarTraceIdDestinations) resolves."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Use the fixed datasource uids for every datasourceUid in jsonData.",
    stack_check=check_datasource_links,
    file_check=datasource_file_findings,
    tags=("grafana",),
)
