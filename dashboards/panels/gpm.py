"""GPM panels (GPU Performance Metrics, Hopper and newer): what the GPUs really did, against
NVML's utilization figure, for the selected GPUs, a job's GPUs or the fleet (recorded medians and
sums)."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import Common, PanelBuilder, Query, timeseries
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec
from observability.rules import jobs


def true_utilization(description: str, fleet: Sequence[str], job: Sequence[str], job_legend: str) -> PanelBuilder:
    """NVML utilization (dashed) against SM activity, tensor-core activity and DRAM bandwidth:
    `fleet` is the four expressions over the GPUs shown (NVML where GPM reports, SM, tensor, DRAM),
    then the same comparison for the GPUs of the job `job` selects (recorded per job), whose series
    are named after `job_legend`."""
    nvml, sm, tensor, dram = fleet
    return timeseries(
        Common("True Utilization", description, "percent", w=24, min=0, max=100),
        [
            Query(nvml, "NVML utilization"),
            Query(sm, "SM active"),
            Query(tensor, "tensor active"),
            Query(dram, "DRAM bandwidth"),
            Query(promql.selector(jobs.JOB_UTILIZATION_AVG.record, tuple(job)), f"{job_legend} NVML utilization"),
            Query(promql.selector(jobs.JOB_SM_ACTIVE_AVG.record, tuple(job)), f"{job_legend} SM active"),
            Query(promql.selector(jobs.JOB_TENSOR_ACTIVE_AVG.record, tuple(job)), f"{job_legend} tensor active"),
        ],
        dashed_refs=("A", "E"),
    )


def true_utilization_of_selected(gpus: tuple[str, ...], job: tuple[str, ...]) -> PanelBuilder:
    """True Utilization as means over the GPUs `gpus` selects that report GPM, NVML's figure over
    the same GPUs: one series per target whatever the selection; then the GPUs of the job `job`
    selects."""

    def mean(metric: catalog.Metric) -> str:
        return promql.aggregate("avg", (), promql.gauge(metric, gpus))

    nvml, sm = (promql.gauge(m, gpus) for m in (catalog.GPU_UTILIZATION_PERCENT, catalog.GPU_SM_ACTIVE_PERCENT))
    nvml_where_gpm = promql.aggregate("avg", (), f"{nvml} and {sm}")
    return true_utilization(
        "NVML utilization (a kernel was running, dashed) against what the selected GPUs really did: SM "
        "activity, tensor-core activity and DRAM bandwidth (GPM, Hopper and newer; GPUs without GPM are "
        "left out). A GPU at 100% utilization with low SM activity runs small kernels or waits.",
        fleet=(
            nvml_where_gpm,
            mean(catalog.GPU_SM_ACTIVE_PERCENT),
            mean(catalog.GPU_TENSOR_ACTIVE_PERCENT),
            mean(catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT),
        ),
        job=job,
        job_legend="{{job_id}}",
    )


def true_utilization_of_fleet(job: tuple[str, ...]) -> PanelBuilder:
    """True Utilization as the fleet's recorded medians, then the GPUs of the job `job` selects."""
    return true_utilization(
        "Fleet medians over the GPUs that report GPM (Hopper and newer): NVML utilization (a kernel "
        "was running, dashed) against SM activity, tensor-core activity and DRAM bandwidth. The gap "
        "is busyness NVML's figure hides.",
        fleet=(
            rec.GPU_UTILIZATION_P50_WHERE_GPM.record,
            rec.GPU_SM_ACTIVE_P50.record,
            rec.GPU_TENSOR_ACTIVE_P50.record,
            rec.GPU_DRAM_BANDWIDTH_P50.record,
        ),
        job=job,
        job_legend="job",
    )


def fleet_busyness(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Fleet Busyness: NVML vs GPM",
            "Medians over the GPUs that report GPM (Hopper and newer): NVML utilization (dashed) "
            "against SM activity and tensor-core activity.",
            "percent",
            w=w,
            min=0,
            max=100,
        ),
        [
            Query(rec.GPU_UTILIZATION_P50_WHERE_GPM.record, "NVML utilization median"),
            Query(rec.GPU_SM_ACTIVE_P50.record, "SM active median"),
            Query(rec.GPU_TENSOR_ACTIVE_P50.record, "tensor active median"),
        ],
        dashed_refs=("A",),
    )


def sm_occupancy_and_dram_bandwidth(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "SM Occupancy and DRAM Bandwidth",
            "Fleet medians of SM occupancy (resident warps of the maximum) and DRAM bandwidth used.",
            "percent",
            w=w,
            min=0,
            max=100,
        ),
        [
            Query(rec.GPU_SM_OCCUPANCY_P50.record, "SM occupancy median"),
            Query(rec.GPU_DRAM_BANDWIDTH_P50.record, "DRAM bandwidth median"),
        ],
    )


def interconnect_traffic(*, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Interconnect Traffic",
            "Bytes per second over the fleet: NVLink (solid) and PCIe (dashed), received by GPUs (rx) and sent (tx).",
            "Bps",
            w=w,
            min=0,
        ),
        [
            Query(rec.GPU_NVLINK_BYTES_RATE.record, "NVLink {{direction}}"),
            Query(rec.GPU_PCIE_BYTES_RATE.record, "PCIe {{direction}}"),
        ],
        dashed_refs=("B",),
    )
