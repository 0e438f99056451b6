"""Group `ml_training_job_gpus.recording`: the GPUs each training job holds, seen per job.

A training job exports `ml_training_job_gpu_info{model_type, job_id, uuid} 1` for every GPU its
container was given (`foxhunt_trainer.gpus`); the poller labels every GPU series with
`uuid`. Joining the two on `uuid` gives each held GPU its job or jobs:

    <holder> * on (uuid) group_left (node, gpu_id, gpu_name) <per-GPU expression>

`<holder>` has one series per (GPU, job), so a GPU held by several jobs at once (time-sliced, or a
finished pod whose series have not gone stale yet) gives one series per job, never a many-to-many
error. A finished job's info series go stale when its pod stops being scraped, and from the next
evaluation its GPUs count for no job. GPUs no job holds are not in these series at all: idle free
capacity is not a job's waste.

Kinds of GPU:
- a whole GPU held by one job: its device-level figures are the job's;
- a MIG device (`uuid` `MIG-...`, `ml_gpu_mig_device_info`): a GPU of its own, joined the same way;
  NVML has no utilization for it, so its GPM SM activity stands for it; its peak FLOPs and its price
  are scaled by its share of the parent's SMs (`ml_gpu_mig_sm_share_ratio`);
- a shared GPU (held by more than one job, `uuid:ml_training_job_gpu_info:count` > 1): its device
  figures are no job's own. Each job's memory is what its own processes report
  (`ml_training_gpu_memory_reserved_bytes`), its utilization is its own time split (the share of its
  time in compute, x 100), and its price is split evenly between the jobs holding it.

What is recorded:
- per held GPU (`job_gpu:` level, the GPU's labels plus `model_type`, `job_id`): utilization,
  memory-used ratio, power, temperature. Only held GPUs are written (50 jobs of 8 GPUs: 400
  series, not the fleet's 8,000), and the training cockpit's "This job's GPUs" reads them;
- per job: GPU count, mean and minimum utilization, maximum memory-used ratio, summed power,
  energy rate (W), hottest temperature, and the estimates so far (GPU-hours, kWh, cost);
- fleet allocation: GPUs held by a job, GPUs held by none, held GPUs that are idle;
- per model type over 24 h: GPU-hours, kWh and estimated cost.

Estimates "so far" start when Prometheus first recorded the job (`first_seen`, kept by the rule
reading its own last value, `last_over_time(...[10m])`): they restart if Prometheus saw no sample
of the job for 10 minutes. Prices come from `ObservabilityConfig` (stack settings `gpuHourlyCost`,
`energyPricePerKWh`, `currency`); GPU-hours are priced by `gpu_name`, else at the default price.
"""

from __future__ import annotations

from typing import Any

from foxhunt_trainer.contract import catalog, records
from observability.config import MIG_COST_COMPUTE_SHARE, ObservabilityConfig
from observability.promql import by, duration
from observability.rules import recording
from observability.rules.rule_types import RecordingRule

GROUP = "ml_training_job_gpus.recording"
GPU_LABELS: tuple[str, ...] = catalog.GPU  # node, gpu_id, uuid, gpu_name
JOB_LABELS: tuple[str, ...] = catalog.JOB  # model_type, job_id
ENERGY_RATE_WINDOW = "2m"  # as the dashboards' GPU counters: 8 samples at a 15 s scrape
# How long a job's first-seen time and energy survive a gap in its series (a Prometheus restart).
LATCH_WINDOW = "10m"
JOULES_PER_KWH = 3_600_000

_INFO = catalog.TRAINING_JOB_GPU_INFO.name
_RESERVED = catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES.name

# The jobs that hold each GPU: one series per (uuid, job), labelled model_type and job_id, value 1.
HOLDER = f"max by (uuid, model_type, job_id) ({_INFO})"
_PLACED = "node, gpu_id, gpu_name"  # the GPU labels other than uuid, taken from the poller's side


def attributed(per_gpu: str) -> str:
    """`per_gpu` (one series per GPU, with `uuid`) for the GPUs a job holds, with its job's labels (one
    series per job on a GPU several jobs hold)."""
    return f"{HOLDER}\n* on (uuid) group_left ({_PLACED})\n(\n{per_gpu}\n)"


# How many jobs hold each GPU (label uuid): above 1 the GPU is shared (time-sliced).
GPU_HOLDERS = RecordingRule(
    f"uuid:{_INFO}:count",
    f"count by (uuid) ({HOLDER})",
    "Training jobs holding each GPU (by uuid); above 1 the GPU is shared by time-slicing and its device-level "
    "figures are no one job's.",
)
_EXCLUSIVE = f"{GPU_HOLDERS.record} == 1"
_SHARED = f"{GPU_HOLDERS.record} > 1"


def attributed_split(per_gpu: str) -> str:
    """`attributed(per_gpu)` divided evenly between the jobs holding each GPU (a shared GPU's power and
    energy are counted once across its jobs, never in full for each)."""
    return f"{attributed(per_gpu)}\n/ on (uuid) group_left ()\n{GPU_HOLDERS.record}"


def attributed_exclusive(per_gpu: str) -> str:
    """`attributed(per_gpu)` for the GPUs exactly one job holds: device-level figures are that job's."""
    return attributed(f"(\n{per_gpu}\n)\nand on (uuid)\n{_EXCLUSIVE}")


def attributed_or_unheld(per_gpu: str) -> str:
    """Every GPU of `per_gpu`: with its job's labels where a job holds it, unchanged where none does
    (per-GPU hardware alerts must still fire for a GPU no job holds)."""
    return f"(\n{attributed(per_gpu)}\n)\nor on (uuid)\n(\n{per_gpu}\n)"


def _per_gpu(metric: catalog.Metric) -> str:
    return f"max {by(GPU_LABELS)} ({metric.name})"


_USED = catalog.GPU_MEMORY_USED_BYTES.name
_TOTAL = catalog.GPU_MEMORY_TOTAL_BYTES.name
_JOB = by(JOB_LABELS)
_GPU = by(GPU_LABELS)

# --- per held GPU ------------------------------------------------------------------------------
HELD = RecordingRule(
    f"job_gpu:{_INFO}:held",
    attributed(f"group {_GPU} ({_TOTAL})\nor on (uuid)\ngroup {_GPU} ({catalog.GPU_UTILIZATION_PERCENT.name})"),
    "1 for each GPU (whole GPU or MIG device) a training job holds, labelled with the job and the GPU.",
)
# A MIG device has no NVML utilization: its GPM SM activity is its busyness.
_UTILIZATION = (
    f"{_per_gpu(catalog.GPU_UTILIZATION_PERCENT)}\nor on (uuid)\n"
    f"max {by(GPU_LABELS)} (\n  {catalog.GPU_SM_ACTIVE_PERCENT.name}\n  and on (uuid)\n  "
    f"{catalog.GPU_MIG_DEVICE_INFO.name}\n)"
)
_SHARED_HELD = f"(\n  {HELD.record}\n  and on (uuid)\n  {_SHARED}\n)"
HELD_UTILIZATION = RecordingRule(
    f"job_gpu:{catalog.GPU_UTILIZATION_PERCENT.name}:held",
    attributed_exclusive(_UTILIZATION),
    "Utilization (0-100) of each GPU a training job holds alone, labelled with the job: NVML's figure, a MIG "
    "device's GPM SM activity. A GPU several jobs share has none here: its figure is no one job's.",
)
JOB_GPU_RESERVED = RecordingRule(
    f"model_type_job_id_uuid:{_RESERVED}:sum",
    f"sum by (model_type, job_id, uuid) ({_RESERVED})",
    "Device memory (bytes) each training job's processes hold on each GPU, as they report it (their allocator).",
)
HELD_MEMORY_RATIO = RecordingRule(
    f"job_gpu:{recording.MEMORY_USED_OVER_TOTAL}:ratio",
    f"{attributed_exclusive(f'max {by(GPU_LABELS)} ({_USED} / {_TOTAL})')}\nor on (uuid, model_type, job_id)\n"
    f"{_SHARED_HELD}\n* on (uuid, model_type, job_id) group_left ()\n{JOB_GPU_RESERVED.record}\n"
    f"/ on (uuid) group_left ()\nmax by (uuid) ({_TOTAL})",
    "Fraction (0-1) of each GPU's memory a training job holds, labelled with the job: the GPU's memory in use "
    "where the job holds it alone; on a shared GPU, what the job's own processes report.",
)
HELD_POWER = RecordingRule(
    f"job_gpu:{catalog.GPU_POWER_WATTS.name}:held",
    attributed_split(_per_gpu(catalog.GPU_POWER_WATTS)),
    "Power draw (W) of each GPU a training job holds, labelled with the job (a GPU several jobs share: its "
    "draw split evenly between them).",
)
HELD_TEMPERATURE = RecordingRule(
    f"job_gpu:{catalog.GPU_TEMPERATURE_CELSIUS.name}:held",
    attributed(_per_gpu(catalog.GPU_TEMPERATURE_CELSIUS)),
    "Temperature (Celsius) of each GPU a training job holds, labelled with the job.",
)
# A MIG device's share of its parent's SMs (1 for a whole GPU): scales its peak FLOPs (MFU).
HELD_SM_SHARE = RecordingRule(
    f"job_gpu:{catalog.GPU_MIG_SM_SHARE_RATIO.name}:held",
    f"{HELD.record}\n* on (uuid) group_left ()\nmax by (uuid) ({catalog.GPU_MIG_SM_SHARE_RATIO.name})\n"
    f"or on (uuid, model_type, job_id)\n{HELD.record}",
    "Share (0-1) of a whole GPU's SMs each GPU a training job holds has: a MIG device's compute slices over "
    "the whole GPU's, 1 for a whole GPU.",
)

# --- per job -----------------------------------------------------------------------------------
JOB_GPUS = RecordingRule(
    f"model_type_job_id:{_INFO}:count",
    f"count {_JOB} ({HOLDER})",
    "GPUs (whole GPUs and MIG devices) each training job holds.",
)
JOB_SHARED_GPUS = RecordingRule(
    f"model_type_job_id:{_INFO}:shared",
    f"count {_JOB} ({_SHARED_HELD})\nor on (model_type, job_id)\n{JOB_GPUS.record} * 0",
    "GPUs each training job holds that other jobs share at the same time (time-sliced); 0 for a job holding "
    "its GPUs alone.",
)
_ON_SHARED = f"({JOB_SHARED_GPUS.record} > 0)"
# A job holding a GPU other jobs share is judged by its own time split: the share of its time in compute.
_OWN_TIME_SPLIT = f"(\n  100 * {records.GOODPUT}\n  and on (model_type, job_id)\n  {_ON_SHARED}\n)"
JOB_UTILIZATION_AVG = RecordingRule(
    f"model_type_job_id:{catalog.GPU_UTILIZATION_PERCENT.name}:avg",
    f"avg {_JOB} ({HELD_UTILIZATION.record})\nunless on (model_type, job_id)\n{_ON_SHARED}\n"
    f"or on (model_type, job_id)\n{_OWN_TIME_SPLIT}",
    "Mean utilization (0-100) of the GPUs each training job holds; for a job on a GPU other jobs share, its own "
    "share of its time in compute (x 100), never the shared device's figure.",
)
JOB_UTILIZATION_MIN = RecordingRule(
    f"model_type_job_id:{catalog.GPU_UTILIZATION_PERCENT.name}:min",
    f"min {_JOB} ({HELD_UTILIZATION.record})\nunless on (model_type, job_id)\n{_ON_SHARED}\n"
    f"or on (model_type, job_id)\n{_OWN_TIME_SPLIT}",
    "Utilization (0-100) of the idlest GPU each training job holds; for a job on a GPU other jobs share, its own "
    "share of its time in compute (x 100).",
)
JOB_MEMORY_RATIO_MAX = RecordingRule(
    f"model_type_job_id:{recording.MEMORY_USED_OVER_TOTAL}:max",
    f"max {_JOB} ({HELD_MEMORY_RATIO.record})",
    "Fraction (0-1) of memory in use on the fullest GPU each training job holds.",
)
JOB_POWER = RecordingRule(
    f"model_type_job_id:{catalog.GPU_POWER_WATTS.name}:sum",
    f"sum {_JOB} ({HELD_POWER.record})",
    "Power (W) drawn by all the GPUs of each training job.",
)
JOB_ENERGY_RATE = RecordingRule(
    f"model_type_job_id:ml_gpu_energy_joules:rate{ENERGY_RATE_WINDOW}",
    f"sum {_JOB} (\n"
    + attributed_split(f"sum {by(GPU_LABELS)} (rate({catalog.GPU_ENERGY_JOULES_TOTAL.name}[{ENERGY_RATE_WINDOW}]))")
    + "\n)",
    f"Energy (J/s = W) the GPUs of each training job consumed, over {ENERGY_RATE_WINDOW} (NVML energy counter).",
)
JOB_TEMPERATURE_MAX = RecordingRule(
    f"model_type_job_id:{catalog.GPU_TEMPERATURE_CELSIUS.name}:max",
    f"max {_JOB} ({HELD_TEMPERATURE.record})",
    "Temperature (Celsius) of the hottest GPU each training job holds.",
)

# GPM (Hopper and newer): what the job's GPUs really did, beside NVML's "a kernel ran" figure above.
JOB_SM_ACTIVE_AVG = RecordingRule(
    f"model_type_job_id:{catalog.GPU_SM_ACTIVE_PERCENT.name}:avg",
    f"avg {_JOB} (\n{attributed_exclusive(_per_gpu(catalog.GPU_SM_ACTIVE_PERCENT))}\n)",
    "Mean SM activity (0-100, GPM) of the GPUs each training job holds alone that report GPM (a shared GPU's "
    "activity is no one job's).",
)
JOB_TENSOR_ACTIVE_AVG = RecordingRule(
    f"model_type_job_id:{catalog.GPU_TENSOR_ACTIVE_PERCENT.name}:avg",
    f"avg {_JOB} (\n{attributed_exclusive(_per_gpu(catalog.GPU_TENSOR_ACTIVE_PERCENT))}\n)",
    "Mean tensor-core activity (0-100, GPM) of the GPUs each training job holds alone that report GPM.",
)

# --- fleet allocation ----------------------------------------------------------------------------
_MIG_INFO = catalog.GPU_MIG_DEVICE_INFO.name
# A GPU in MIG mode counts as held while a job holds any of its MIG devices.
FLEET_HELD = RecordingRule(
    f"fleet:{_INFO}:held",
    # Two counts added, not one count of a union by uuid: each composes from one number per shard,
    # where a union would send every held GPU's uuid to the global tier. They never overlap: a job
    # holds either a whole GPU or MIG devices of a GPU in MIG mode, never the MIG GPU itself.
    f"(count(count by (uuid) ({HELD.record} unless on (uuid) {_MIG_INFO})) or vector(0))\n+\n"
    f"(count(count by (node, parent_uuid) ({_MIG_INFO} and on (uuid) {HELD.record})) or vector(0))",
    "Whole GPUs of the fleet held by a training job: held themselves, or one of their MIG devices held (a GPU "
    "several jobs share counts once).",
)
FLEET_MIG_HELD = RecordingRule(
    f"fleet:{_INFO}:mig_held",
    f"count(count by (uuid) ({HELD.record} and on (uuid) {_MIG_INFO})) or vector(0)",
    "MIG devices of the fleet held by a training job.",
)
FLEET_UNHELD = RecordingRule(
    f"fleet:{_INFO}:unheld",
    f"sum(max by (node) ({catalog.GPU_POLLER_DEVICES.name})) - {FLEET_HELD.record}",
    "Whole GPUs of the fleet (as the pollers report them) held by no training job: free capacity.",
)
FLEET_SHARED = RecordingRule(
    f"fleet:{_INFO}:shared",
    f"count({_SHARED}) or vector(0)",
    "GPUs of the fleet held by more than one training job at once (time-sliced).",
)
FLEET_HELD_IDLE = f"fleet:{_INFO}:held_idle"


def fleet_held_idle(cfg: ObservabilityConfig) -> RecordingRule:
    """Held GPUs below the GPUUtilizationLow threshold: a held GPU that busy is idle."""
    idle = cfg.thresholds.gpu_utilization_low_percent
    return RecordingRule(
        FLEET_HELD_IDLE,
        f"count({HELD_UTILIZATION.record} < {idle.promql}) or vector(0)",
        f"GPUs held by a training job alone but below {idle.short} utilization: paid for and idle.",
    )


# --- energy and cost so far (estimates) ------------------------------------------------------------
def _latched(record: str, value: str, present: str) -> str:
    """The value `record` had when first recorded, for as long as `present` (per job) exists."""
    return f"(\n  last_over_time({record}[{LATCH_WINDOW}])\n  and on (model_type, job_id)\n  {present}\n)\nor\n{value}"


JOB_FIRST_SEEN = RecordingRule(
    f"model_type_job_id:{_INFO}:first_seen",
    _latched(f"model_type_job_id:{_INFO}:first_seen", f"{JOB_GPUS.record} * 0 + time()", JOB_GPUS.record),
    "Unix time at which Prometheus first recorded the job holding GPUs (start of the estimates so far).",
)
JOB_ENERGY = RecordingRule(
    "model_type_job_id:ml_gpu_energy_joules:sum",
    f"sum {_JOB} (\n{attributed_split(_per_gpu(catalog.GPU_ENERGY_JOULES_TOTAL))}\n)",
    "Sum of the NVML energy counters (J since each driver loaded) of each training job's GPUs.",
)
JOB_ENERGY_FIRST_SEEN = RecordingRule(
    "model_type_job_id:ml_gpu_energy_joules:first_seen",
    _latched("model_type_job_id:ml_gpu_energy_joules:first_seen", JOB_ENERGY.record, JOB_ENERGY.record),
    "The job's energy counter sum when Prometheus first recorded it.",
)
JOB_GPU_HOURS = RecordingRule(
    f"model_type_job_id:{_INFO}:gpu_hours",
    f"{JOB_GPUS.record} * (time() - {JOB_FIRST_SEEN.record}) / 3600",
    "GPU-hours each training job has held so far.",
)
JOB_KWH = RecordingRule(
    "model_type_job_id:ml_gpu_energy_joules:kwh",
    f"clamp_min({JOB_ENERGY.record} - {JOB_ENERGY_FIRST_SEEN.record}, 0) / {JOULES_PER_KWH}",
    "Energy (kWh) the GPUs of each training job have consumed so far.",
)


def _string(value: str) -> str:
    return '"' + value.replace("\\", r"\\").replace('"', r"\"") + '"'


def _number(value: float) -> str:
    return repr(float(value))


def gpu_hourly_price(cfg: ObservabilityConfig, per_gpu: str) -> str:
    """Each series of `per_gpu` (which has `gpu_name`) replaced by its GPU's price per hour."""
    branches = [
        f"({per_gpu}{{gpu_name={_string(name)}}} * 0 + {_number(price)})" for name, price in cfg.gpu_hourly_cost
    ]
    branches.append(f"({per_gpu} * 0 + {_number(cfg.gpu_hourly_cost_default)})")
    return "\nor\n".join(branches)


# Names of the price-dependent records (the rules themselves are built per config: cost_rules).
JOB_HOURLY_COST = "model_type_job_id:ml_gpu_hourly_cost:sum"
JOB_COST = f"model_type_job_id:{_INFO}:cost"
MODEL_GPUS = f"model_type:{_INFO}:count"
MODEL_HOURLY_COST = "model_type:ml_gpu_hourly_cost:sum"
MODEL_ENERGY_RATE = f"model_type:ml_gpu_energy_joules:rate{ENERGY_RATE_WINDOW}"
MODEL_GPU_HOURS_24H = f"model_type:{_INFO}:gpu_hours_24h"
MODEL_KWH_24H = "model_type:ml_gpu_energy_joules:kwh_24h"
MODEL_COST_24H = f"model_type:{_INFO}:cost_24h"


def cost_share(cfg: ObservabilityConfig) -> str:
    """Per held GPU, the part of its price the job pays: a MIG device its SM share (with `migCost:
    compute_share`) or 1 (`whole_gpu`), a GPU shared by time-slicing 1 over the jobs holding it."""
    mig = HELD_SM_SHARE.record if cfg.mig_cost == MIG_COST_COMPUTE_SHARE else HELD.record
    return f"{mig}\n/ on (uuid) group_left ()\n{GPU_HOLDERS.record}"


def cost_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The rules that depend on the stack's prices (`ObservabilityConfig.gpu_hourly_cost`, ...)."""
    energy_price = _number(cfg.energy_price_per_kwh)
    how = (
        "a MIG device at its share of its GPU's SMs"
        if cfg.mig_cost == MIG_COST_COMPUTE_SHARE
        else "a MIG device at its whole GPU's price"
    )
    hourly = RecordingRule(
        JOB_HOURLY_COST,
        f"sum {_JOB} (\n(\n{gpu_hourly_price(cfg, HELD.record)}\n)\n"
        f"* on (uuid, model_type, job_id)\n(\n{cost_share(cfg)}\n)\n)",
        f"Price ({cfg.currency} per hour) of the GPUs each training job holds: {how}, a GPU several jobs share "
        "split evenly between them.",
    )
    cost = RecordingRule(
        JOB_COST,
        f"{hourly.record} * (time() - {JOB_FIRST_SEEN.record}) / 3600\n"
        f"+\n(\n  {JOB_KWH.record} * {energy_price}\n  or\n  {hourly.record} * 0\n)",
        f"Estimated cost ({cfg.currency}) of each training job so far: GPU-hours at their price plus energy.",
    )
    interval = cfg.evaluation_interval_seconds
    model_gpus = RecordingRule(MODEL_GPUS, f"sum by (model_type) ({JOB_GPUS.record})", "GPUs held per model type.")
    model_hourly = RecordingRule(
        MODEL_HOURLY_COST,
        f"sum by (model_type) ({hourly.record})",
        f"Price ({cfg.currency} per hour) of the GPUs held per model type.",
    )
    model_energy_rate = RecordingRule(
        MODEL_ENERGY_RATE,
        f"sum by (model_type) ({JOB_ENERGY_RATE.record})",
        "Energy (W) consumed by the GPUs of each model type's jobs.",
    )
    model_gpu_hours = RecordingRule(
        MODEL_GPU_HOURS_24H,
        f"sum_over_time({model_gpus.record}[1d]) * {interval} / 3600",
        "GPU-hours held per model type over the last 24 hours.",
    )
    model_kwh = RecordingRule(
        MODEL_KWH_24H,
        f"sum_over_time({model_energy_rate.record}[1d]) * {interval} / {JOULES_PER_KWH}",
        "Energy (kWh) consumed per model type over the last 24 hours.",
    )
    model_cost = RecordingRule(
        MODEL_COST_24H,
        f"sum_over_time({model_hourly.record}[1d]) * {interval} / 3600\n"
        f"+\n(\n  {model_kwh.record} * {energy_price}\n  or\n  sum_over_time({model_hourly.record}[1d]) * 0\n)",
        f"Estimated cost ({cfg.currency}) per model type over the last 24 hours: GPU-hours plus energy.",
    )
    return (hourly, cost, model_gpus, model_hourly, model_energy_rate, model_gpu_hours, model_kwh, model_cost)


# Order matters: a rule reads records defined earlier in the group (same evaluation).
JOB_RULES: tuple[RecordingRule, ...] = (
    GPU_HOLDERS,
    HELD,
    HELD_UTILIZATION,
    JOB_GPU_RESERVED,
    HELD_MEMORY_RATIO,
    HELD_POWER,
    HELD_TEMPERATURE,
    HELD_SM_SHARE,
    JOB_GPUS,
    JOB_SHARED_GPUS,
    JOB_UTILIZATION_AVG,
    JOB_UTILIZATION_MIN,
    JOB_SM_ACTIVE_AVG,
    JOB_TENSOR_ACTIVE_AVG,
    JOB_MEMORY_RATIO_MAX,
    JOB_POWER,
    JOB_ENERGY_RATE,
    JOB_TEMPERATURE_MAX,
    FLEET_HELD,
    FLEET_MIG_HELD,
    FLEET_UNHELD,
    FLEET_SHARED,
)
# After the fleet allocation (which reads nothing of them); before the cost rules.
_JOB_TOTALS: tuple[RecordingRule, ...] = (
    JOB_FIRST_SEEN,
    JOB_ENERGY,
    JOB_ENERGY_FIRST_SEEN,
    JOB_GPU_HOURS,
    JOB_KWH,
)


def job_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """Every rule of the group for this config (the cost rules carry its prices)."""
    return (*JOB_RULES, fleet_held_idle(cfg), *_JOB_TOTALS, *cost_rules(cfg))


def job_groups(cfg: ObservabilityConfig) -> list[dict[str, Any]]:
    return [
        {
            "name": GROUP,
            "interval": duration(cfg.evaluation_interval_seconds),
            "rules": [r.to_rule() for r in job_rules(cfg)],
        }
    ]
