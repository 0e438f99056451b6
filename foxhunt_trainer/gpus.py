"""Which GPUs this training job holds: their NVML UUIDs, found from inside the job's container.

The GPU poller labels every GPU series with `uuid`; a job that exports one
`ml_training_job_gpu_info{model_type, job_id, uuid} 1` per GPU it was given lets every rule join
the two on `uuid`. Nothing here needs a privilege: no hostPath, no kubelet pod-resources socket.
The NVIDIA container runtime already decides which GPUs a container sees.

Discovery, first answer wins:
1. NVML inside the container (nvidia-ml-py). The runtime mounts libnvidia-ml only when the
   container's `NVIDIA_DRIVER_CAPABILITIES` includes `utility` (the job template sets
   `compute,utility`), and NVML then enumerates exactly the devices the container was given.
   On a GPU in MIG mode the container's NVML shows the parent GPU and the MIG devices the
   container was given; the job holds those MIG devices (their `MIG-...` UUIDs), not the parent.
2. `NVIDIA_VISIBLE_DEVICES` when it lists `GPU-...` or `MIG-...` UUIDs (what the NVIDIA device
   plugin sets with `DEVICE_LIST_STRATEGY=envvar` and `deviceIDStrategy=uuid`; a MIG device's
   UUID is what the poller labels its series with).
3. Nothing: a CPU-only job (no variable, or `void`/`none`) exports no series and logs nothing.
   Indices (`0,1`), `all` or the legacy MIG form `MIG-GPU-<uuid>/<gi>/<ci>` (drivers before
   R470) without NVML name no UUID: the job stays unattributed and says why in one log line.

`python -m foxhunt_trainer` prints what a container would report (JSON).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger(__name__)

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES_ENV = "NVIDIA_DRIVER_CAPABILITIES"
# What the job template sets: `compute` for CUDA, `utility` for libnvidia-ml (NVML) in the container.
DRIVER_CAPABILITIES = "compute,utility"
UUID_PREFIX = "GPU-"
MIG_UUID_PREFIX = "MIG-"
# The legacy MIG identifier (MIG-GPU-<uuid>/<gi>/<ci>) is no UUID NVML reports.
_LEGACY_MIG_PREFIX = "MIG-GPU-"
NVML_DEVICE_MIG_ENABLE = 1


def is_device_uuid(value: str) -> bool:
    """A GPU's (`GPU-...`) or a MIG device's (`MIG-...`) UUID as NVML reports it."""
    return value.startswith(UUID_PREFIX) or (
        value.startswith(MIG_UUID_PREFIX) and not value.startswith(_LEGACY_MIG_PREFIX) and "/" not in value
    )


# NVIDIA_VISIBLE_DEVICES values that mean "no GPU" (container runtime semantics).
NO_DEVICES = frozenset({"", "void", "none"})


class Source(enum.Enum):
    NVML = "nvml"
    ENVIRONMENT = "environment"
    NONE = "none"


@dataclass(frozen=True)
class Discovery:
    """The GPUs found (NVML UUIDs, in enumeration order), where they came from, and, when the job
    has GPUs that could not be named, why (the one log line)."""

    uuids: tuple[str, ...]
    source: Source
    unattributed_reason: str = ""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_uuids() -> tuple[str, ...] | None:
    """UUIDs of every GPU NVML enumerates in this container, or None when NVML is unavailable
    (no nvidia-ml-py, no libnvidia-ml, no driver)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        uuids: list[str] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            migs = _mig_uuids(pynvml, handle)
            uuids += migs if migs is not None else [_text(pynvml.nvmlDeviceGetUUID(handle))]
        return tuple(uuids)
    except pynvml.NVMLError as error:
        LOG.warning("NVML answered init but not the device list (%s); falling back to %s", error, VISIBLE_DEVICES_ENV)
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _mig_uuids(pynvml: Any, handle: Any) -> list[str] | None:
    """The UUIDs of the MIG devices of a GPU in MIG mode this container sees; None when the GPU is not
    in MIG mode (or the driver has no MIG)."""
    try:
        if pynvml.nvmlDeviceGetMigMode(handle)[0] != NVML_DEVICE_MIG_ENABLE:
            return None
        slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:
        return None
    found: list[str] = []
    for slot in range(slots):
        try:
            found.append(_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))))
        except pynvml.NVMLError:  # NOT_FOUND: an empty slot, or one given to another container
            continue
    return found


def from_visible_devices(value: str | None) -> Discovery:
    """What `NVIDIA_VISIBLE_DEVICES` alone says (step 2 and 3 of the discovery)."""
    entries = [] if value is None else [e.strip() for e in value.split(",") if e.strip()]
    if value is None or value.strip().lower() in NO_DEVICES or not entries:
        return Discovery((), Source.NONE)
    uuids = tuple(dict.fromkeys(e for e in entries if is_device_uuid(e)))
    others = [e for e in entries if not is_device_uuid(e)]
    if not others:
        return Discovery(uuids, Source.ENVIRONMENT)
    reason = (
        f"{VISIBLE_DEVICES_ENV}={value!r} names GPUs by index, `all` or legacy MIG identifier, not by UUID, and NVML "
        f"is not available in the container (set {DRIVER_CAPABILITIES_ENV}={DRIVER_CAPABILITIES}): the job's "
        f"GPU series cannot be joined to it"
    )
    # Partly named: export what is named, still say why the rest is missing.
    return Discovery(uuids, Source.ENVIRONMENT if uuids else Source.NONE, reason)


def discover(
    environ: Mapping[str, str] | None = None, nvml: Callable[[], tuple[str, ...] | None] | None = None
) -> Discovery:
    """The GPUs this container was given; logs one line when it has GPUs it cannot name."""
    env = os.environ if environ is None else environ
    found = (nvml or nvml_uuids)()
    if found is not None and found:
        return Discovery(found, Source.NVML)
    result = from_visible_devices(env.get(VISIBLE_DEVICES_ENV))
    if result.unattributed_reason:
        LOG.warning("training job GPUs unattributed: %s", result.unattributed_reason)
    return result


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = discover()
    print(
        json.dumps(
            {"uuids": list(result.uuids), "source": result.source.value, "unattributed": result.unattributed_reason}
        )
    )
