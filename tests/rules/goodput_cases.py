"""promtool cases of the goodput group (time split, MFU, verdict, waste) and of the efficiency alerts.

Scrapes every 15 s. A rank's phase counters grow by `share x 15 s` per scrape, so the 5m rate of
each is its share of the rank's time (a rank accounts for 1 s per second). Shares in the fleet
cases are multiples of 1/16, so every rate, sum and ratio is exact in binary and the expected
values are the arithmetic written here. The verdict and alert cases sit at the edges of their
thresholds (`th`, the thresholds the rules are rendered with): 0.01 of the time or 1 percentage
point of GPU activity either side.
"""

from __future__ import annotations

from collections.abc import Mapping

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.peak_flops import DEFAULT_PEAK_FLOPS
from observability.rules import goodput
from observability.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tests.rules.promtool_harness import (
    Case,
    Check,
    Firing,
    RecordCase,
    counter,
    gpu_labels,
    join,
    poller_target,
    series,
    values,
)

S = 15
CFG = ObservabilityConfig()
_T = 600  # the fleet cases are checked at 10m
_SCRAPES = _T // S + 1
EDGE = 0.01  # of the time, either side of a share threshold
BUSY_EDGE = 1.0  # percentage points either side of the GPU-busy threshold

TARGET = poller_target()
NODE_2 = poller_target(node="gpu-node-2", pod="gpu-poller-zyxwv")


def trainer_pod(rank: int) -> dict[str, str]:
    return {
        "namespace": "training",
        "pod": f"train-{rank}",
        "service": "training-job",
        "instance": f"10.0.1.{5 + rank}:9094",
        "job": "pods",
    }


def phases(
    job: Mapping[str, str], shares: Mapping[str, float], rank: int = 0, samples: int = _SCRAPES
) -> dict[str, str]:
    """One rank's phase counters: each phase's share of the rank's time, every second accounted for."""
    assert abs(sum(shares.values()) - 1) < 1e-9, shares
    labels = {**trainer_pod(rank), **job, "rank": str(rank)}
    return {
        series(goodput.PHASE_SECONDS, {**labels, "phase": phase}): join(counter(0, share * S, samples))
        for phase, share in shares.items()
    }


def model_flops(job: Mapping[str, str], per_second: float, precision: str, rank: int = 0) -> dict[str, str]:
    labels = {**trainer_pod(rank), **job, "rank": str(rank), "precision": precision}
    return {series(catalog.TRAINING_MODEL_FLOPS_TOTAL, labels): join(counter(0, per_second * S, _SCRAPES))}


def holds(job: Mapping[str, str], *gpus: Mapping[str, str]) -> dict[str, str]:
    return {
        series(catalog.TRAINING_JOB_GPU_INFO, {**trainer_pod(0), **job, "uuid": gpu["uuid"]}): values((1, _SCRAPES))
        for gpu in gpus
    }


def gpu_gauge(
    metric: catalog.Metric, gpu: Mapping[str, str], value: float, target: Mapping[str, str] = TARGET
) -> dict[str, str]:
    return {series(metric, {**target, **gpu}): values((value, _SCRAPES))}


def gpus_busy(gpu: Mapping[str, str], utilization: float, sm_active: float | None = None) -> dict[str, str]:
    out = gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, gpu, utilization)
    if sm_active is not None:
        out |= gpu_gauge(catalog.GPU_SM_ACTIVE_PERCENT, gpu, sm_active)
    return out


def written(job: Mapping[str, str], per_scrape: float) -> dict[str, str]:
    labels = {**trainer_pod(0), **job, "rank": "0"}
    return {series(catalog.CHECKPOINT_WRITTEN_BYTES_TOTAL, labels): join(counter(0, per_scrape, _SCRAPES))}


def _verdict(job: Mapping[str, str], verdict: str) -> tuple[dict[str, str], float]:
    return ({**job, "verdict": verdict}, 1)


# --- the fleet: three jobs at 10m ------------------------------------------------------------------
# cnn-1: two ranks on two H100s with GPM (SM 96% and 88%), 14/16 computing: compute-saturated.
# mlp-2: one rank on a GPU model the peak table does not know, half its time waiting for data: input-bound.
# rnn-3: no GPUs, 6/16 saving checkpoints and 4/16 waiting for data: checkpoint-bound (the larger cause).
CNN = {"model_type": "cnn", "job_id": "cnn-1"}
MLP = {"model_type": "mlp", "job_id": "mlp-2"}
RNN = {"model_type": "rnn", "job_id": "rnn-3"}
H100_A, H100_B = gpu_labels("0"), gpu_labels("1")
UNKNOWN = {**gpu_labels("0", node="gpu-node-2"), "gpu_name": "NVIDIA Z999 Prototype"}
CNN_SHARES = {"compute": 14 / 16, "data_wait": 1 / 16, "idle": 1 / 16}
MLP_SHARES = {"data_wait": 8 / 16, "compute": 6 / 16, "checkpoint": 2 / 16}
RNN_SHARES = {"checkpoint": 6 / 16, "data_wait": 4 / 16, "compute": 6 / 16}
CNN_FLOPS_PER_RANK = 1.5e14  # bf16
MLP_FLOPS = 2.5e12  # fp32
CKPT_BYTES_PER_SCRAPE = {"mlp": 2.5e8, "rnn": 1e9}
H100 = "NVIDIA H100 80GB HBM3"


def fleet() -> dict[str, str]:
    out: dict[str, str] = {}
    for rank in (0, 1):
        out |= phases(CNN, CNN_SHARES, rank)
        out |= model_flops(CNN, CNN_FLOPS_PER_RANK, "bf16", rank)
    out |= phases(MLP, MLP_SHARES) | model_flops(MLP, MLP_FLOPS, "fp32") | written(MLP, CKPT_BYTES_PER_SCRAPE["mlp"])
    out |= phases(RNN, RNN_SHARES) | written(RNN, CKPT_BYTES_PER_SCRAPE["rnn"])
    out |= holds(CNN, H100_A, H100_B) | holds(MLP, UNKNOWN)
    out |= gpus_busy(H100_A, 100, sm_active=96) | gpus_busy(H100_B, 100, sm_active=88)
    out |= gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, UNKNOWN, 20, NODE_2)
    return out


def _per_phase(
    job: Mapping[str, str], shares: Mapping[str, float], ranks: int = 1
) -> list[tuple[dict[str, str], float]]:
    return [({**job, "phase": phase}, share * ranks) for phase, share in shares.items()]


def _shares(job: Mapping[str, str], shares: Mapping[str, float]) -> list[tuple[dict[str, str], float]]:
    return [({**job, "phase": phase}, share) for phase, share in shares.items()]


def _bad(job: Mapping[str, str], shares: Mapping[str, float], cost: float) -> list[tuple[dict[str, str], float]]:
    return [({**job, "phase": phase}, cost * share) for phase, share in shares.items() if phase != "compute"]


_PEAK = DEFAULT_PEAK_FLOPS.peak
_CNN_HOURS = 2 * _T / 3600
_MLP_HOURS = 1 * _T / 3600
_PRICES = dict(CFG.gpu_hourly_cost)
_CNN_COST = (_PRICES[H100] + _PRICES[H100]) * _T / 3600 + 0.0
_MLP_COST = CFG.gpu_hourly_cost_default * _T / 3600 + 0.0
_MONTHS = CFG.checkpoint_retention_days * 86400 / goodput.SECONDS_PER_MONTH
_PER_BYTE = float(f"{CFG.checkpoint_storage_price_per_gb_month / goodput.BYTES_PER_GB * _MONTHS:.17g}")
_WRITTEN = {job: per_scrape * (_SCRAPES - 1) for job, per_scrape in CKPT_BYTES_PER_SCRAPE.items()}


def _held_peaks() -> list[tuple[dict[str, str], float]]:
    out = []
    for precision in catalog.MODEL_FLOPS_PRECISIONS:
        peak = _PEAK(H100, precision)
        assert peak is not None
        out.append(({**CNN, "gpu_name": H100, "precision": precision}, peak))
    return out


def _job_peaks() -> list[tuple[dict[str, str], float]]:
    out = []
    for precision in catalog.MODEL_FLOPS_PRECISIONS:
        peak = _PEAK(H100, precision)
        assert peak is not None
        out.append(({**CNN, "precision": precision}, peak + peak))
    return out


_BF16_PEAK = _PEAK(H100, "bf16") or 0.0
FLEET_RECORDS: dict[str, list[tuple[dict[str, str], float]]] = {
    goodput.PHASE_RATE.record: [
        *_per_phase(CNN, CNN_SHARES, ranks=2),
        *_per_phase(MLP, MLP_SHARES),
        *_per_phase(RNN, RNN_SHARES),
    ],
    goodput.JOB_TIME.record: [(CNN, 2), (MLP, 1), (RNN, 1)],
    goodput.PHASE_SHARE.record: [*_shares(CNN, CNN_SHARES), *_shares(MLP, MLP_SHARES), *_shares(RNN, RNN_SHARES)],
    goodput.GOODPUT.record: [(CNN, 14 / 16), (MLP, 6 / 16), (RNN, 6 / 16)],
    goodput.PHASE_SHARE_SO_FAR.record: [
        *_shares(CNN, CNN_SHARES),
        *_shares(MLP, MLP_SHARES),
        *_shares(RNN, RNN_SHARES),
    ],
    goodput.GOODPUT_SO_FAR.record: [(CNN, 14 / 16), (MLP, 6 / 16), (RNN, 6 / 16)],
    goodput.GPU_BUSY.record: [
        ({**CNN, "source": "gpm_sm_active"}, (96 + 88) / 2),
        ({**MLP, "source": "nvml_utilization"}, 20),
    ],
    goodput.ACHIEVED_FLOPS.record: [
        ({**CNN, "precision": "bf16"}, 2 * CNN_FLOPS_PER_RANK),
        ({**MLP, "precision": "fp32"}, MLP_FLOPS),
    ],
    goodput.HELD_MODELS.record: [({**CNN, "gpu_name": H100}, 2), ({**MLP, "gpu_name": UNKNOWN["gpu_name"]}, 1)],
    goodput.HELD_PEAK: _held_peaks(),
    goodput.JOB_PEAK.record: _job_peaks(),
    goodput.MFU.record: [(CNN, (CNN_FLOPS_PER_RANK + CNN_FLOPS_PER_RANK) / (_BF16_PEAK + _BF16_PEAK))],
    goodput.UNKNOWN_GPU_MODELS.record: [({"gpu_name": UNKNOWN["gpu_name"]}, 1)],
    goodput.CAUSES: [
        ({**MLP, "verdict": goodput.VERDICT_INPUT}, 8 / 16),
        ({**RNN, "verdict": goodput.VERDICT_INPUT}, 4 / 16),
        ({**RNN, "verdict": goodput.VERDICT_CHECKPOINT}, 6 / 16),
    ],
    goodput.VERDICT: [
        _verdict(CNN, goodput.VERDICT_COMPUTE),
        _verdict(MLP, goodput.VERDICT_INPUT),
        _verdict(RNN, goodput.VERDICT_CHECKPOINT),
    ],
    goodput.BADPUT_GPU_HOURS.record: [(CNN, _CNN_HOURS * (1 - 14 / 16)), (MLP, _MLP_HOURS * (1 - 6 / 16))],
    goodput.CHECKPOINT_BYTES.record: [(MLP, _WRITTEN["mlp"]), (RNN, _WRITTEN["rnn"])],
    goodput.BADPUT_COST: [(CNN, _CNN_COST * (1 - 14 / 16)), (MLP, _MLP_COST * (1 - 6 / 16))],
    goodput.BADPUT_COST_BY_PHASE: [*_bad(CNN, CNN_SHARES, _CNN_COST), *_bad(MLP, MLP_SHARES, _MLP_COST)],
    goodput.VERDICT_GPUS: [({"verdict": goodput.VERDICT_COMPUTE}, 2), ({"verdict": goodput.VERDICT_INPUT}, 1)],
    # Every evaluation from 0s to 600s: at 0s no rate has two samples yet, so the jobs are judged on
    # their GPUs alone (cnn-1 busy: compute-saturated; mlp-2 at 20%: underutilized).
    goodput.VERDICT_GPU_HOURS_24H: [
        ({"verdict": goodput.VERDICT_COMPUTE}, 2 * _SCRAPES * S / 3600),
        ({"verdict": goodput.VERDICT_INPUT}, 1 * (_SCRAPES - 1) * S / 3600),
        ({"verdict": goodput.VERDICT_UNDERUTILIZED}, 1 * 1 * S / 3600),
    ],
    goodput.CHECKPOINT_STORAGE_COST: [(MLP, _WRITTEN["mlp"] * _PER_BYTE), (RNN, _WRITTEN["rnn"] * _PER_BYTE)],
    goodput.MODEL_CHECKPOINT_STORAGE_COST_24H: [
        ({"model_type": "mlp"}, _WRITTEN["mlp"] * _PER_BYTE),
        ({"model_type": "rnn"}, _WRITTEN["rnn"] * _PER_BYTE),
    ],
}
ROUND_TO = 2.0**-30  # about 1e-9: a rate's extrapolation may leave the last bit of a value to chance


def fleet_record_cases() -> tuple[RecordCase, ...]:
    (first, samples), *rest = FLEET_RECORDS.items()
    also = tuple((record, tuple(more)) for record, more in rest)
    return (
        RecordCase(first, "the three-job fleet at 10m", fleet(), "10m", tuple(samples), also=also, round_to=ROUND_TO),
    )


# --- MFU is absent, never wrong ---------------------------------------------------------------------
V100 = {**gpu_labels("1", node="gpu-node-2"), "gpu_name": "Tesla V100-SXM2-32GB"}
MIXED = {"model_type": "cnn", "job_id": "mixed-4"}
NO_BF16 = {"model_type": "cnn", "job_id": "v100-5"}
KNOWN = {"model_type": "cnn", "job_id": "known-6"}
A100_SXM = {**gpu_labels("2", node="gpu-node-2"), "gpu_name": "NVIDIA A100-SXM4-80GB"}


def mfu_cases() -> tuple[RecordCase, ...]:
    a100 = _PEAK("NVIDIA A100-SXM4-80GB", "bf16") or 0.0
    return (
        RecordCase(
            goodput.MFU.record,
            "with a known peak: achieved over the GPUs' peak; absent where one GPU of the job is unknown and "
            "where the GPU has no figure at the job's precision (a V100 in bf16)",
            {
                **model_flops(MIXED, 4e14, "bf16"),
                **holds(MIXED, H100_A, UNKNOWN),
                **gpus_busy(H100_A, 90),
                **gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, UNKNOWN, 90, NODE_2),
                **model_flops(NO_BF16, 1e13, "bf16"),
                **holds(NO_BF16, V100),
                **gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, V100, 90, NODE_2),
                **model_flops(KNOWN, 1.25e14, "bf16"),
                **holds(KNOWN, A100_SXM),
                **gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, A100_SXM, 90, NODE_2),
            },
            "5m",
            ((KNOWN, 1.25e14 / a100),),
            round_to=ROUND_TO,
        ),
        RecordCase(
            goodput.MFU.record,
            "a job reporting FLOPs in two precisions, one of them unknown to its GPU, has no MFU",
            {
                **model_flops(KNOWN, 1e14, "bf16"),
                **model_flops(KNOWN, 1e12, "fp8"),
                **holds(KNOWN, A100_SXM),
                **gpu_gauge(catalog.GPU_UTILIZATION_PERCENT, A100_SXM, 90, NODE_2),
            },
            "5m",
            (),
        ),
    )


# --- the verdict at the edges of each threshold -----------------------------------------------------
def _job(name: str) -> dict[str, str]:
    return {"model_type": "edge", "job_id": name}


def verdict_edge_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[RecordCase, ...]:
    data, ckpt = th.training_data_wait_ratio.value, th.training_checkpoint_ratio.value
    comm, computing = th.training_communication_share_ratio.value, th.training_compute_saturated_ratio.value
    busy = th.training_compute_saturated_gpu_busy_percent.value
    v = goodput
    above, below = _job("above"), _job("below")

    def cause(phase: str, share: float) -> dict[str, float]:
        return {phase: share, "compute": (1 - share) / 2, "idle": (1 - share) / 2}

    def between_steps(step_share: float, evaluating: float = 0.25) -> dict[str, float]:
        """Collectives at `step_share` of the step time (every phase but evaluation)."""
        collective = step_share * (1 - evaluating)
        rest = (1 - evaluating - collective) / 2
        return {"collective": collective, "evaluation": evaluating, "compute": rest, "idle": rest}

    def saturated(share: float) -> dict[str, float]:
        return {"compute": share, "idle": 1 - share}

    steady = saturated(0.95)
    larger = max(data, ckpt)
    gpu_a, gpu_b = gpu_labels("0"), gpu_labels("1")
    return (
        RecordCase(
            v.VERDICT,
            f"data wait just above {data:g} is input-bound, just below it is not",
            {**phases(above, cause("data_wait", data + EDGE)), **phases(below, cause("data_wait", data - EDGE))},
            "5m",
            (_verdict(above, v.VERDICT_INPUT), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            f"checkpoints just above {ckpt:g} are checkpoint-bound, just below are not",
            {**phases(above, cause("checkpoint", ckpt + EDGE)), **phases(below, cause("checkpoint", ckpt - EDGE))},
            "5m",
            (_verdict(above, v.VERDICT_CHECKPOINT), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            f"collectives just above {comm:g} of the time are communication-bound, just below are not",
            {**phases(above, cause("collective", comm + EDGE)), **phases(below, cause("collective", comm - EDGE))},
            "5m",
            (_verdict(above, v.VERDICT_COMMUNICATION), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            f"the recorded communication share (collectives over the step) just above {comm:g} is "
            "communication-bound, just below is not, with a quarter of the time evaluating between steps (the "
            "collective phase's share of all the time stays far below the threshold in both)",
            {
                **phases(above, between_steps(comm + EDGE)),
                **phases(below, between_steps(comm - EDGE)),
            },
            "5m",
            (_verdict(above, v.VERDICT_COMMUNICATION), _verdict(below, v.VERDICT_UNDERUTILIZED)),
            also=((v.CAUSES, (({**above, "verdict": v.VERDICT_COMMUNICATION}, comm + EDGE),)),),
            round_to=ROUND_TO,
        ),
        RecordCase(
            v.VERDICT,
            "two causes above their thresholds: the larger share wins",
            {
                **phases(
                    above,
                    {
                        "data_wait": larger + 2 * EDGE,
                        "checkpoint": larger + 4 * EDGE,
                        "compute": 1 - 2 * larger - 6 * EDGE,
                    },
                ),
                **phases(
                    below,
                    {
                        "data_wait": larger + 4 * EDGE,
                        "checkpoint": larger + 2 * EDGE,
                        "compute": 1 - 2 * larger - 6 * EDGE,
                    },
                ),
            },
            "5m",
            (_verdict(above, v.VERDICT_CHECKPOINT), _verdict(below, v.VERDICT_INPUT)),
        ),
        RecordCase(
            v.VERDICT,
            f"without GPUs: computing just above {computing:g} of the time is compute-saturated, just below is not",
            {**phases(above, saturated(computing + EDGE)), **phases(below, saturated(computing - EDGE))},
            "5m",
            (_verdict(above, v.VERDICT_COMPUTE), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            f"NVML utilization just above {busy:g}% with the time computing is compute-saturated, just below "
            "is underutilized",
            {
                **phases(above, steady),
                **holds(above, gpu_a),
                **gpus_busy(gpu_a, busy + BUSY_EDGE),
                **phases(below, steady),
                **holds(below, gpu_b),
                **gpus_busy(gpu_b, busy - BUSY_EDGE),
            },
            "5m",
            (_verdict(above, v.VERDICT_COMPUTE), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            "GPM SM activity outranks NVML utilization (which reads 100% while a kernel runs on a few SMs)",
            {
                **phases(above, steady),
                **holds(above, gpu_a),
                **gpus_busy(gpu_a, 10, sm_active=busy + BUSY_EDGE),
                **phases(below, steady),
                **holds(below, gpu_b),
                **gpus_busy(gpu_b, 100, sm_active=busy - BUSY_EDGE),
            },
            "5m",
            (_verdict(above, v.VERDICT_COMPUTE), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            "a job with GPUs but no time split is judged on its GPUs alone",
            {
                **holds(above, gpu_a),
                **gpus_busy(gpu_a, 100, sm_active=busy + BUSY_EDGE),
                **holds(below, gpu_b),
                **gpus_busy(gpu_b, busy - BUSY_EDGE),
            },
            "5m",
            (_verdict(above, v.VERDICT_COMPUTE), _verdict(below, v.VERDICT_UNDERUTILIZED)),
        ),
        RecordCase(
            v.VERDICT,
            "waiting for data outranks busy GPUs (a starved job's kernels still run flat out between batches)",
            {
                **phases(above, {"data_wait": data + EDGE, "compute": 1 - data - EDGE}),
                **holds(above, gpu_a),
                **gpus_busy(gpu_a, 100, sm_active=99),
            },
            "5m",
            (_verdict(above, v.VERDICT_INPUT),),
        ),
    )


def goodput_record_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[RecordCase, ...]:
    return (*fleet_record_cases(), *mfu_cases(), *verdict_edge_cases(th))


# --- the efficiency alerts --------------------------------------------------------------------------
_ALERT_SCRAPES = 1815 // S + 1  # 0s..30m15s


def efficiency_alert_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    out: list[Case] = []
    for alert, phase, threshold in (
        ("TrainingInputBound", "data_wait", th.training_data_wait_ratio.value),
        ("TrainingCheckpointBound", "checkpoint", th.training_checkpoint_ratio.value),
    ):
        above, below = _job("above"), _job("below")
        share_above, share_below = threshold + EDGE, threshold - EDGE
        out.append(
            Case(
                alert,
                f"{phase} at {share_above:g} of the time fires after 30m (pending from 15s, the first rate); "
                f"at {share_below:g}, just below the threshold, it stays silent",
                {
                    **phases(above, {phase: share_above, "compute": 1 - share_above}, samples=_ALERT_SCRAPES),
                    **phases(below, {phase: share_below, "compute": 1 - share_below}, samples=_ALERT_SCRAPES),
                },
                (Check("15m"), Check("30m"), Check("30m15s", (Firing(above, share_above),))),
            )
        )
    return tuple(out)
