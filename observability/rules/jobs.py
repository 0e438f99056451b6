"""Group `ml_training_job_gpus.recording`: the GPUs each training job holds, seen per job.

A training job exports `ml_training_job_gpu_info{model_type, job_id, uuid} 1` for every GPU its
container was given (`foxhunt_trainer.gpus`); the poller labels every GPU series with
`uuid`. Joining the two on `uuid` gives each held GPU its job:

    <per-GPU expression> * on (uuid) group_left (model_type, job_id) <holder>

`<holder>` keeps one job per GPU (`topk by (uuid) (1, ...)`), so a GPU that two jobs claim at
once (a finished pod whose series have not gone stale yet) can never make the join fail with a
many-to-many error. A finished job's info series go stale when its pod stops being scraped, and
from the next evaluation its GPUs count for no job. GPUs no job holds are not in these series at
all: idle free capacity is not a job's waste.

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

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
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

# The job that holds each GPU: one series per uuid, labelled model_type and job_id, value 1.
HOLDER = f"topk by (uuid) (1, max by (uuid, model_type, job_id) ({_INFO}))"


def attributed(per_gpu: str) -> str:
    """`per_gpu` (one series per GPU, with `uuid`) for the GPUs a job holds, with its job's labels."""
    return f"(\n{per_gpu}\n)\n* on (uuid) group_left (model_type, job_id)\n{HOLDER}"


def attributed_or_unheld(per_gpu: str) -> str:
    """Every GPU of `per_gpu`: with its job's labels where a job holds it, unchanged where none does
    (per-GPU hardware alerts must still fire for a GPU no job holds)."""
    return f"(\n{attributed(per_gpu)}\n)\nor on (uuid)\n(\n{per_gpu}\n)"


def _per_gpu(metric: catalog.Metric) -> str:
    return f"max {by(GPU_LABELS)} ({metric.name})"


_USED = catalog.GPU_MEMORY_USED_BYTES.name
_TOTAL = catalog.GPU_MEMORY_TOTAL_BYTES.name
_JOB = by(JOB_LABELS)

# --- per held GPU ------------------------------------------------------------------------------
HELD_UTILIZATION = RecordingRule(
    f"job_gpu:{catalog.GPU_UTILIZATION_PERCENT.name}:held",
    attributed(_per_gpu(catalog.GPU_UTILIZATION_PERCENT)),
    "Utilization (0-100) of each GPU a training job holds, labelled with the job.",
)
HELD_MEMORY_RATIO = RecordingRule(
    f"job_gpu:{recording.MEMORY_USED_OVER_TOTAL}:ratio",
    attributed(f"max {by(GPU_LABELS)} ({_USED} / {_TOTAL})"),
    "Fraction (0-1) of memory in use on each GPU a training job holds, labelled with the job.",
)
HELD_POWER = RecordingRule(
    f"job_gpu:{catalog.GPU_POWER_WATTS.name}:held",
    attributed(_per_gpu(catalog.GPU_POWER_WATTS)),
    "Power draw (W) of each GPU a training job holds, labelled with the job.",
)
HELD_TEMPERATURE = RecordingRule(
    f"job_gpu:{catalog.GPU_TEMPERATURE_CELSIUS.name}:held",
    attributed(_per_gpu(catalog.GPU_TEMPERATURE_CELSIUS)),
    "Temperature (Celsius) of each GPU a training job holds, labelled with the job.",
)

# --- per job -----------------------------------------------------------------------------------
JOB_GPUS = RecordingRule(
    f"model_type_job_id:{_INFO}:count",
    f"count {_JOB} ({HOLDER})",
    "GPUs each training job holds.",
)
JOB_UTILIZATION_AVG = RecordingRule(
    f"model_type_job_id:{catalog.GPU_UTILIZATION_PERCENT.name}:avg",
    f"avg {_JOB} ({HELD_UTILIZATION.record})",
    "Mean utilization (0-100) of the GPUs each training job holds.",
)
JOB_UTILIZATION_MIN = RecordingRule(
    f"model_type_job_id:{catalog.GPU_UTILIZATION_PERCENT.name}:min",
    f"min {_JOB} ({HELD_UTILIZATION.record})",
    "Utilization (0-100) of the idlest GPU each training job holds.",
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
    + attributed(f"sum {by(GPU_LABELS)} (rate({catalog.GPU_ENERGY_JOULES_TOTAL.name}[{ENERGY_RATE_WINDOW}]))")
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
    f"avg {_JOB} (\n{attributed(_per_gpu(catalog.GPU_SM_ACTIVE_PERCENT))}\n)",
    "Mean SM activity (0-100, GPM) of the GPUs each training job holds that report GPM.",
)
JOB_TENSOR_ACTIVE_AVG = RecordingRule(
    f"model_type_job_id:{catalog.GPU_TENSOR_ACTIVE_PERCENT.name}:avg",
    f"avg {_JOB} (\n{attributed(_per_gpu(catalog.GPU_TENSOR_ACTIVE_PERCENT))}\n)",
    "Mean tensor-core activity (0-100, GPM) of the GPUs each training job holds that report GPM.",
)

# --- fleet allocation ----------------------------------------------------------------------------
FLEET_HELD = RecordingRule(
    f"fleet:{_INFO}:held",
    f"count({HELD_UTILIZATION.record}) or vector(0)",
    "GPUs of the fleet held by a training job.",
)
FLEET_UNHELD = RecordingRule(
    f"fleet:{_INFO}:unheld",
    f"sum(max by (node) ({catalog.GPU_POLLER_DEVICES.name})) - {FLEET_HELD.record}",
    "GPUs of the fleet (as the pollers report them) held by no training job: free capacity.",
)
FLEET_HELD_IDLE = f"fleet:{_INFO}:held_idle"


def fleet_held_idle(cfg: ObservabilityConfig) -> RecordingRule:
    """Held GPUs below the GPUUtilizationLow threshold: a held GPU that busy is idle."""
    idle = cfg.thresholds.gpu_utilization_low_percent
    return RecordingRule(
        FLEET_HELD_IDLE,
        f"count({HELD_UTILIZATION.record} < {idle.promql}) or vector(0)",
        f"GPUs held by a training job but below {idle.short} utilization: paid for and idle.",
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
    f"sum {_JOB} (\n{attributed(_per_gpu(catalog.GPU_ENERGY_JOULES_TOTAL))}\n)",
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


def cost_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The rules that depend on the stack's prices (`ObservabilityConfig.gpu_hourly_cost`, ...)."""
    energy_price = _number(cfg.energy_price_per_kwh)
    hourly = RecordingRule(
        JOB_HOURLY_COST,
        f"sum {_JOB} (\n{gpu_hourly_price(cfg, HELD_UTILIZATION.record)}\n)",
        f"Price ({cfg.currency} per hour) of the GPUs each training job holds.",
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
    HELD_UTILIZATION,
    HELD_MEMORY_RATIO,
    HELD_POWER,
    HELD_TEMPERATURE,
    JOB_GPUS,
    JOB_UTILIZATION_AVG,
    JOB_UTILIZATION_MIN,
    JOB_SM_ACTIVE_AVG,
    JOB_TENSOR_ACTIVE_AVG,
    JOB_MEMORY_RATIO_MAX,
    JOB_POWER,
    JOB_ENERGY_RATE,
    JOB_TEMPERATURE_MAX,
    FLEET_HELD,
    FLEET_UNHELD,
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
