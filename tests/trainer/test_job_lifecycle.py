"""`with metrics.job(...) as job`: failures by error type, final status, NaN losses counted by themselves."""

from __future__ import annotations

import errno
import math

import pytest
import torch
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.errors import FAILURE_ERROR_TYPES, failure_type

pytestmark = pytest.mark.slow


def value(metrics: TrainingMetrics, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(render_text(metrics.registry).decode()):
        for s in family.samples:
            exposed = name if s.name == name or s.name == name + "_total" else None
            if exposed and s.labels == labels:
                return s.value
    return None


JOB = {"model_type": "mlp", "job_id": "run-1"}


def test_a_clean_exit_completes_the_job():
    metrics = TrainingMetrics()
    with metrics.job("mlp", "run-1", gpu_uuids=[]) as job:
        job.record_training_iteration(1, 0.5, 0.6, 0.1)
    assert job.status == "completed"
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="completed") == 1
    assert value(metrics, catalog.TRAINING_JOB_DURATION_SECONDS.count, model_type="mlp", status="completed") == 1
    assert all(
        value(metrics, catalog.TRAINING_FAILURES_TOTAL.name, **JOB, error_type=t) == 0 for t in FAILURE_ERROR_TYPES
    )


def test_an_exception_counts_the_failure_by_type_fails_the_job_and_propagates():
    metrics = TrainingMetrics()
    with pytest.raises(torch.cuda.OutOfMemoryError), metrics.job("mlp", "run-1", gpu_uuids=[]) as job:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert job.status == "failed"
    assert isinstance(job.failure, torch.cuda.OutOfMemoryError)
    assert value(metrics, catalog.TRAINING_FAILURES_TOTAL.name, **JOB, error_type="oom") == 1
    assert value(metrics, catalog.TRAINING_FAILURES_TOTAL.name, **JOB, error_type="exception") == 0
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="failed") == 1
    assert value(metrics, catalog.TRAINING_JOBS_BY_STATUS.name, status="running") == 0
    assert value(metrics, catalog.TRAINING_ACTIVE_WORKERS.name, **JOB) == 0


def test_a_job_finished_inside_the_block_is_not_finished_again():
    metrics = TrainingMetrics()
    with metrics.job("mlp", "run-1", gpu_uuids=[]) as job:
        job.finish("stopped")
    assert job.status == "stopped"
    assert value(metrics, catalog.TRAINING_JOB_DURATION_SECONDS.count, model_type="mlp", status="stopped") == 1
    assert value(metrics, catalog.TRAINING_JOB_DURATION_SECONDS.count, model_type="mlp", status="completed") == 0
    with pytest.raises(ValueError, match="already finished as 'stopped'"):
        job.finish("completed")


def test_ctrl_c_stops_the_job_without_a_failure():
    metrics = TrainingMetrics()
    with pytest.raises(KeyboardInterrupt), metrics.job("mlp", "run-1", gpu_uuids=[]) as job:
        raise KeyboardInterrupt
    assert job.status == "stopped"
    assert (
        sum(value(metrics, catalog.TRAINING_FAILURES_TOTAL.name, **JOB, error_type=t) or 0 for t in FAILURE_ERROR_TYPES)
        == 0
    )


def test_job_returns_the_started_job_and_starts_one_with_its_arguments():
    metrics = TrainingMetrics()
    job = metrics.job("mlp", "run-1", folds_planned=3, workers=2, gpu_uuids=[])
    assert metrics.job("mlp", "run-1") is job
    assert value(metrics, catalog.TRAINING_FOLDS_PLANNED.name, **JOB) == 3
    assert value(metrics, catalog.TRAINING_ACTIVE_WORKERS.name, **JOB) == 2


def test_non_finite_losses_count_by_themselves():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    job.record_training_iteration(1, 0.5, 0.5, 0.1)
    job.record_training_iteration(2, math.inf, 0.5, 0.1)
    job.record_training_iteration(3, math.nan, math.nan, 0.1)
    job.record_training_iteration(4, 0.4, None, 0.1)  # no validation this epoch
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="loss") == 2
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="validation_loss") == 1
    assert value(metrics, catalog.TRAINING_VALIDATION_LOSS.name, **JOB) is not None


def test_unknown_error_types_are_refused():
    job = TrainingMetrics().start_job("mlp", "run-1", gpu_uuids=[])
    with pytest.raises(ValueError, match="unknown failure error type 'segfault'"):
        job.record_failure("segfault")
    with pytest.raises(ValueError, match="unknown checkpoint error type 'disk'"):
        job.record_checkpoint_save(False, 0.1, None, "disk")


class ClientError(Exception):
    """Stands in for botocore.exceptions.ClientError (classified by its module)."""


ClientError.__module__ = "botocore.exceptions"


def _wrapped_oserror() -> BaseException:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as cause:
            raise RuntimeError("could not write the shard") from cause
    except RuntimeError as error:
        return error
    raise AssertionError


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (MemoryError(), "oom"),
        (torch.cuda.OutOfMemoryError("CUDA out of memory"), "oom"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), "oom"),
        (FloatingPointError("overflow"), "nan"),
        (RuntimeError("Function 'MulBackward0' returned nan values in its 0th output."), "nan"),
        (TimeoutError(), "timeout"),
        (RuntimeError("Timed out waiting 1800000ms for recv operation to complete"), "timeout"),
        (ModuleNotFoundError("No module named 'apex'"), "config"),
        (ValueError("batch_size must be positive"), "config"),
        (PermissionError(errno.EACCES, "Permission denied"), "io"),
        (ClientError("SlowDown"), "io"),
        (_wrapped_oserror(), "io"),
        (ZeroDivisionError(), "exception"),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x1)"), "exception"),
    ],
)
def test_failure_types(error, expected):
    assert failure_type(error) == expected
    assert expected in FAILURE_ERROR_TYPES


def test_tallied_step_and_data_load_series_are_what_prometheus_client_would_expose():
    """The per-step series are tallied as plain numbers; their page must equal the one a
    prometheus-client counter and histogram with the catalog's buckets give for the same events."""
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "tally", gpu_uuids=[])
    reference = CollectorRegistry()
    loading = catalog.TRAINING_DATA_LOADING_SECONDS
    histogram = Histogram(loading.name, loading.help, loading.labels, buckets=loading.buckets, registry=reference)
    batches = Counter("batches", "", loading.labels, registry=reference)
    waits = [0.0, 0.004, 0.005, 0.0051, 0.3, *loading.buckets, 1e6]
    for i, seconds in enumerate(waits):
        job.record_data_load(seconds, batches=i % 3)
        histogram.labels("mlp", "tally").observe(seconds)
        batches.labels("mlp", "tally").inc(i % 3)
    job.record_batches(2)
    batches.labels("mlp", "tally").inc(2)

    def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        page = render_text(registry).decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page)
            for s in family.samples
            if s.name.startswith(name) and not s.name.endswith("_created")
        }

    assert samples(metrics.registry, loading.name) == samples(reference, loading.name)
    assert (
        value(metrics, catalog.TRAINING_DATA_BATCHES_TOTAL.name, model_type="mlp", job_id="tally")
        == sum(i % 3 for i in range(len(waits))) + 2
    )
    with pytest.raises(ValueError, match="batches is a count of at least 0, got -1"):
        job.record_data_load(0.1, batches=-1)
    with pytest.raises(ValueError, match="finite number of seconds"):
        job.record_data_load(math.nan)
    with pytest.raises(ValueError, match="samples and tokens of a step are counts of at least 0"):
        job.record_step(samples=-1)
