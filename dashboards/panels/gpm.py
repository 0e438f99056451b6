"""GPM panels (GPU Performance Metrics, Hopper and newer): what the GPUs really did, against
NVML's utilization figure."""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.panels import Common, PanelBuilder, Query, timeseries
from observability import promql
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
