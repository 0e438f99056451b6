"""The values one NVML pass produces, shared by the NVML source, the collector and the writer."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class GpuIdentity:
    """What labels a GPU's series: NVML index, UUID and product name."""

    index: int
    uuid: str
    name: str


def unidentified_gpu(index: int) -> GpuIdentity:
    """A GPU NVML enumerates at `index` but never identified (lost before its UUID was read):
    its series carry the index only (empty `uuid` and `gpu_name`, which Prometheus drops)."""
    return GpuIdentity(index, "", "")


@dataclass(frozen=True)
class DriverInfo:
    driver_version: str
    nvml_version: str
    cuda_driver_version: str


@dataclass(slots=True)
class GpuSample:
    """One GPU's readings in one pass; a field NVML could not give stays None and is omitted."""

    gpu: GpuIdentity
    utilization_percent: int | None = None
    memory_utilization_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hertz: int | None = None
    memory_clock_hertz: int | None = None
    clock_event_reasons: int | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    energy_joules_total: float | None = None
    # GPM (Hopper and newer), over the interval since the previous pass: see poller.gpm.
    sm_active_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_active_percent: float | None = None
    dram_bandwidth_utilization_percent: float | None = None
    pcie_rx_bytes_total: int | None = None
    pcie_tx_bytes_total: int | None = None
    nvlink_rx_bytes_total: int | None = None
    nvlink_tx_bytes_total: int | None = None


# GpuSample's GPM fields, in order (poller.gpm reads them as one tuple): its last fields, from the
# first GPM one.
_SAMPLE_FIELDS = tuple(f.name for f in fields(GpuSample))
GPM_FIELDS = _SAMPLE_FIELDS[_SAMPLE_FIELDS.index("sm_active_percent") :]


@dataclass(frozen=True)
class PassResult:
    """The outcome of one collection pass (monotonic clock times, in seconds)."""

    nvml_up: bool
    started_at: float
    finished_at: float
    samples: tuple[GpuSample, ...] = ()
    driver: DriverInfo | None = None
    # GPUs NVML enumerated (nvmlDeviceGetCount) in the session the pass ran in; 0 when NVML is down.
    # More than len(samples) means some GPU is enumerated but does not answer (lost, or failing).
    enumerated: int = 0

    @property
    def duration_seconds(self) -> float:
        return self.finished_at - self.started_at
