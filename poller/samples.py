"""The values one NVML pass produces, shared by the NVML source, the collector and the writer.

`GpuSample`'s NVML attributes are the NVML field table: each declares its row (`nvml(...)`, see
`poller.nvml_fields`), and `NVML_FIELDS` reads them back."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pynvml

from foxhunt_trainer.contract import catalog
from poller.nvml_fields import (
    CLOCK_EVENTS,
    CORRECTED,
    ECC,
    MEGA,
    MEMORY,
    MILLI,
    U32,
    U64,
    UNCORRECTED,
    UTILIZATION,
    NvmlField,
    nvml,
    table_of,
)


@dataclass(frozen=True)
class MigInfo:
    """What a MIG device is: its slot on the parent, the parent, its profile and its share of the SMs."""

    slot: int  # nvmlDeviceGetMigDeviceHandleByIndex's index on the parent
    parent_uuid: str
    profile: str  # e.g. 1g.10gb
    gpu_instance_id: int
    sm_share: float  # compute slices / catalog.MIG_COMPUTE_SLICES (0-1)


@dataclass(frozen=True)
class GpuIdentity:
    """What labels a GPU's series: NVML index, UUID and product name; a MIG device also has `mig`
    (its `index` and `name` are its parent's: the peak-FLOPs and price tables name whole GPUs)."""

    index: int
    uuid: str
    name: str
    mig: MigInfo | None = None

    @property
    def gpu_id(self) -> str:
        """The `gpu_id` label: the NVML index, `<parent index>/<slot>` for a MIG device."""
        return str(self.index) if self.mig is None else f"{self.index}/{self.mig.slot}"


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
    # One NVML reading each, with its row: call, NVML function(s), options, C type, catalog
    # metric[, scale][, label][, member: (index, count) in the call's output buffer].
    # fmt: off
    utilization_percent: int | None = nvml("utilization", UTILIZATION, (), U32, catalog.GPU_UTILIZATION_PERCENT,
                                           member=(0, 2))
    memory_utilization_percent: int | None = nvml("utilization", UTILIZATION, (), U32,
                                                  catalog.GPU_MEMORY_UTILIZATION_PERCENT, member=(1, 2))
    # nvmlMemory_t: total, free (total - used, not read), used
    memory_used_bytes: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_USED_BYTES, member=(2, 3))
    memory_total_bytes: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_TOTAL_BYTES, member=(0, 3))
    temperature_celsius: int | None = nvml("temperature", ("nvmlDeviceGetTemperature",),
                                           (pynvml.NVML_TEMPERATURE_GPU,), U32, catalog.GPU_TEMPERATURE_CELSIUS)
    power_watts: float | None = nvml("power", ("nvmlDeviceGetPowerUsage",), (), U32, catalog.GPU_POWER_WATTS, MILLI)
    power_limit_watts: float | None = nvml("power_limit", ("nvmlDeviceGetEnforcedPowerLimit",), (), U32,
                                           catalog.GPU_POWER_LIMIT_WATTS, MILLI)
    sm_clock_hertz: int | None = nvml("sm_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_SM,), U32,
                                      catalog.GPU_SM_CLOCK_HERTZ, MEGA)
    memory_clock_hertz: int | None = nvml("memory_clock", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_MEM,),
                                          U32, catalog.GPU_MEMORY_CLOCK_HERTZ, MEGA)
    # a bit mask: one ml_gpu_clock_throttle_active series per reason (exported_metrics.THROTTLE_REASONS)
    clock_event_reasons: int | None = nvml("clock_event_reasons", CLOCK_EVENTS, (), U64,
                                           catalog.GPU_CLOCK_THROTTLE_ACTIVE)
    ecc_corrected_total: int | None = nvml("ecc_corrected", ECC, CORRECTED, U64, catalog.GPU_ECC_ERRORS_TOTAL,
                                           label=("ecc_type", "corrected"))
    ecc_uncorrected_total: int | None = nvml("ecc_uncorrected", ECC, UNCORRECTED, U64, catalog.GPU_ECC_ERRORS_TOTAL,
                                             label=("ecc_type", "uncorrected"))
    # Volta and newer; NOT_SUPPORTED elsewhere, and drivers before it lack the function.
    energy_joules_total: float | None = nvml("energy", ("nvmlDeviceGetTotalEnergyConsumption",), (), U64,
                                             catalog.GPU_ENERGY_JOULES_TOTAL, MILLI)
    # fmt: on
    # GPM (Hopper and newer), over the interval since the previous pass: see poller.gpm.
    sm_active_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_active_percent: float | None = None
    dram_bandwidth_utilization_percent: float | None = None
    pcie_rx_bytes_total: int | None = None
    pcie_tx_bytes_total: int | None = None
    nvlink_rx_bytes_total: int | None = None
    nvlink_tx_bytes_total: int | None = None


# Every NVML reading a pass takes from each GPU, one row per member of each call's output buffer (the
# rows GpuSample's attributes declare).
NVML_FIELDS: tuple[NvmlField, ...] = table_of(GpuSample)

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
    def whole_gpus_answering(self) -> int:
        """The GPUs (not MIG devices) that answered: what `enumerated` counts."""
        return sum(1 for sample in self.samples if sample.gpu.mig is None)

    @property
    def duration_seconds(self) -> float:
        return self.finished_at - self.started_at
