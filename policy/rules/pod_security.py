"""Pod Security Standard "restricted" (Kubernetes v1.30 profile) for every pod template.

Objects this project owns must set every restricted field. A patch (the platform services'
Deployments belong to another system) is checked only on the pod fields it sets: it must not
make a pod less secure, but it cannot be required to own the whole pod spec.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policy.manifests import Container, PodTemplate, as_int, containers, mapping, pod_templates, sequence, string
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

# Volume types the restricted profile allows.
ALLOWED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
ALLOWED_SECCOMP = ("RuntimeDefault", "Localhost")
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)  # fmt: skip
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_FIX_BLOCK = (
    "securityContext: {runAsNonRoot: true, runAsUser: <uid > 0>, seccompProfile: {type: RuntimeDefault}} on the "
    "pod and {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}} on every container"
)


def check_pod_security(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    for template in pod_templates(obj):
        yield from _host_namespaces(template)
        yield from _volumes(template)
        yield from _sysctls(template)
        pod_sc = mapping(template.spec.get("securityContext"))
        yield from _selinux(template.field("spec.securityContext"), pod_sc)
        if obj.is_patch:
            yield from _patched_pod_fields(template, pod_sc)
        else:
            yield from _owned_pod_fields(template, pod_sc)
        for container in containers(template):
            yield from _container(container, obj.is_patch)


def _host_namespaces(template: PodTemplate) -> Iterator[Finding]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if template.spec.get(key) is not True:
            continue
        yield Finding(
            template.field(f"spec.{key}"),
            f"the pod shares the node's {key.removeprefix('host')} namespace ({key}: true)",
            f"remove {key} (or set it to false); a pod that needs the node's namespaces cannot run restricted",
        )


def _volumes(template: PodTemplate) -> Iterator[Finding]:
    for index, item in enumerate(sequence(template.spec.get("volumes"))):
        volume = mapping(item)
        name = string(volume.get("name")) or str(index)
        kinds = [key for key in volume if key != "name"]
        for kind in kinds:
            if kind in ALLOWED_VOLUME_TYPES:
                continue
            what = "a hostPath volume mounts the node's filesystem" if kind == "hostPath" else f"volume type {kind}"
            yield Finding(
                template.field(f"spec.volumes[{name}].{kind}"),
                f"{what}, which the restricted profile forbids",
                f"use one of {', '.join(sorted(ALLOWED_VOLUME_TYPES))} instead "
                "(devices: a device plugin or CSI driver)",
            )


def _sysctls(template: PodTemplate) -> Iterator[Finding]:
    sysctls = sequence(mapping(template.spec.get("securityContext")).get("sysctls"))
    for item in sysctls:
        name = string(mapping(item).get("name")) or ""
        if name not in SAFE_SYSCTLS:
            yield Finding(
                template.field(f"spec.securityContext.sysctls[{name}]"),
                f"sysctl {name!r} is not in the safe set",
                "drop it, or set it on the node instead of from a pod",
            )


def _selinux(path: str, security_context: Mapping[str, Any]) -> Iterator[Finding]:
    options = mapping(security_context.get("seLinuxOptions"))
    if string(options.get("type") or "") not in ALLOWED_SELINUX_TYPES:
        yield Finding(
            f"{path}.seLinuxOptions.type",
            f"SELinux type {options.get('type')!r} is not a container type",
            "remove seLinuxOptions.type or use container_t",
        )
    for key in ("user", "role"):
        if options.get(key):
            yield Finding(
                f"{path}.seLinuxOptions.{key}", f"a custom SELinux {key} is set", f"remove seLinuxOptions.{key}"
            )


def _owned_pod_fields(template: PodTemplate, pod_sc: Mapping[str, Any]) -> Iterator[Finding]:
    """Pod-level fields that each container may set instead; missing on both is a finding."""
    items = list(containers(template))
    path = template.field("spec.securityContext")
    if pod_sc.get("runAsNonRoot") is not True and not items_all(items, "runAsNonRoot", True):
        yield Finding(
            f"{path}.runAsNonRoot",
            "runAsNonRoot is not true, so the pod may run as root",
            f"set runAsNonRoot: true in {path} (or in every container's securityContext)",
        )
    if not _non_zero(pod_sc.get("runAsUser")) and not all(
        _non_zero(c.security_context.get("runAsUser")) for c in items
    ):
        yield Finding(
            f"{path}.runAsUser",
            "no non-zero runAsUser is set, so the user comes from the image and may be root",
            f"set runAsUser to the image's non-root uid (e.g. 65532) in {path}",
        )
    pod_seccomp = string(mapping(pod_sc.get("seccompProfile")).get("type"))
    if pod_seccomp not in ALLOWED_SECCOMP and not all(_container_seccomp(c) in ALLOWED_SECCOMP for c in items):
        yield Finding(
            f"{path}.seccompProfile.type",
            f"seccompProfile.type is {pod_seccomp or 'unset'}, not RuntimeDefault",
            f"set seccompProfile: {{type: RuntimeDefault}} in {path}",
        )


def _patched_pod_fields(template: PodTemplate, pod_sc: Mapping[str, Any]) -> Iterator[Finding]:
    """A patch may leave pod fields to the owner, but what it sets must be restricted."""
    path = template.field("spec.securityContext")
    if pod_sc.get("runAsNonRoot") is False:
        yield Finding(f"{path}.runAsNonRoot", "the patch sets runAsNonRoot: false", "remove it or set it to true")
    if "runAsUser" in pod_sc and not _non_zero(pod_sc.get("runAsUser")):
        yield Finding(f"{path}.runAsUser", "the patch makes the pod run as uid 0 (root)", "use a non-zero uid")
    seccomp = string(mapping(pod_sc.get("seccompProfile")).get("type"))
    if "seccompProfile" in pod_sc and seccomp not in ALLOWED_SECCOMP:
        yield Finding(f"{path}.seccompProfile.type", f"the patch sets seccomp {seccomp!r}", "use RuntimeDefault")


def _container(container: Container, is_patch: bool) -> Iterator[Finding]:
    sc = container.security_context
    path = container.field("securityContext")
    if sc.get("privileged") is True:
        yield Finding(f"{path}.privileged", f"container {container.name} is privileged", "remove privileged: true")
    if sc.get("procMount") not in (None, "Default"):
        yield Finding(f"{path}.procMount", "an unmasked /proc is mounted", "remove procMount or set it to Default")
    yield from _selinux(path, sc)
    for index, port in enumerate(sequence(container.spec.get("ports"))):
        host_port = mapping(port).get("hostPort")
        if host_port not in (None, 0, 0.0):
            yield Finding(
                container.field(f"ports[{index}].hostPort"),
                f"container {container.name} binds host port {_number(host_port)}",
                "remove hostPort; expose the port through a Service (or let Prometheus scrape the pod IP)",
            )
    if sc.get("runAsNonRoot") is False:
        yield Finding(f"{path}.runAsNonRoot", "runAsNonRoot is false", "remove it or set it to true")
    if "runAsUser" in sc and not _non_zero(sc.get("runAsUser")):
        yield Finding(f"{path}.runAsUser", f"container {container.name} runs as uid 0 (root)", "use a non-zero uid")
    seccomp = _container_seccomp(container)
    if seccomp is not None and seccomp not in ALLOWED_SECCOMP:
        yield Finding(f"{path}.seccompProfile.type", f"seccomp profile {seccomp!r}", "use RuntimeDefault")
    added = [str(c) for c in sequence(mapping(sc.get("capabilities")).get("add"))]
    for capability in added:
        if capability not in ALLOWED_ADDED_CAPABILITIES:
            yield Finding(
                f"{path}.capabilities.add",
                f"container {container.name} adds capability {capability}",
                "remove it; only NET_BIND_SERVICE may be added under the restricted profile",
            )
    if is_patch and not sc:
        return  # the owner's Deployment keeps its container security context
    if sc.get("allowPrivilegeEscalation") is not False:
        yield Finding(
            f"{path}.allowPrivilegeEscalation",
            f"container {container.name} may gain privileges (allowPrivilegeEscalation is not false)",
            f"set allowPrivilegeEscalation: false in {path}",
        )
    dropped = [str(c) for c in sequence(mapping(sc.get("capabilities")).get("drop"))]
    if "ALL" not in dropped:
        yield Finding(
            f"{path}.capabilities.drop",
            f"container {container.name} keeps the default Linux capabilities",
            f"set capabilities: {{drop: [ALL]}} in {path}",
        )


def items_all(items: list[Container], key: str, value: object) -> bool:
    return bool(items) and all(c.security_context.get(key) is value for c in items)


def _container_seccomp(container: Container) -> str | None:
    return string(mapping(container.security_context.get("seccompProfile")).get("type"))


def _number(value: Any) -> Any:
    """Numbers arrive as floats from the analyzer's protobuf Struct: show 9400, not 9400.0."""
    return as_int(value) if as_int(value) is not None else value


def _non_zero(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


POD_SECURITY_RESTRICTED = Policy(
    id="pod-security-restricted",
    description=(
        "Every pod template meets the Pod Security Standard 'restricted': no privileged containers, host "
        "namespaces, hostPath volumes or host ports; runAsNonRoot with a non-zero user; "
        "allowPrivilegeEscalation false; all capabilities dropped; seccomp RuntimeDefault; allowed volume types."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation=f"Set {RESTRICTED_FIX_BLOCK}; use only configMap, secret, emptyDir, projected, csi or PVC volumes.",
    check=check_pod_security,
    tags=("security", "pod-security-standards"),
)
