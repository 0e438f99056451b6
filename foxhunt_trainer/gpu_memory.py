"""The device memory this process holds on each GPU it uses, read from its own allocator.

A GPU shared by time-slicing runs several jobs' processes; NVML's device-level memory figure is
theirs together, and which process holds what is NVML's per-process list, which a pod sees only
for its own processes and the poller (without hostPID) cannot map to pods. The job itself knows:
PyTorch's caching allocator holds `torch.cuda.memory_reserved(device)` bytes on each device, and
the device's UUID says which GPU it is. `ml_training_gpu_memory_reserved_bytes{..., rank, uuid}`
carries that figure at every scrape, so the rules split a shared GPU's memory by job.

The source is a function returning {GPU UUID: bytes}; `torch_reserved_memory` is the default and
reads nothing until the program itself has initialised CUDA (reading never initialises CUDA, and
a program without torch or without CUDA reports nothing). A test or a program with another
allocator passes its own source (`JobMetrics.track_gpu_memory(source)`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import Collector

from foxhunt_trainer.contract import catalog

if TYPE_CHECKING:
    from foxhunt_trainer.training import JobMetrics

LOG = logging.getLogger(__name__)

MemorySource = Callable[[], Mapping[str, float]]


def _device_uuid(torch: Any, index: int, held: Sequence[str]) -> str:
    """The NVML UUID of CUDA device `index`: `GPU-<uuid>`, or `MIG-<uuid>` for a MIG device (CUDA
    reports the bare UUID; the job's own list says which prefix NVML gives it)."""
    bare = str(torch.cuda.get_device_properties(index).uuid)
    for uuid in held:
        if uuid.split("-", 1)[-1] == bare:
            return uuid
    return f"GPU-{bare}"


def torch_reserved_memory(held: Sequence[str] = ()) -> MemorySource:
    """{UUID: torch.cuda.memory_reserved} of each CUDA device this process uses, once the program has
    initialised CUDA; {} before that, without torch or without a GPU."""
    uuids: dict[int, str] = {}

    def read() -> Mapping[str, float]:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return {}
        found: dict[str, float] = {}
        for index in range(torch.cuda.device_count()):
            reserved = float(torch.cuda.memory_reserved(index))
            if reserved <= 0:  # a device this process never allocated on is not one it uses
                continue
            uuid = uuids.get(index)
            if uuid is None:
                uuid = uuids[index] = _device_uuid(torch, index, held)
            found[uuid] = reserved
        return found

    return read


class GpuMemoryCollector(Collector):
    """`ml_training_gpu_memory_reserved_bytes` of every running job of a registry, each read from its
    job's source at scrape time. A source that raises reports nothing for that scrape and is logged
    once."""

    def __init__(self, jobs: Callable[[], Sequence[JobMetrics]]) -> None:
        self._jobs = jobs
        self._failed: set[int] = set()

    def describe(self) -> list[ClientFamily]:
        metric = catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES
        return [ClientFamily(metric.name, metric.help, metric.type.value)]

    def collect(self) -> Iterator[ClientFamily]:
        metric = catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES
        family = ClientFamily(metric.name, metric.help, metric.type.value)
        for job in self._jobs():
            source = job.gpu_memory_source
            if source is None or job.finished:
                continue
            try:
                figures = dict(source())
            except Exception as error:  # the job's page must not fail for its GPU memory
                if id(source) not in self._failed:
                    self._failed.add(id(source))
                    LOG.warning("reading this process's GPU memory failed; not reported", extra={"error": repr(error)})
                continue
            ranked = job.rank_labels
            for uuid, reserved in sorted(figures.items()):
                if reserved >= 0:
                    family.add_sample(metric.name, {**ranked, "uuid": uuid}, float(reserved))
        yield family
