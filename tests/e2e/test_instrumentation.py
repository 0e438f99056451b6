"""foxhunt_trainer: exposed names equal the catalog's, per-job children, the helpers, the server."""

from __future__ import annotations

import http.client
import math
import re
import threading
import time

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer import (
    CHECKPOINT_ERROR_TYPES,
    FAILURE_ERROR_TYPES,
    JOB_STATUSES,
    NAN_TENSOR_TYPES,
    OPENMETRICS,
    TEXT,
    TrainingMetrics,
    render_openmetrics,
    render_text,
)
from foxhunt_trainer.collectives import CollectiveCollector, track_rank
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import MetricType, Producer
from foxhunt_trainer.contract.exposition import ScrapeLog, format_value
from foxhunt_trainer.server import final_scrape_wait_from_env
from foxhunt_trainer.trainer_env import FINAL_SCRAPE_WAIT_ENV

from .conftest import http_get

TRAINING_METRICS = catalog.by_producer(Producer.TRAINING_JOB)
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)


def exercised() -> TrainingMetrics:
    """Metrics of a job that has done everything once, so every family has samples."""
    metrics = TrainingMetrics()
    job = metrics.start_job(
        "dqn", "job-1", folds_planned=3, workers=2, gpu_uuids=["GPU-00000000-0000-0000-0000-000000000000"]
    )
    job.record_training_iteration(1, 0.9, 1.0, 0.5)
    job.record_training_iteration(2, 0.7, 0.8, 0.25)
    job.set_progress(40)
    job.record_nan_detection("gradient")
    job.record_gradient_explosion()
    job.record_failure("oom")
    job.record_checkpoint_save(True, 1.5, 1024)
    job.record_checkpoint_save(False, 0.1, 0, "timeout")
    job.record_data_load(0.3, batches=8)
    job.record_feature_engineering_error("schema")
    job.record_fold(0, 0.7, 0.8, 2, 12.0)
    job.set_model_quality(accuracy=0.9, f1=0.85, precision=0.88, recall=0.82)
    job.set_regression_quality(rmse=0.4, mae=0.3, r2=0.75)
    job.set_resource_usage(2e9, 150.0)
    job.record_step(samples=32, tokens=4096)
    collectives = track_rank(job, node="node-1")  # a distributed rank: its placement and collectives
    collectives.launched("all_reduce")
    collectives.completed("all_reduce", 4096)
    job.rl.set_exploration_rate(0.4)
    job.rl.set_q_value(12.5)
    job.rl.record_policy_update(entropy=0.6, value_loss=3.0, approx_kl=0.01, clip_fraction=0.1, explained_variance=0.5)
    job.rl.record_episodes(3, mean_reward=21.0, mean_length=21.0)
    study = job.study("lr-search")
    study.trial_started(0)
    study.record_trial_progress(0, 1, 0.8)
    study.record_trial_end("complete", 1, 0.8)
    study.set_trial_counts({"complete": 1})
    study.set_best_value(0.8)
    job.finish("completed")
    return metrics


def samples(metrics: TrainingMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every exposed sample by (name as exposed, labels), read from the text lines themselves."""
    out = {}
    for family in text_string_to_metric_families(render_text(metrics.registry).decode()):
        for s in family.samples:
            # The parser renames counter samples that lack `_total`; keep the exposed name.
            name = s.name
            if family.type == "counter" and not family.name.endswith("_total"):
                exposed = [m.name for m in TRAINING_METRICS if m.name in (family.name, family.name + "_total")]
                name = exposed[0]
            out[(name, frozenset(s.labels.items()))] = s.value
    return out


def value(metrics: TrainingMetrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, frozenset(labels.items()))]


def test_every_exposed_family_is_the_catalog_family_with_its_type_and_help():
    text = render_text(exercised().registry).decode()
    exposed = dict(TYPE_LINE.findall(text))
    expected = {m.name: ("gauge" if m.type is MetricType.INFO else m.type.value) for m in TRAINING_METRICS}
    assert exposed == expected
    for metric in TRAINING_METRICS:
        assert f"# HELP {metric.name} {metric.help}\n" in text
    assert "_created" not in text


def test_the_counter_without_total_is_exposed_under_the_name_users_know():
    text = render_text(exercised().registry).decode()
    assert "# TYPE ml_training_nan_count counter" in text
    sample_names = {line.split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert catalog.TRAINING_NAN_COUNT.name in sample_names
    assert catalog.TRAINING_NAN_COUNT.name + "_total" not in sample_names


def test_parsed_back_every_family_and_label_set_is_the_catalogs():
    families = list(text_string_to_metric_families(render_text(exercised().registry).decode()))
    parsed = {}
    for family in families:
        # prometheus-client's parser names a counter family without `_total`.
        metric = catalog.by_name(
            family.name + "_total"
            if family.type == "counter" and family.name + "_total" in {m.name for m in TRAINING_METRICS}
            else family.name
        )
        parsed[metric.name] = family
        assert family.type == ("gauge" if metric.type is MetricType.INFO else metric.type.value)
        assert family.documentation == metric.help
        for s in family.samples:
            extra = {"le"} if s.name == metric.name + "_bucket" else set()
            assert set(s.labels) == set(metric.labels) | extra, (s.name, s.labels)
    assert set(parsed) == {m.name for m in TRAINING_METRICS}


def test_every_training_job_metric_of_the_catalog_has_a_recorder():
    """The job's registry records every training-job family but the distributed rank's, which
    `collectives.track_rank` adds for a rank that takes part in collectives."""
    distributed = {*CollectiveCollector.FAMILIES, catalog.TRAINING_RANK_PLACEMENT_INFO}
    recorded = {m.name for m in (*TrainingMetrics().catalog_metrics, *distributed)}
    assert recorded == {m.name for m in TRAINING_METRICS}


def test_histograms_use_the_catalog_buckets():
    text = render_text(exercised().registry).decode()
    for metric in (m for m in TRAINING_METRICS if m.type is MetricType.HISTOGRAM):
        les = {float(x) for x in re.findall(rf'^{metric.bucket}{{[^}}]*le="([^"]+)"', text, re.MULTILINE)}
        assert les == {*metric.buckets, math.inf}, metric.name


def test_starting_a_job_exposes_its_counters_at_zero_before_any_event():
    metrics = TrainingMetrics()
    assert not any("job-7" in line for line in render_text(metrics.registry).decode().splitlines())
    metrics.start_job("ppo", "job-7", folds_planned=4)
    job = {"model_type": "ppo", "job_id": "job-7"}
    for tensor_type in NAN_TENSOR_TYPES:
        assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type=tensor_type) == 0
    for error_type in CHECKPOINT_ERROR_TYPES:
        assert value(metrics, catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name, **job, error_type=error_type) == 0
    for error_type in FAILURE_ERROR_TYPES:
        assert value(metrics, catalog.TRAINING_FAILURES_TOTAL.name, **job, error_type=error_type) == 0
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **job) == 0
    assert value(metrics, catalog.TRAINING_ITERATION_SECONDS.count, **job) == 0
    assert value(metrics, catalog.TRAINING_FOLDS_PLANNED.name, **job) == 4
    assert value(metrics, catalog.TRAINING_PROGRESS_PERCENT.name, **job) == 0
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="running") == 1
    # Loss gauges have no value yet: a 0 would read as a perfect model.
    assert not any(k[0] == catalog.TRAINING_LOSS.name for k in samples(metrics))


def test_record_training_iteration_sets_losses_epoch_speed_convergence_and_duration():
    metrics = TrainingMetrics()
    metrics.record_training_iteration("dqn", "j", 1, 0.9, 1.1, 0.5)
    metrics.record_training_iteration("dqn", "j", 2, 0.6, 0.8, 0.25)
    job = {"model_type": "dqn", "job_id": "j"}
    assert value(metrics, catalog.TRAINING_LOSS.name, **job) == 0.6
    assert value(metrics, catalog.TRAINING_VALIDATION_LOSS.name, **job) == 0.8
    assert value(metrics, catalog.TRAINING_CURRENT_EPOCH.name, **job) == 2
    assert value(metrics, catalog.TRAINING_EPOCHS_PER_SECOND.name, **job) == 4.0
    assert value(metrics, catalog.TRAINING_CONVERGENCE_RATE.name, **job) == pytest.approx(-0.3)
    assert value(metrics, catalog.TRAINING_ITERATION_SECONDS.count, **job) == 2
    assert value(metrics, catalog.TRAINING_ITERATION_SECONDS.sum, **job) == 0.75
    assert value(metrics, catalog.TRAINING_ITERATION_SECONDS.bucket, **job, le="0.25") == 1
    assert value(metrics, catalog.TRAINING_ITERATION_SECONDS.bucket, **job, le="0.5") == 2


def test_a_nan_loss_does_not_poison_the_convergence_rate():
    metrics = TrainingMetrics()
    metrics.record_training_iteration("dqn", "j", 1, 0.9, 1.0, 1.0)
    metrics.record_training_iteration("dqn", "j", 2, float("nan"), 1.0, 1.0)
    metrics.record_training_iteration("dqn", "j", 3, 0.5, 1.0, 1.0)
    assert not any(k[0] == catalog.TRAINING_CONVERGENCE_RATE.name for k in samples(metrics))
    assert "ml_training_loss{" in render_text(metrics.registry).decode()
    # The NaN loss counted by itself, without a check in the caller.
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, model_type="dqn", job_id="j", tensor_type="loss") == 1


def test_record_nan_detection_counts_by_tensor_type():
    metrics = TrainingMetrics()
    metrics.record_nan_detection("mamba", "j", "loss")
    metrics.record_nan_detection("mamba", "j", "loss")
    metrics.record_nan_detection("mamba", "j", "gradient")
    job = {"model_type": "mamba", "job_id": "j"}
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="loss") == 2
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="gradient") == 1
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **job, tensor_type="activation") == 0


def test_record_checkpoint_save_success_and_failure():
    metrics = TrainingMetrics()
    metrics.record_checkpoint_save("tft", "j", True, 5.2, 512 * 1024 * 1024)
    metrics.record_checkpoint_save("tft", "j", False, 0.0, 0, "io_error")
    metrics.record_checkpoint_save("tft", "j", False, 0.0, 0)
    job = {"model_type": "tft", "job_id": "j"}
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **job) == 1
    assert value(metrics, catalog.CHECKPOINT_SIZE_BYTES.name, **job) == 512 * 1024 * 1024
    assert value(metrics, catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name, **job, error_type="io_error") == 2
    assert value(metrics, catalog.CHECKPOINT_SAVE_DURATION_SECONDS.count, **job) == 1


def test_folds_data_quality_and_resources():
    metrics = exercised()
    fold = {"model_type": "dqn", "job_id": "job-1", "fold": "0"}
    job = {"model_type": "dqn", "job_id": "job-1"}
    assert value(metrics, catalog.TRAINING_FOLD_VALIDATION_LOSS.name, **fold) == 0.8
    assert value(metrics, catalog.TRAINING_FOLD_EPOCH.name, **fold) == 2
    assert value(metrics, catalog.TRAINING_FOLD_DURATION_SECONDS.name, **fold) == 12.0
    assert value(metrics, catalog.TRAINING_FOLDS_COMPLETED_TOTAL.name, **job) == 1
    assert value(metrics, catalog.TRAINING_DATA_BATCHES_TOTAL.name, **job) == 8
    assert value(metrics, catalog.TRAINING_DATA_LOADING_SECONDS.count, **job) == 1
    assert value(metrics, catalog.FEATURE_ENGINEERING_ERRORS_TOTAL.name, model_type="dqn", error_type="schema") == 1
    assert value(metrics, catalog.MODEL_ACCURACY.name, **job) == 0.9
    assert value(metrics, catalog.TRAINING_CPU_USAGE_PERCENT.name, **job) == 150.0


def test_job_lifecycle_status_counts_and_duration():
    metrics = TrainingMetrics()
    first = metrics.start_job("dqn", "a", workers=3)
    metrics.start_job("ppo", "b")
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="running") == 2
    assert value(metrics, catalog.TRAINING_ACTIVE_WORKERS.name, model_type="dqn", job_id="a") == 3
    first.finish("failed")
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="running") == 1
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="failed") == 1
    assert value(metrics, catalog.TRAINING_ACTIVE_WORKERS.name, model_type="dqn", job_id="a") == 0
    assert value(metrics, catalog.TRAINING_JOB_DURATION_SECONDS.count, model_type="dqn", status="failed") == 1
    assert {k[1] for k in samples(metrics) if k[0] == catalog.TRAINING_JOBS_BY_STATUS.name} == {
        frozenset({("status", s)}) for s in JOB_STATUSES
    }


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda job: job.set_progress(101), "percentage"),
        (lambda job: job.set_status("exploded"), "unknown job status"),
        (lambda job: job.finish("running"), "finishes as one of"),
        (lambda job: job.set_model_quality(accuracy=1.5), "ratios 0-1"),
        (
            lambda job: job.record_training_iteration(1, 0.1, 0.1, -1.0),
            "duration_secs must be a finite number of seconds, at least 0",
        ),
        (lambda job: job.record_training_iteration(1, 0.1, 0.1, float("nan")), "finite number of seconds"),
        (lambda job: job.record_data_load(float("inf")), "seconds must be a finite number"),
        (lambda job: job.record_checkpoint_save(True, float("nan"), 1), "duration must be a finite number"),
    ],
)
def test_invalid_values_are_refused(call, message):
    job = TrainingMetrics().start_job("dqn", "j")
    with pytest.raises(ValueError, match=message):
        call(job)


def test_a_job_cannot_be_started_twice():
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "j")
    with pytest.raises(ValueError, match="already started"):
        metrics.start_job("dqn", "j")


def test_each_trainer_has_its_own_registry_and_the_global_one_is_untouched():
    one, two = TrainingMetrics(), TrainingMetrics()
    one.record_nan_detection("dqn", "j", "loss")
    assert value(one, catalog.TRAINING_NAN_COUNT.name, model_type="dqn", job_id="j", tensor_type="loss") == 1
    assert not any("job_id" in dict(k[1]) for k in samples(two))
    assert REGISTRY.get_sample_value(catalog.TRAINING_NAN_COUNT.name, {"job_id": "j"}) is None
    assert all(not f.name.startswith("ml_") for f in REGISTRY.collect())


@pytest.mark.parametrize(
    ("number", "text"),
    [(float("nan"), "NaN"), (float("inf"), "+Inf"), (-math.inf, "-Inf"), (3.0, "3.0"), (0.1, "0.1"), (1e21, "1e+21")],
)
def test_format_value(number, text):
    assert format_value(number) == text


PROMETHEUS_ACCEPT = (  # what Prometheus 2.42 sends with every scrape
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def get(port: int, accept: str | None) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type") or ""
    finally:
        connection.close()


def test_metrics_server_serves_openmetrics_to_who_asks_and_the_text_format_otherwise():
    metrics = exercised()
    server = metrics.serve(0, "127.0.0.1")
    try:
        status, body, content_type = http_get(server.port, "/metrics")
        assert (status, content_type) == (200, TEXT.content_type)
        assert body == render_text(metrics.registry)
        for accept in (PROMETHEUS_ACCEPT, "application/openmetrics-text; version=1.0.0"):
            status, body, content_type = get(server.port, accept)
            assert (status, content_type) == (200, OPENMETRICS.content_type)
            assert body == render_openmetrics(metrics.registry)
        for accept in (
            "text/plain;version=0.0.4",
            "*/*",
            "application/json",
            "text/plain,application/openmetrics-text;q=0.5",
        ):
            assert get(server.port, accept)[2] == TEXT.content_type, accept
        assert http_get(server.port, "/healthz")[:2] == (200, b"ok\n")
        assert http_get(server.port, "/nope")[0] == 404
    finally:
        server.close()


def test_close_waits_for_a_scrape_that_starts_after_it_and_sees_the_final_values():
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    job = metrics.start_job("dqn", "final-1", folds_planned=1)
    job.finish("completed")
    bodies: list[str] = []

    def scrape_later() -> None:
        time.sleep(0.3)
        bodies.append(http_get(server.port, "/metrics")[1].decode())

    scraper = threading.Thread(target=scrape_later)
    scraper.start()
    started = time.monotonic()
    assert server.close(final_scrape_wait=10) is True
    waited = time.monotonic() - started
    scraper.join()
    assert 0.25 < waited < 5
    assert 'ml_training_job_duration_seconds_count{model_type="dqn",status="completed"} 1.0' in bodies[0]


def test_close_gives_up_after_the_wait_when_nobody_scrapes():
    server = TrainingMetrics().serve(0, "127.0.0.1")
    started = time.monotonic()
    assert server.close(final_scrape_wait=0.4) is False
    assert 0.35 < time.monotonic() - started < 3


def test_a_scrape_already_running_when_close_is_called_does_not_count():
    log = ScrapeLog()
    in_flight = log.start()  # began before the job's final values were set
    finisher = threading.Timer(0.1, log.finish, (in_flight,))
    finisher.start()
    assert log.wait_for_next(0.5) is False
    finisher.join()
    later = threading.Timer(0.1, lambda: log.finish(log.start()))
    later.start()
    assert log.wait_for_next(5) is True
    later.join()


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "7200"])
def test_a_bad_final_scrape_wait_stops_the_trainer_at_start(monkeypatch, value):
    monkeypatch.setenv(FINAL_SCRAPE_WAIT_ENV, value)
    with pytest.raises(ValueError, match=f"{FINAL_SCRAPE_WAIT_ENV}=.*expected seconds between 0 and 3600"):
        TrainingMetrics().serve(0, "127.0.0.1")


def test_the_final_scrape_wait_comes_from_the_env_the_job_template_sets(monkeypatch):
    assert final_scrape_wait_from_env({}) is None
    assert final_scrape_wait_from_env({FINAL_SCRAPE_WAIT_ENV: " 30 "}) == 30.0
    monkeypatch.setenv(FINAL_SCRAPE_WAIT_ENV, "0.3")
    server = TrainingMetrics().serve(0, "127.0.0.1")
    started = time.monotonic()
    assert server.close() is False  # nobody scrapes: the env's 0.3 s, then it stops
    assert 0.25 < time.monotonic() - started < 3
