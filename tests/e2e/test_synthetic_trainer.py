"""The synthetic trainer: folds, checkpoints and faults on demand, in process and as a CLI."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from examples.synthetic_trainer.faults import FaultPlan
from examples.synthetic_trainer.job import SyntheticTrainer, TrainerSettings
from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from harness.trainer_process import TrainerProcess


def run(tmp_path: Path, faults: FaultPlan | None = None, **settings: Any) -> tuple[str, TrainingMetrics]:
    metrics = TrainingMetrics()
    config = TrainerSettings(job_id="j1", checkpoint_dir=tmp_path, **{"epoch_seconds": 0.0, **settings})
    job = metrics.start_job(config.model_type, config.job_id, folds_planned=config.folds)
    status = SyntheticTrainer(config, faults or FaultPlan(), job, threading.Event()).run()
    job.finish(status)
    return status, metrics


def sample(metrics: TrainingMetrics, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(render_text(metrics.registry).decode()):
        for s in family.samples:
            if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError(f"no sample {name}{labels}")


def test_a_clean_run_trains_every_fold_and_saves_checkpoints(tmp_path):
    status, metrics = run(tmp_path, folds=3, epochs_per_fold=4, checkpoint_every=2, checkpoint_bytes=1000)
    assert status == "completed"
    job = {"job_id": "j1", "model_type": "dqn"}
    assert sample(metrics, catalog.TRAINING_FOLDS_COMPLETED_TOTAL.name, **job) == 3
    assert {f.name for f in tmp_path.iterdir()} == {
        f"j1-fold{fold}-epoch{epoch}.ckpt" for fold, epoch in ((0, 2), (0, 4), (1, 6), (1, 8), (2, 10), (2, 12))
    }
    assert all(f.stat().st_size == 1000 for f in tmp_path.iterdir())
    assert sample(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **job) == 6
    assert sample(metrics, catalog.TRAINING_PROGRESS_PERCENT.name, **job) == 100
    assert sample(metrics, catalog.TRAINING_CURRENT_EPOCH.name, **job) == 12
    assert sample(metrics, catalog.TRAINING_ITERATION_SECONDS.count, **job) == 12
    assert sample(metrics, catalog.TRAINING_DATA_LOADING_SECONDS.count, model_type="dqn") == 3
    assert sample(metrics, catalog.TRAINING_DATA_BATCHES_TOTAL.name, **job) == 12 * 32
    assert sample(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="completed") == 1
    first, last = (sample(metrics, catalog.TRAINING_FOLD_LOSS.name, **job, fold=str(f)) for f in (0, 2))
    assert last < first  # later folds start better
    assert 0 < sample(metrics, catalog.MODEL_ACCURACY.name, **job) <= 1
    assert sample(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="loss") == 0


def test_scheduled_faults_nan_and_checkpoint_failure(tmp_path):
    faults = FaultPlan(nan_epochs=frozenset({3}), nan_tensor="gradient", checkpoint_failure_epochs=frozenset({4}))
    status, metrics = run(tmp_path, faults, folds=1, epochs_per_fold=4, checkpoint_every=2)
    assert status == "completed"
    job = {"job_id": "j1", "model_type": "dqn"}
    assert sample(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="gradient") == 1
    assert sample(metrics, catalog.TRAINING_ITERATION_SECONDS.count, **job) == 3  # the NaN step is skipped
    assert sample(metrics, catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name, **job, error_type="io_error") == 1
    assert sample(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **job) == 1
    assert [f.name for f in tmp_path.iterdir()] == ["j1-fold0-epoch2.ckpt"]


def test_stop_on_nan_fails_the_job(tmp_path):
    status, metrics = run(tmp_path, FaultPlan(nan_epochs=frozenset({2})), folds=2, epochs_per_fold=3, stop_on_nan=True)
    assert status == "failed"
    assert sample(metrics, catalog.TRAINING_FAILURES_TOTAL.name, model_type="dqn", error_type="nan") == 1
    assert sample(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="failed") == 1
    assert sample(metrics, catalog.TRAINING_JOB_DURATION_SECONDS.count, model_type="dqn", status="failed") == 1


def test_slowdown_stretches_epochs_and_lowers_the_speed(tmp_path):
    faults = FaultPlan(slowdown_from_epoch=3, slowdown_factor=6.0)
    started = time.monotonic()
    _, metrics = run(tmp_path, faults, folds=1, epochs_per_fold=3, epoch_seconds=0.05)
    assert time.monotonic() - started >= 0.05 * 2 + 0.05 * 6
    speed = sample(metrics, catalog.TRAINING_EPOCHS_PER_SECOND.name, job_id="j1")
    assert speed < 1 / 0.25  # the last (slow) epoch took at least 0.3 s


def test_signal_requests_are_consumed_once():
    faults = FaultPlan()
    faults.request_nan()
    faults.request_checkpoint_failure()
    assert faults.nan_now(7) and not faults.nan_now(8)
    assert faults.checkpoint_fails_now(7) and not faults.checkpoint_fails_now(8)


@pytest.mark.parametrize("settings", [{"slowdown_factor": 0.5}, {"nan_tensor": "weights"}])
def test_fault_plan_rejects_nonsense(settings):
    with pytest.raises(ValueError):
        FaultPlan(**settings)


def scraped(trainer: TrainerProcess, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(trainer.scrape()):
        for s in family.samples:
            if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def wait_value(trainer: TrainerProcess, expected: float, name: str, *, timeout: float = 20.0, **labels: str) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = scraped(trainer, name, **labels)
        if last == expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name}{labels} = {last}, expected {expected}\n{trainer.log()}")


def test_the_cli_serves_metrics_and_takes_faults_by_signal(start_trainer):
    trainer = start_trainer(
        "--job-id",
        "cli-job",
        "--model-type",
        "ppo",
        "--folds",
        "100",
        "--epoch-seconds",
        "0.05",
        "--checkpoint-every",
        "1",
    )
    job = {"model_type": "ppo", "job_id": "cli-job"}
    assert scraped(trainer, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="loss") == 0
    trainer.signal(signal.SIGUSR1)
    wait_value(trainer, 1, catalog.TRAINING_NAN_COUNT.name, model_type="ppo", job_id="cli-job", tensor_type="loss")
    trainer.signal(signal.SIGUSR2)
    wait_value(
        trainer,
        1,
        catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name,
        model_type="ppo",
        job_id="cli-job",
        error_type="io_error",
    )
    assert trainer.stop() == 1  # SIGTERM: the job ends as stopped
    assert 'msg="job finished" job_id=cli-job model_type=ppo status=stopped' in trainer.log()


def test_the_cli_traces_to_the_otlp_endpoint_of_the_job_template(start_trainer, otlp_collector):
    collector, port = otlp_collector
    trainer = start_trainer(
        "--folds",
        "1",
        "--epochs-per-fold",
        "2",
        "--epoch-seconds",
        "0",
        "--linger",
        "-1",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"},
    )
    wait_value(trainer, 1, catalog.TRAINING_JOBS_BY_STATUS.name, status="completed")
    assert trainer.stop() == 0  # the provider flushes its spans at exit
    for name in ("epoch", "checkpoint_save", "data_load", "fold", "training_job"):
        assert collector.wait_for_span(name)["service.name"] == "synthetic-trainer"


@pytest.mark.slow
def test_the_local_prometheus_config_is_valid_for_promtool(tmp_path):
    from examples.local_prometheus import main

    assert main([str(tmp_path), "--poller", "127.0.0.1:9400"]) == 0
    done = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rules found" in done.stdout
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    labels = {job["job_name"]: job["static_configs"][0]["labels"]["service"] for job in config["scrape_configs"]}
    assert labels == {"synthetic-trainer": "training-job", "gpu-poller": "gpu-poller"}


def test_the_local_try_out_fires_ml_training_service_down_after_30_seconds(tmp_path):
    """docs/trainer.md: in the local try-out MLTrainingServiceDown fires after 30 s (no training service is
    scraped there, so `absent(up{service="ml-training-service"})` holds for the alert's `for`)."""
    from examples.local_prometheus import main

    assert main([str(tmp_path)]) == 0
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    services = {job["static_configs"][0]["labels"]["service"] for job in config["scrape_configs"]}
    assert "ml-training-service" not in services
    groups = yaml.safe_load((tmp_path / "rules.yml").read_text())["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == "MLTrainingServiceDown"]
    assert 'absent(up{service="ml-training-service"})' in rule["expr"]
    assert rule["for"] == "30s"
