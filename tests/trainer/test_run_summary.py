"""The job's log: progress lines at the interval from the timer thread, and the end-of-run summary
with the rules' definitions (verdict, thresholds, peak table), without any code of the program's."""

from __future__ import annotations

import io
import itertools
import logging
import re
import sys
import time
from collections.abc import Iterator

import pytest

from foxhunt_trainer import TrainingMetrics, configure_logging
from foxhunt_trainer.contract import verdicts
from foxhunt_trainer.contract.peak_flops import DEFAULT_PEAK_FLOPS
from foxhunt_trainer.phases import PHASES
from foxhunt_trainer.ranks import RankInfo
from foxhunt_trainer.summary import (
    ProgressSettingsError,
    RunState,
    mfu,
    progress_interval,
    summary_records,
    time_left,
)
from foxhunt_trainer.trainer_env import GPU_MODEL_ENV, PROGRESS_SECONDS_ENV
from observability.config import ObservabilityConfig
from observability.rules import goodput

H100 = "NVIDIA H100 80GB HBM3"
FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def fields(line: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in FIELD.findall(line)}


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = configure_logging("logfmt", "DEBUG", stream=stream)
    try:
        yield stream
    finally:
        logging.getLogger().removeHandler(handler)


def lines(stream: io.StringIO, job_id: str) -> list[dict[str, str]]:
    return [
        fields(line)
        for line in stream.getvalue().splitlines()
        if "logger=foxhunt_trainer.summary" in line and f"job_id={job_id}" in line
    ]


def state(**kw: object) -> RunState:
    base: dict[str, object] = {"at": 10.0, "wall": 10.0, "phases": dict.fromkeys(PHASES, 0.0), "steps": 0}
    base.update(samples=0, flops={})
    base.update(kw)
    return RunState(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 60.0), ("", 60.0), ("0", None), ("off", None), ("OFF", None), ("2.5", 2.5)]
)
def test_the_progress_interval_is_60_seconds_by_default_and_0_or_off_turns_it_off(value, expected) -> None:
    assert progress_interval({} if value is None else {PROGRESS_SECONDS_ENV: value}) == expected


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf", "1e9"])
def test_a_bad_progress_interval_stops_the_job_before_it_starts_naming_the_variable(monkeypatch, value) -> None:
    with pytest.raises(ProgressSettingsError, match=rf"{PROGRESS_SECONDS_ENV}='{re.escape(value)}': expected"):
        progress_interval({PROGRESS_SECONDS_ENV: value})
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, value)
    with pytest.raises(ProgressSettingsError):
        TrainingMetrics().start_job("mlp", "bad-interval", gpu_uuids=[])


def test_progress_lines_come_at_the_interval_from_the_timer_thread_and_stop_at_the_end(log, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "0.3")
    job = TrainingMetrics().start_job("mlp", "paced", gpu_uuids=[])
    job.set_planned(steps=1000)
    started = time.monotonic()
    with job:
        while time.monotonic() - started < 1.65:
            with job.phase("data_wait"):
                time.sleep(0.004)
            with job.phase("compute"):
                time.sleep(0.004)
            job.record_step(samples=4)
    ran = time.monotonic() - started
    records = lines(log, "paced")
    progress = [r for r in records if r["msg"].startswith("progress:")]
    assert 4 <= len(progress) <= int(ran / 0.3) + 1, records
    stamps = [
        time.mktime(time.strptime(r["time"][:19], "%Y-%m-%dT%H:%M:%S")) + float(r["time"][19:-1]) for r in progress
    ]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(0.2 <= gap <= 0.6 for gap in gaps), gaps
    first_summary = next(i for i, r in enumerate(records) if r["msg"].startswith("run summary:"))
    assert all(r["msg"].startswith("progress:") for r in records[:first_summary])
    assert not any(r["msg"].startswith("progress:") for r in records[first_summary:])
    last = progress[-1]
    assert int(last["step"]) > 0 and last["steps_planned"] == "1000"
    assert 200 < float(last["samples_per_second"]) < 1000  # 4 samples every ~8-10 ms
    assert float(last["seconds_left"]) > 0 and 0.2 < float(last["goodput"]) < 0.8
    time.sleep(0.7)
    assert lines(log, "paced") == records  # nothing after the end


def test_progress_off_logs_only_the_summary(log, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "off")
    with TrainingMetrics().start_job("mlp", "quiet", gpu_uuids=[]) as job:
        assert job.reporter is not None and job.reporter._thread is None  # no thread at all
        with job.phase("compute"):
            time.sleep(0.05)
        job.record_step(samples=1)
    assert [r["msg"].split(":")[0] for r in lines(log, "quiet")] == [
        "run summary",
        "verdict",
        "to change",
        "MFU",
        "events",
    ]


def test_the_summary_has_the_shares_verdict_advice_mfu_and_events_of_the_run(log, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "off")
    monkeypatch.setenv(GPU_MODEL_ENV, "NVIDIA H100 80GB HBM3")
    job = TrainingMetrics().start_job("mlp", "summarised", gpu_uuids=["GPU-0000-summary"])
    job.set_model_flops(2e12, "bf16")
    with job:
        for _ in range(5):
            with job.phase("data_wait"):
                time.sleep(0.03)
            with job.phase("compute"):
                time.sleep(0.01)
            job.record_step(samples=8)
        job.record_nan_detection("loss")
        job.record_rollback()
        job.record_checkpoint_save(True, 0.25, 4_000_000)
        job.record_checkpoint_save(False, 0.1, None)
        final = job.run_state()
    records = {r["msg"].split(":")[0]: r for r in lines(log, "summarised")}
    head = records["run summary"]
    shares = final.shares
    assert shares is not None
    assert head["status"] == "completed" and head["steps"] == "5" and head["samples"] == "40"
    assert float(head["goodput"]) == pytest.approx(shares["compute"], abs=0.02)
    assert float(head["badput_data_wait"]) == pytest.approx(shares["data_wait"], abs=0.02)
    assert sum(float(head[f"badput_{p}"]) for p in PHASES if p != "compute") + float(head["goodput"]) == pytest.approx(
        1, abs=1e-5
    )
    assert records["verdict"]["verdict"] == verdicts.INPUT_BOUND.name
    assert records["to change"]["msg"] == f"to change: {verdicts.INPUT_BOUND.change}"
    peak = DEFAULT_PEAK_FLOPS.peak("NVIDIA H100 80GB HBM3", "bf16")
    assert peak is not None
    wall = float(head["wall_seconds"])
    assert float(records["MFU"]["mfu"]) == pytest.approx(5 * 2e12 / wall / peak, rel=0.02)
    assert "bf16 peak of 1 x NVIDIA H100 80GB HBM3" in records["MFU"]["msg"]
    events = records["events"]
    assert (events["nan_events"], events["rollbacks"], events["checkpoints_saved"]) == ("1", "1", "1")
    assert (events["checkpoint_failures"], events["checkpoint_bytes"]) == ("1", "4000000")
    assert float(events["checkpoint_seconds"]) == 0.25


def test_only_rank_0_prints_the_summary_and_other_ranks_log_their_phases_at_debug(log, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "off")
    metrics = TrainingMetrics()
    with metrics.start_job("mlp", "ranked", gpu_uuids=[], rank=RankInfo(rank=1, world_size=2)) as job:
        job.record_step(samples=1)
    records = lines(log, "ranked")
    assert [(r["level"], r["msg"]) for r in records] == [("debug", "rank 1 phases")]
    assert set(PHASES) <= {k.removesuffix("_seconds") for k in records[0]}


def test_a_process_without_logging_still_shows_the_summary_on_stderr(capfd, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "off")
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        with TrainingMetrics().start_job("mlp", "bare", gpu_uuids=[]) as job:
            job.record_step(samples=1)
    finally:
        root.handlers[:] = saved
    err = capfd.readouterr().err
    assert "foxhunt model_type=mlp job_id=bare: run summary: completed" in err
    assert "verdict:" in err


@pytest.mark.parametrize(
    ("shares", "busy", "expected"),
    [
        ({"data_wait": 0.21, "compute": 0.79}, None, verdicts.INPUT_BOUND),
        ({"data_wait": 0.2, "compute": 0.8}, None, verdicts.UNDERUTILIZED),  # at the thresholds: not over
        ({"data_wait": 0.3, "checkpoint": 0.4, "compute": 0.3}, None, verdicts.CHECKPOINT_BOUND),  # largest wins
        ({"collective": 0.51, "compute": 0.49}, None, verdicts.COMMUNICATION_BOUND),
        ({"compute": 0.81}, None, verdicts.COMPUTE_SATURATED),
        ({"compute": 0.81}, 81.0, verdicts.COMPUTE_SATURATED),
        ({"compute": 0.81}, 80.0, verdicts.UNDERUTILIZED),  # busy by its clock, its GPUs idle
        (None, 90.0, verdicts.COMPUTE_SATURATED),
        (None, 10.0, verdicts.UNDERUTILIZED),
        (None, None, None),
    ],
)
def test_the_python_verdict_follows_the_rules_definition(shares, busy, expected) -> None:
    assert verdicts.judge(shares, busy) == expected


def test_the_verdict_definitions_are_the_rules_and_dashboards_own() -> None:
    th = ObservabilityConfig().thresholds
    assert (
        verdicts.VerdictThresholds(
            th.training_data_wait_ratio.value,
            th.training_checkpoint_ratio.value,
            th.training_communication_share_ratio.value,
            th.training_compute_saturated_ratio.value,
            th.training_compute_saturated_gpu_busy_percent.value,
        )
        == verdicts.DEFAULT_THRESHOLDS
    )
    assert tuple(v.name for v in verdicts.VERDICTS) == goodput.VERDICTS
    assert ObservabilityConfig().peak_flops is DEFAULT_PEAK_FLOPS


def test_time_left_follows_the_pace_of_the_last_interval() -> None:
    before = state(at=10.0, wall=10.0, steps=100, steps_planned=1000)
    now = state(at=20.0, wall=20.0, steps=300, steps_planned=1000)
    assert time_left(before, now) == pytest.approx(700 / 20)  # 200 steps in 10 s
    assert time_left(None, state(wall=20.0, epoch=2, epochs_planned=10)) == pytest.approx(80)
    assert time_left(None, state(wall=30.0, progress_percent=25.0)) == pytest.approx(90)
    assert time_left(None, state(wall=30.0)) is None


def test_mfu_is_absent_unless_every_gpu_has_a_peak_at_every_precision() -> None:
    run = state(wall=10.0, flops={"fp16": 1e15})
    assert mfu(run, []).value is None
    assert "not known" in mfu(run, [None]).reason
    assert mfu(run, ["NVIDIA H100 80GB HBM3", "NVIDIA Z999"]).value is None
    assert mfu(state(wall=10.0, flops={"bf16": 1e15}), ["Tesla T4"]).value is None  # T4 has no bf16 peak
    both = mfu(run, ["NVIDIA H100 80GB HBM3"] * 2)
    assert both.value == pytest.approx(1e14 / (2 * 989.4e12))


def test_a_mig_device_has_its_gpus_peak_scaled_by_its_compute_slices_as_in_the_rules() -> None:
    run = state(wall=10.0, flops={"bf16": 1e15})
    one_slice = mfu(run, [f"{H100} MIG 1g.10gb"])
    assert one_slice.value == pytest.approx(1e14 / (989.4e12 / 7))
    three = mfu(run, [f"{H100} MIG 3g.40gb", f"{H100} MIG 1c.3g.40gb"])  # a compute instance of one slice
    assert three.value == pytest.approx(1e14 / (989.4e12 * 4 / 7))
    assert mfu(run, [f"{H100} MIG mystery"]).value is None  # a profile that does not say: no MFU, not a guess
    assert DEFAULT_PEAK_FLOPS.peak(f"{H100} MIG 7g.80gb", "bf16") == DEFAULT_PEAK_FLOPS.peak(H100, "bf16")


def test_a_summary_before_any_time_is_counted_says_so() -> None:
    records = summary_records(state(wall=0.0), "completed")
    assert records[0][0] == "run summary: completed after 0.0s; no time counted"
    assert records[1][1]["verdict"] == "none"


@pytest.mark.parametrize(
    ("compute", "verdict", "gpu_words"),
    [(0.3, "underutilized", "its GPUs are mostly idle"), (0.97, "compute-saturated", "its GPUs are busy")],
)
def test_a_job_holding_no_gpu_is_not_told_about_its_gpus(compute, verdict, gpu_words) -> None:
    phases = {**dict.fromkeys(PHASES, 0.0), "compute": 10.0 * compute, "idle": 10.0 * (1 - compute)}
    held = summary_records(state(phases=phases), "completed", gpu_names=["NVIDIA H100 80GB HBM3"])
    alone = summary_records(state(phases=phases), "completed")  # a CPU-only job: no GPU held
    assert held[1][1]["verdict"] == alone[1][1]["verdict"] == verdict
    assert gpu_words in held[1][0]
    assert gpu_words not in alone[1][0] and "GPUs" not in alone[1][0]
    assert alone[1][0].endswith("; it holds no GPU (judged on its time split alone)")


class FakeNvml:
    """The few NVML calls the summary makes, answering for the GPUs given (name, utilization)."""

    def __init__(self, gpus: dict[str, tuple[str, int]]) -> None:
        self.gpus, self.calls = gpus, 0
        self.shut_down = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return self.gpus[handle][0].encode()

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> object:
        self.calls += 1
        return type("Utilization", (), {"gpu": self.gpus[handle][1], "memory": 0})()


@pytest.mark.parametrize(("busy", "verdict"), [(95, verdicts.COMPUTE_SATURATED), (10, verdicts.UNDERUTILIZED)])
def test_nvml_utilization_is_the_gpu_evidence_and_the_model_names_the_peak(log, monkeypatch, busy, verdict) -> None:
    """A job computing all the time is compute-saturated only on busy GPUs (the rules' NVML
    fallback evidence, sampled by the timer thread); the GPU model NVML names finds the MFU peak."""
    uuid = "GPU-0000-nvml-fake"
    nvml = FakeNvml({uuid: (H100, busy)})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "0.2")
    monkeypatch.delenv(GPU_MODEL_ENV, raising=False)
    job = TrainingMetrics().start_job("mlp", f"nvml-{busy}", gpu_uuids=[uuid])
    job.set_model_flops(1e12, "fp32")
    with job:
        job.record_step(samples=1)
        with job.phase("compute"):
            time.sleep(0.7)
        job.record_step(samples=1)
    records = {r["msg"].split(":")[0]: r for r in lines(log, f"nvml-{busy}")}
    assert records["verdict"]["verdict"] == verdict.name
    assert float(records["verdict"]["gpu_busy_percent"]) == busy
    assert nvml.calls >= 3 and nvml.shut_down  # every tick and the finish sampled; NVML closed
    assert f"fp32 peak of 1 x {H100}" in records["MFU"]["msg"]
