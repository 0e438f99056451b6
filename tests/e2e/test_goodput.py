"""Is the GPU maxed out? Real PyTorch CPU runs judged by the rendered rules on Debian's Prometheus 2.42.

Five runs of `tests/e2e/goodput_runs.py` at once, scraped every second (the compute-heavy one in a
process of its own, the other four as threads of a second process):
- a run whose loader sleeps per sample: input-bound, and TrainingInputBound reaches the
  low-priority receiver of a real Alertmanager (the waste alerts' route);
- large matrix multiplies fed by a prefetching loader worker, no GPUs: compute-saturated for its
  CPU-only shape (no GPU evidence);
- a checkpoint after every step: checkpoint-bound, with its checkpoint bytes and their storage cost;
- on the fake NVML library (the GPU poller, GPM on), a job holding a GPU whose SMs and tensor cores
  are busy: compute-saturated, with an MFU against the H100's peak;
- a job holding a GPU that idles (a model the peak table does not know): underutilized, no MFU,
  its GPU model listed as unknown.

The rules are the rendered rules with the efficiency alerts' `for` (30 minutes) cut to 3 seconds;
the real durations and every threshold edge are proven by promtool (tests/rules/goodput_cases.py).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from harness.ports import free_port
from harness.prometheus import PrometheusServer
from harness.webhook_sink import WebhookSink
from observability.alertmanager import ReceiverUrls, alertmanager_config_yaml
from observability.config import ObservabilityConfig
from observability.rules import efficiency, goodput, rule_groups
from observability.rules.render import dump_groups

from .conftest import load_harness
from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until
from .test_monitoring_health import start_alertmanager

pytestmark = pytest.mark.slow

CFG = ObservabilityConfig(scrape_interval_seconds=1, evaluation_interval_seconds=1)
SHORT_FOR = "3s"
WAIT = 120.0  # PyTorch's import alone takes seconds on a loaded machine
NODE = "e2e-goodput-node"
BUSY_GPU = "GPU-e2e00000-0000-0000-0000-0000000000b0"
IDLE_GPU = "GPU-e2e00000-0000-0000-0000-0000000000a1"
UNKNOWN_MODEL = "NVIDIA Z999 Prototype"
PROCESSES = {  # trainer process -> its runs (SHAPE:JOB_ID[:GPU_UUID])
    "matmuls": ("compute:big-matmuls",),
    "others": (
        "input:sleepy-loader",
        "checkpoint:checkpoint-heavy",
        f"gpu:busy-gpu:{BUSY_GPU}",
        f"gpu:idle-gpu:{IDLE_GPU}",
    ),
}


def rules_with_short_for() -> str:
    groups = rule_groups(CFG)
    for group in groups:
        if group["name"] == efficiency.GROUP:
            for rule in group["rules"]:
                rule["for"] = SHORT_FOR
    return dump_groups(groups)


def alertmanager_config_without_waits(receivers: ReceiverUrls) -> str:
    """The rendered routing tree with every route's group_wait cut to 1s (the info route waits 5m)."""
    config = yaml.safe_load(alertmanager_config_yaml(CFG, receivers))
    for route in (config["route"], *config["route"]["routes"]):
        route["group_wait"] = "1s"
    return yaml.safe_dump(config)


class Run(load_harness().ServedProcess):  # type: ignore[misc]
    READY_TIMEOUT = WAIT
    STOP_TIMEOUT = 20.0

    def __init__(self, work: Path, name: str, runs: tuple[str, ...]) -> None:
        port = free_port()
        command = [sys.executable, "-m", "tests.e2e.goodput_runs", "--listen", f"127.0.0.1:{port}"]
        command += [arg for run in runs for arg in ("--run", run)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        super().__init__(f"runs-{name}", command, work, {**env, "LD_LIBRARY_PATH": ""}, port)

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)


@dataclass
class Judged:
    prometheus: PrometheusServer
    sink: WebhookSink
    runs: dict[str, Run]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.prometheus.api.query(expr)

    def value(self, expr: str) -> float | None:
        answer = self.query(expr)
        return float(answer[0]["value"][1]) if len(answer) == 1 else None

    def verdicts(self, job_id: str) -> list[str]:
        return [s["metric"]["verdict"] for s in self.query(f'{goodput.VERDICT}{{job_id="{job_id}"}}')]

    def wait_verdict(self, job_id: str, verdict: str) -> None:
        def judged() -> bool:
            return self.verdicts(job_id) == [verdict]

        try:
            wait_until(f"{job_id} judged {verdict}", judged, WAIT)
        except AssertionError:
            shares = self.query(f'{goodput.PHASE_SHARE.record}{{job_id="{job_id}"}}')
            busy = self.query(f'{goodput.GPU_BUSY.record}{{job_id="{job_id}"}}')
            raise AssertionError(
                f"{job_id}: verdict {self.verdicts(job_id)}, not {verdict}; shares "
                f"{[(s['metric']['phase'], s['value'][1]) for s in shares]}, GPUs {busy}\n"
                + "\n".join(run.log()[-3000:] for run in self.runs.values())
            ) from None


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judged]:
    work = tmp_path_factory.mktemp("e2e-goodput")
    harness = load_harness()
    stoppers: list[Any] = []
    try:
        lib = harness.build_fake_nvml(work / "nvml-lib")
        nvml_config = work / "nvml.conf"
        gpu = harness.FakeGpu
        busy = {"sm_util": 96.0, "sm_occupancy": 60.0, "any_tensor_util": 85.0}
        idle = {"sm_util": 2.0, "sm_occupancy": 1.0, "any_tensor_util": 0.0}
        harness.FakeNvml(
            gpus=[
                gpu(uuid=BUSY_GPU, util_gpu=100, gpm={**harness.DEFAULT_GPM_RATES, **busy}),
                gpu(uuid=IDLE_GPU, name=UNKNOWN_MODEL, util_gpu=3, gpm={**harness.DEFAULT_GPM_RATES, **idle}),
            ]
        ).write(nvml_config)
        poller = harness.PollerProcess(lib, nvml_config, work, node=NODE)
        stoppers.append(poller.stop)
        runs = {name: Run(work, name, jobs) for name, jobs in PROCESSES.items()}
        stoppers += [run.stop for run in runs.values()]
        stoppers += [run.terminate for run in runs.values()]  # all told first, then each waited for

        sink = WebhookSink()
        stoppers.append(sink.stop)
        sink_url = sink.url
        receivers = ReceiverUrls(
            page=f"{sink_url}/page",
            chat=f"{sink_url}/chat",
            low_priority=f"{sink_url}/low-priority",
            heartbeat=f"{sink_url}/heartbeat",
        )
        alertmanager = start_alertmanager(work / "alertmanager", alertmanager_config_without_waits(receivers))
        stoppers.append(alertmanager.stop)

        poller.wait_ready()
        for run in runs.values():
            run.wait_ready()
        targets = [pod_target(poller.port, "monitoring", "gpu-poller-e2e", CFG.gpu_poller_service)]
        targets += [
            pod_target(run.port, "training", f"train-{name}", CFG.training_job_service) for name, run in runs.items()
        ]
        prometheus = annotated_pods_prometheus(
            work, targets, rules_with_short_for(), alertmanagers=[f"127.0.0.1:{alertmanager.port}"]
        )
        stoppers.append(prometheus.stop)
        prometheus.start()
        yield Judged(prometheus, sink, runs)
    finally:
        for stop in reversed(stoppers):
            stop()


def test_a_run_whose_loader_sleeps_is_input_bound_and_told_what_to_change(judged: Judged) -> None:
    judged.wait_verdict("sleepy-loader", goodput.VERDICT_INPUT)
    share = judged.value(f'{goodput.PHASE_SHARE.record}{{job_id="sleepy-loader", phase="data_wait"}}')
    assert share is not None and share > CFG.thresholds.training_data_wait_ratio.value
    goodput_now = judged.value(f'{goodput.GOODPUT.record}{{job_id="sleepy-loader"}}')
    assert goodput_now is not None and goodput_now < 1 - share + 1e-9
    alert = wait_until(
        "TrainingInputBound firing",
        lambda: [a for a in judged.prometheus.api.get("/api/v1/alerts")["alerts"]
                 if a["labels"]["alertname"] == "TrainingInputBound" and a["state"] == "firing"],
        WAIT,
    )  # fmt: skip
    assert [a["labels"]["job_id"] for a in alert] == ["sleepy-loader"]
    assert alert[0]["labels"]["severity"] == "info"
    description = alert[0]["annotations"]["description"]
    assert "Job sleepy-loader (mlp)" in description and "num_workers" in description and "prefetch" in description
    wait_until(
        "TrainingInputBound at the low-priority receiver", lambda: judged.sink.receivers_of("TrainingInputBound")
    )
    assert judged.sink.receivers_of("TrainingInputBound") == {"low-priority"}


def test_large_matmuls_with_a_prefetched_loader_are_compute_saturated_without_gpu_evidence(judged: Judged) -> None:
    judged.wait_verdict("big-matmuls", goodput.VERDICT_COMPUTE)
    assert judged.query(f'{goodput.GPU_BUSY.record}{{job_id="big-matmuls"}}') == []  # no GPU evidence
    assert judged.query(f'{goodput.MFU.record}{{job_id="big-matmuls"}}') == []  # no GPUs: no peak
    achieved = f'{goodput.ACHIEVED_FLOPS.record}{{job_id="big-matmuls", precision="fp32"}}'
    assert wait_until("big-matmuls' model FLOP/s", lambda: judged.value(achieved), WAIT) > 0
    # Every step counted the FLOPs PyTorch's counter found in the first: the model's analytic count
    # (Wide(64, 1024, 8) on batches of 32: forward, weight gradients, input gradients but the first).
    batch, layers = 32, [(64, 1024), *[(1024, 1024)] * 8, (1024, 4)]
    forward = sum(2 * batch * fan_in * fan_out for fan_in, fan_out in layers)
    analytic = 2 * forward + sum(2 * batch * fan_in * fan_out for fan_in, fan_out in layers[1:])
    flops, steps = catalog.TRAINING_MODEL_FLOPS_TOTAL.name, catalog.TRAINING_STEPS_TOTAL.name
    per_step = judged.value(f'{flops}{{job_id="big-matmuls"}} / ignoring (precision) {steps}{{job_id="big-matmuls"}}')
    assert per_step == pytest.approx(analytic, rel=0.01)


def test_a_checkpoint_after_every_step_is_checkpoint_bound_and_its_storage_is_priced(judged: Judged) -> None:
    judged.wait_verdict("checkpoint-heavy", goodput.VERDICT_CHECKPOINT)
    assert "checkpoint-heavy" not in {
        a["labels"].get("job_id") for a in judged.prometheus.api.get("/api/v1/alerts")["alerts"]
        if a["labels"]["alertname"] == "TrainingInputBound"
    }  # fmt: skip
    written = judged.value(f'{goodput.CHECKPOINT_BYTES.record}{{job_id="checkpoint-heavy"}}')
    assert written is not None and written >= 16 * 1024 * 1024
    at = judged.query(f'{goodput.CHECKPOINT_BYTES.record}{{job_id="checkpoint-heavy"}}')[0]["value"][0]
    (bytes_then,) = judged.prometheus.api.query(f'{goodput.CHECKPOINT_BYTES.record}{{job_id="checkpoint-heavy"}}', at)
    (cost,) = judged.prometheus.api.query(f'{goodput.CHECKPOINT_STORAGE_COST}{{job_id="checkpoint-heavy"}}', at)
    months = CFG.checkpoint_retention_days * 86400 / goodput.SECONDS_PER_MONTH
    expected = float(bytes_then["value"][1]) / 1e9 * CFG.checkpoint_storage_price_per_gb_month * months
    assert float(cost["value"][1]) == pytest.approx(expected, rel=1e-9)


def test_a_job_on_busy_gpm_gpus_without_data_waits_is_compute_saturated_with_an_mfu(judged: Judged) -> None:
    judged.wait_verdict("busy-gpu", goodput.VERDICT_COMPUTE)
    (busy,) = judged.query(f'{goodput.GPU_BUSY.record}{{job_id="busy-gpu"}}')
    assert busy["metric"]["source"] == "gpm_sm_active" and float(busy["value"][1]) == pytest.approx(96, abs=1)
    data_wait = judged.value(f'{goodput.PHASE_SHARE.record}{{job_id="busy-gpu", phase="data_wait"}}')
    assert data_wait is not None and data_wait < CFG.thresholds.training_data_wait_ratio.value
    mfu = wait_until("busy-gpu's MFU", lambda: judged.value(f'{goodput.MFU.record}{{job_id="busy-gpu"}}'), WAIT)
    assert 0 < mfu < 1
    peak = CFG.peak_flops.peak("NVIDIA H100 80GB HBM3", "fp32")
    assert peak is not None
    # MFU over the FLOP/s achieved, both read at one instant (one query: the job's pace moves
    # between evaluations): the inverse of the GPU's peak. Asked again until an instant falls
    # outside the moment between the two records' writes of one evaluation.
    ratio = (
        f'{goodput.MFU.record}{{job_id="busy-gpu"}} / on (model_type, job_id) '
        f'sum by (model_type, job_id) ({goodput.ACHIEVED_FLOPS.record}{{job_id="busy-gpu"}})'
    )

    def inverse_peak() -> float | None:
        value = judged.value(ratio)
        return value if value is not None and value == pytest.approx(1 / peak, rel=1e-9) else None

    wait_until("busy-gpu's MFU as its achieved FLOP/s over the peak", inverse_peak, WAIT)


def test_a_job_holding_an_idle_gpu_is_underutilized_and_its_unknown_model_has_no_mfu(judged: Judged) -> None:
    judged.wait_verdict("idle-gpu", goodput.VERDICT_UNDERUTILIZED)
    compute = judged.value(f'{goodput.PHASE_SHARE.record}{{job_id="idle-gpu", phase="compute"}}')
    assert compute is not None and compute > CFG.thresholds.training_compute_saturated_ratio.value  # busy by its clock
    assert judged.query(f'{goodput.MFU.record}{{job_id="idle-gpu"}}') == []
    unknown = judged.query(goodput.UNKNOWN_GPU_MODELS.record)
    assert [(s["metric"]["gpu_name"], s["value"][1]) for s in unknown] == [(UNKNOWN_MODEL, "1")]
    flops = judged.query(f'{catalog.TRAINING_MODEL_FLOPS_TOTAL.name}{{job_id="idle-gpu"}}')
    assert flops and flops[0]["metric"]["precision"] == "fp32"  # the job reports FLOPs: only the peak is unknown


def test_gpu_hours_are_counted_by_verdict(judged: Judged) -> None:
    judged.wait_verdict("busy-gpu", goodput.VERDICT_COMPUTE)
    judged.wait_verdict("idle-gpu", goodput.VERDICT_UNDERUTILIZED)
    by_verdict = wait_until(
        "GPUs held by verdict",
        lambda: {s["metric"]["verdict"]: float(s["value"][1]) for s in judged.query(goodput.VERDICT_GPUS)}
        if len(judged.query(goodput.VERDICT_GPUS)) == 2 else None,
        WAIT,
    )  # fmt: skip
    assert by_verdict == {goodput.VERDICT_COMPUTE: 1, goodput.VERDICT_UNDERUTILIZED: 1}
    assert judged.value(f'{goodput.VERDICT_GPU_HOURS_24H}{{verdict="{goodput.VERDICT_COMPUTE}"}}')


def test_the_phases_of_every_real_run_add_up_to_its_wall_time(judged: Judged) -> None:
    """Every second of each job is in one phase: at a scrape, the phase seconds of a run sum to the
    time since it started (the scrape's own timestamp minus the job's start time) within 2 %.
    Compared on the wall clock the job's start time is read from, not the phases' own clock."""
    phases, started = catalog.TRAINING_PHASE_SECONDS_TOTAL.name, catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS.name
    jobs = {job.split(":")[1] for runs in PROCESSES.values() for job in runs}
    expr = (
        f"sum by (job_id) ({phases}) / on (job_id) "
        f"((max by (job_id) (timestamp({started})) - max by (job_id) ({started})) > 10)"
    )  # runs older than 10 s, so the few milliseconds between a scrape's start and its render do not count
    ratios = wait_until(
        "every run scraped with its phases and start time",
        lambda: answer if len(answer := {s["metric"]["job_id"]: float(s["value"][1]) for s in judged.query(expr)}) == len(jobs) else None,
        WAIT,
    )  # fmt: skip
    assert set(ratios) == jobs
    assert all(0.98 <= ratio <= 1.02 for ratio in ratios.values()), ratios
