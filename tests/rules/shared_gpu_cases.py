"""promtool cases of MIG devices and time-sliced GPUs (default config: every 15s, checked at 10m).

MIG: node gpu-node-3 has one H100 in MIG mode with three MIG devices of two profiles: 1g.10gb in
slots 1 and 2, 3g.40gb in slot 3; mig-a holds slot 1, mig-c slot 3, slot 2 is no job's. A MIG device
has no NVML utilization (its GPM SM activity stands for it), no power or temperature (its parent's).

Time-sliced: node gpu-node-4 has one H100 at 99% utilization held by two notebooks at once: nb-busy
computes 90% of its time and holds 40 GB, nb-idle computes 5% and holds 20 GB (what their own
processes report).
"""

from __future__ import annotations

from collections.abc import Mapping

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.peak_flops import DEFAULT_PEAK_FLOPS
from observability.promql import duration
from observability.rules import goodput, jobs
from tests.rules.goodput_cases import model_flops, phases, trainer_pod
from tests.rules.promtool_harness import Case, Check, Firing, RecordCase, counter, join, poller_target, series, values

S = 15
CFG = ObservabilityConfig()
_SCRAPES = 41  # 0s..600s
H100 = "NVIDIA H100 80GB HBM3"
PRICE = dict(CFG.gpu_hourly_cost)[H100]
ROUND_TO = 2.0**-30

# --- MIG -------------------------------------------------------------------------------------------
NODE_3 = poller_target(node="gpu-node-3", pod="gpu-poller-mig")
PARENT = {"node": "gpu-node-3", "gpu_id": "0", "uuid": "GPU-gpu-node-3-0", "gpu_name": H100}


def mig_device(slot: int) -> dict[str, str]:
    return {"node": "gpu-node-3", "gpu_id": f"0/{slot}", "uuid": f"MIG-gpu-node-3-0-{slot}", "gpu_name": H100}


MIG_A, MIG_B, MIG_C = mig_device(1), mig_device(2), mig_device(3)
# (device, profile, compute slices, memory used, memory total, SM active)
MIGS = (
    (MIG_A, "1g.10gb", 1, 4e9, 10e9, 12.0),
    (MIG_B, "1g.10gb", 1, 1e9, 10e9, 80.0),
    (MIG_C, "3g.40gb", 3, 30e9, 40e9, 60.0),
)
JOB_A = {"model_type": "eval", "job_id": "mig-a"}
JOB_C = {"model_type": "eval", "job_id": "mig-c"}
MIG_C_FLOPS = 1.0e14  # bf16, model FLOP/s of mig-c


def _at(target: Mapping[str, str], metric: catalog.Metric, labels: Mapping[str, str], value: float) -> dict[str, str]:
    return {series(metric, {**target, **labels}): values((value, _SCRAPES))}


def _holds(job: Mapping[str, str], gpu: Mapping[str, str], rank: int = 0) -> dict[str, str]:
    labels = {**trainer_pod(rank), **job, "uuid": gpu["uuid"]}
    return {series(catalog.TRAINING_JOB_GPU_INFO, labels): values((1, _SCRAPES))}


def mig_fleet(migs: tuple[tuple[dict[str, str], str, int, float, float, float], ...] = MIGS) -> dict[str, str]:
    out: dict[str, str] = {}
    out |= _at(NODE_3, catalog.GPU_TEMPERATURE_CELSIUS, PARENT, 50)
    out |= _at(NODE_3, catalog.GPU_POWER_WATTS, PARENT, 300)
    out |= _at(NODE_3, catalog.GPU_MEMORY_TOTAL_BYTES, PARENT, 80e9)
    out |= _at(NODE_3, catalog.GPU_MEMORY_USED_BYTES, PARENT, 35e9)
    out |= _at(NODE_3, catalog.GPU_POLLER_DEVICES, {"node": "gpu-node-3"}, 1)
    for device, profile, slices, used, total, sm_active in migs:
        info = {**device, "parent_gpu_id": "0", "parent_uuid": PARENT["uuid"], "profile": profile}
        out |= _at(NODE_3, catalog.GPU_MIG_DEVICE_INFO, info, 1)
        out |= _at(NODE_3, catalog.GPU_MIG_SM_SHARE_RATIO, device, slices / 7)
        out |= _at(NODE_3, catalog.GPU_MEMORY_USED_BYTES, device, used)
        out |= _at(NODE_3, catalog.GPU_MEMORY_TOTAL_BYTES, device, total)
        out |= _at(NODE_3, catalog.GPU_SM_ACTIVE_PERCENT, device, sm_active)
    out |= _holds(JOB_A, MIG_A, rank=0) | _holds(JOB_C, MIG_C, rank=1)
    return out


def _job(job: Mapping[str, str], value: float) -> tuple[dict[str, str], float]:
    return (dict(job), value)


def _on(gpu: Mapping[str, str], job: Mapping[str, str], value: float) -> tuple[dict[str, str], float]:
    return ({**gpu, **job}, value)


_MIG_RECORDS: dict[str, tuple[tuple[dict[str, str], float], ...]] = {
    jobs.GPU_HOLDERS.record: (({"uuid": MIG_A["uuid"]}, 1), ({"uuid": MIG_C["uuid"]}, 1)),
    jobs.HELD.record: (_on(MIG_A, JOB_A, 1), _on(MIG_C, JOB_C, 1)),
    # NVML has no utilization for a MIG device: its own GPM SM activity, never the parent's or a sibling's
    jobs.HELD_UTILIZATION.record: (_on(MIG_A, JOB_A, 12), _on(MIG_C, JOB_C, 60)),
    jobs.HELD_MEMORY_RATIO.record: (_on(MIG_A, JOB_A, 0.4), _on(MIG_C, JOB_C, 0.75)),
    jobs.HELD_SM_SHARE.record: (_on(MIG_A, JOB_A, 1 / 7), _on(MIG_C, JOB_C, 3 / 7)),
    jobs.HELD_POWER.record: (),  # a MIG device has no power reading: its parent's is the GPU's
    jobs.JOB_GPUS.record: (_job(JOB_A, 1), _job(JOB_C, 1)),
    jobs.JOB_UTILIZATION_AVG.record: (_job(JOB_A, 12), _job(JOB_C, 60)),
    jobs.JOB_SM_ACTIVE_AVG.record: (_job(JOB_A, 12), _job(JOB_C, 60)),
    jobs.JOB_MEMORY_RATIO_MAX.record: (_job(JOB_A, 0.4), _job(JOB_C, 0.75)),
    jobs.FLEET_HELD.record: (({}, 1),),  # the parent, through two of its MIG devices
    jobs.FLEET_MIG_HELD.record: (({}, 2),),
    jobs.FLEET_UNHELD.record: (({}, 0),),
    jobs.FLEET_SHARED.record: (({}, 0),),
    jobs.JOB_SHARED_GPUS.record: (_job(JOB_A, 0), _job(JOB_C, 0)),  # MIG devices are not shared GPUs
    # each instance at its share of the GPU's SMs (migCost: compute_share, the default)
    jobs.JOB_HOURLY_COST: (_job(JOB_A, PRICE / 7), _job(JOB_C, PRICE * 3 / 7)),
    goodput.HELD_MODELS.record: (({**JOB_A, "gpu_name": H100}, 1), ({**JOB_C, "gpu_name": H100}, 1)),
    goodput.HELD_CAPACITY.record: (({**JOB_A, "gpu_name": H100}, 1 / 7), ({**JOB_C, "gpu_name": H100}, 3 / 7)),
}


def _mig_peaks() -> tuple[tuple[dict[str, str], float], ...]:
    out = []
    for job, share in ((JOB_A, 1 / 7), (JOB_C, 3 / 7)):
        for precision in catalog.MODEL_FLOPS_PRECISIONS:
            peak = DEFAULT_PEAK_FLOPS.peak(H100, precision)
            assert peak is not None
            out.append(({**job, "precision": precision}, peak * share))
    return tuple(out)


_BF16 = DEFAULT_PEAK_FLOPS.peak(H100, "bf16") or 0.0
_MIG_MFU_RECORDS: dict[str, tuple[tuple[dict[str, str], float], ...]] = {
    goodput.JOB_PEAK.record: _mig_peaks(),
    # MFU against the instance's share of the peak: 1e14 over 3/7 of 989.4 TFLOP/s
    goodput.MFU.record: (_job(JOB_C, MIG_C_FLOPS / (_BF16 * 3 / 7)),),
}


def _mig_mfu_input() -> dict[str, str]:
    shares = {"compute": 0.75, "idle": 0.25}
    return mig_fleet() | phases(JOB_C, shares, rank=1) | model_flops(JOB_C, MIG_C_FLOPS, "bf16", rank=1)


# A reconfiguration at 5m: slot 2's 1g.10gb destroyed, slot 4 created as 2g.20gb; mig-a and mig-c
# keep theirs. The destroyed instance's series end, the new one's begin: nothing is stale at 10m.
MIG_D = mig_device(4)


def _reconfigured() -> dict[str, str]:
    out = mig_fleet()
    half = _SCRAPES // 2
    for key in [k for k in out if f'uuid="{MIG_B["uuid"]}"' in k]:
        out[key] = join([float(v) for v in out[key].split()[:half]])
    info = {**MIG_D, "parent_gpu_id": "0", "parent_uuid": PARENT["uuid"], "profile": "2g.20gb"}
    for metric, labels, value in (
        (catalog.GPU_MIG_DEVICE_INFO, info, 1.0),
        (catalog.GPU_MIG_SM_SHARE_RATIO, MIG_D, 2 / 7),
        (catalog.GPU_MEMORY_TOTAL_BYTES, MIG_D, 20e9),
        (catalog.GPU_MEMORY_USED_BYTES, MIG_D, 0.0),
    ):
        out[series(metric, {**NODE_3, **labels})] = values((None, half), (value, _SCRAPES - half))
    return out


# --- time-sliced -------------------------------------------------------------------------------------
NODE_4 = poller_target(node="gpu-node-4", pod="gpu-poller-shared")
SHARED = {"node": "gpu-node-4", "gpu_id": "0", "uuid": "GPU-gpu-node-4-0", "gpu_name": H100}
BUSY = {"model_type": "notebook", "job_id": "nb-busy"}
IDLE = {"model_type": "notebook", "job_id": "nb-idle"}
BUSY_SHARES = {"compute": 0.9, "idle": 0.1}
IDLE_SHARES = {"compute": 0.05, "idle": 0.95}


def _reserved(job: Mapping[str, str], rank: int, values_text: str) -> dict[str, str]:
    labels = {**trainer_pod(rank), **job, "rank": str(rank), "uuid": SHARED["uuid"]}
    return {series(catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES, labels): values_text}


def shared_gpu(
    busy_reserved: str = values((40e9, _SCRAPES)),
    idle_reserved: str = values((20e9, _SCRAPES)),
    used: str = values((60e9, _SCRAPES)),
    samples: int = _SCRAPES,
) -> dict[str, str]:
    out: dict[str, str] = {}
    for metric, value in (
        (catalog.GPU_UTILIZATION_PERCENT, 99.0),
        (catalog.GPU_SM_ACTIVE_PERCENT, 97.0),
        (catalog.GPU_MEMORY_TOTAL_BYTES, 80e9),
        (catalog.GPU_POWER_WATTS, 400.0),
        (catalog.GPU_TEMPERATURE_CELSIUS, 60.0),
    ):
        out[series(metric, {**NODE_4, **SHARED})] = values((value, samples))
    out[series(catalog.GPU_MEMORY_USED_BYTES, {**NODE_4, **SHARED})] = used
    out[series(catalog.GPU_POLLER_DEVICES, {**NODE_4, "node": "gpu-node-4"})] = values((1, samples))
    for job, rank in ((BUSY, 2), (IDLE, 3)):
        labels = {**trainer_pod(rank), **job, "uuid": SHARED["uuid"]}
        out[series(catalog.TRAINING_JOB_GPU_INFO, labels)] = values((1, samples))
    out |= phases(BUSY, BUSY_SHARES, rank=2, samples=samples) | phases(IDLE, IDLE_SHARES, rank=3, samples=samples)
    out |= _reserved(BUSY, 2, busy_reserved) | _reserved(IDLE, 3, idle_reserved)
    return out


_SHARED_RECORDS: dict[str, tuple[tuple[dict[str, str], float], ...]] = {
    jobs.GPU_HOLDERS.record: (({"uuid": SHARED["uuid"]}, 2),),
    jobs.HELD.record: (_on(SHARED, BUSY, 1), _on(SHARED, IDLE, 1)),
    jobs.HELD_UTILIZATION.record: (),  # the device's 99% is no one job's
    jobs.JOB_SHARED_GPUS.record: (_job(BUSY, 1), _job(IDLE, 1)),
    # each job's own time split: 90% and 5% computing, never the device's 99%
    jobs.JOB_UTILIZATION_AVG.record: (_job(BUSY, 90), _job(IDLE, 5)),
    jobs.JOB_UTILIZATION_MIN.record: (_job(BUSY, 90), _job(IDLE, 5)),
    jobs.JOB_SM_ACTIVE_AVG.record: (),
    jobs.JOB_GPU_RESERVED.record: (({**BUSY, "uuid": SHARED["uuid"]}, 40e9), ({**IDLE, "uuid": SHARED["uuid"]}, 20e9)),
    # each job's own memory, as its processes report it
    jobs.HELD_MEMORY_RATIO.record: (_on(SHARED, BUSY, 0.5), _on(SHARED, IDLE, 0.25)),
    jobs.JOB_MEMORY_RATIO_MAX.record: (_job(BUSY, 0.5), _job(IDLE, 0.25)),
    # the device's power and price split evenly between the two
    jobs.HELD_POWER.record: (_on(SHARED, BUSY, 200), _on(SHARED, IDLE, 200)),
    jobs.JOB_POWER.record: (_job(BUSY, 200), _job(IDLE, 200)),
    jobs.JOB_HOURLY_COST: (_job(BUSY, PRICE / 2), _job(IDLE, PRICE / 2)),
    jobs.FLEET_HELD.record: (({}, 1),),
    jobs.FLEET_SHARED.record: (({}, 1),),
    jobs.FLEET_UNHELD.record: (({}, 0),),
    goodput.GPU_BUSY.record: (
        ({**BUSY, "source": "job_time_split"}, 90),
        ({**IDLE, "source": "job_time_split"}, 5),
    ),
    goodput.VERDICT: (
        ({**BUSY, "verdict": goodput.VERDICT_COMPUTE}, 1),
        ({**IDLE, "verdict": goodput.VERDICT_UNDERUTILIZED}, 1),
    ),
}


def _cases(
    name: str, fleet: dict[str, str], records: dict[str, tuple[tuple[dict[str, str], float], ...]]
) -> RecordCase:
    (first, samples), *rest = records.items()
    return RecordCase(first, name, fleet, "10m", samples, also=tuple(rest), round_to=ROUND_TO)


SHARED_GPU_RECORD_CASES: tuple[RecordCase, ...] = (
    _cases("three MIG devices of two profiles, two held, at 10m", mig_fleet(), _MIG_RECORDS),
    _cases("a MIG device's MFU against its share of the peak", _mig_mfu_input(), _MIG_MFU_RECORDS),
    _cases(
        "a reconfiguration at 5m: the destroyed instance is gone, the new one is free",
        _reconfigured(),
        {
            jobs.FLEET_MIG_HELD.record: (({}, 2),),
            jobs.HELD.record: (_on(MIG_A, JOB_A, 1), _on(MIG_C, JOB_C, 1)),
            jobs.FLEET_HELD.record: (({}, 1),),
        },
    ),
    _cases("two notebooks on one time-sliced GPU at 10m", shared_gpu(), _SHARED_RECORDS),
)


# --- alerts --------------------------------------------------------------------------------------------
def _climbing(start: float, step: float, samples: int) -> str:
    return join(counter(start, step, samples))


_TOTAL = 80e9
_PREDICTION_SCRAPES = 80


def shared_gpu_alert_cases() -> tuple[Case, ...]:
    # nb-busy's own memory climbs 0.5% of the total a scrape from 39% (the device from 55%, as the
    # whole-GPU climb of GPUMemoryExhaustionPredicted's cases: on course for the total from 750s);
    # nb-idle's stays at 16%.
    used = _climbing(0.55 * _TOTAL, 0.005 * _TOTAL, _PREDICTION_SCRAPES)
    busy = _climbing(0.39 * _TOTAL, 0.005 * _TOTAL, _PREDICTION_SCRAPES)
    idle = values((0.16 * _TOTAL, _PREDICTION_SCRAPES))
    placement = "gpu-node-4: 1 GPU(s); "
    return (
        Case(
            "GPUUtilizationLow",
            "an idle job on a busy shared GPU is judged by its own time split (5% computing), the busy one is not",
            shared_gpu(),
            (*silent(585), fires_at(645, Firing(IDLE, 5.0, placement))),
        ),
        Case(
            "GPUUtilizationCritical",
            "a shared GPU at 99% gives neither job the device's figure",
            shared_gpu(samples=_SCRAPES + 20),
            silent(600, 900),
        ),
        Case(
            "GPUUtilizationLow",
            "a MIG device is judged by its own SM activity: mig-a at 12% fires, mig-c at 60% does not",
            mig_fleet(),
            (*silent(585), fires_at(600, Firing(JOB_A, 12.0, "gpu-node-3: 1 GPU(s); "))),
        ),
        Case(
            "GPUMemoryExhaustionPredicted",
            "on a shared GPU it names the job whose own memory grows, not every job on it",
            shared_gpu(busy_reserved=busy, idle_reserved=idle, used=used, samples=_PREDICTION_SCRAPES),
            (*silent(600, 735, 855), fires_at(900, Firing({**SHARED, **BUSY}, 0.85))),
        ),
    )


def silent(*times: int) -> tuple[Check, ...]:
    return tuple(Check(duration(x)) for x in times)


def fires_at(at: int, *firing: Firing) -> Check:
    return Check(duration(at), tuple(firing))
