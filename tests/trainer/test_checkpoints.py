"""`with job.checkpoint(path, step=..., state=...)`: timed, errors classified, NaN weights never a good save."""

from __future__ import annotations

import ctypes
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt_trainer import JobMetrics, TrainingMetrics
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.errors import checkpoint_error_type
from foxhunt_trainer.finite import nonfinite_entries

from .test_job_lifecycle import ClientError, value

pytestmark = pytest.mark.slow

JOB = {"model_type": "mlp", "job_id": "run-1"}


def started() -> tuple[TrainingMetrics, JobMetrics]:
    metrics = TrainingMetrics()
    return metrics, metrics.start_job("mlp", "run-1", gpu_uuids=[])


def test_a_good_save_is_counted_timed_sized_and_becomes_the_last_good_checkpoint(tmp_path):
    metrics, job = started()
    model = torch.nn.Linear(4, 2)
    path = tmp_path / "step-10.pt"
    with job.checkpoint(path, step=10, state=model.state_dict()) as ckpt:
        assert ckpt.finite
        torch.save(model.state_dict(), path)
    assert ckpt.good
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **JOB) == 1
    assert value(metrics, catalog.CHECKPOINT_SAVE_DURATION_SECONDS.count, **JOB) == 1
    assert value(metrics, catalog.CHECKPOINT_SIZE_BYTES.name, **JOB) == path.stat().st_size
    assert value(metrics, catalog.CHECKPOINT_LAST_GOOD_STEP.name, **JOB) == 10
    assert job.last_good_checkpoint is not None
    assert job.last_good_checkpoint.path == str(path)
    assert job.last_good_checkpoint.step == 10
    assert value(metrics, catalog.CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS.name, **JOB) == job.last_good_checkpoint.time


def test_nan_weights_are_refused_and_the_last_good_checkpoint_stays(tmp_path):
    metrics, job = started()
    model = torch.nn.Linear(4, 2)
    with job.checkpoint(tmp_path / "a.pt", step=1, state=model.state_dict()):
        torch.save(model.state_dict(), tmp_path / "a.pt")
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with job.checkpoint(tmp_path / "b.pt", step=2, state=model) as ckpt:
        assert not ckpt.finite
        torch.save(model.state_dict(), tmp_path / "b.pt")
    assert ckpt.good is False
    assert "weight" in ckpt.refused_reason
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **JOB) == 1
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="weights") == 1
    assert job.last_good_checkpoint is not None
    assert job.last_good_checkpoint.step == 1


def test_without_a_state_a_save_after_a_nan_loss_is_not_good_until_one_is(tmp_path):
    metrics, job = started()
    job.record_training_iteration(1, float("nan"), None, 0.1)
    with job.checkpoint(tmp_path / "a.pt", step=1) as ckpt:
        (tmp_path / "a.pt").write_bytes(b"x")
    assert ckpt.good is False
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **JOB) == 0
    # With finite weights the state decides: a skipped NaN step leaves a good model.
    with job.checkpoint(tmp_path / "b.pt", step=2, state={"w": torch.ones(3)}) as ckpt:
        (tmp_path / "b.pt").write_bytes(b"xy")
    assert ckpt.good
    with job.checkpoint(tmp_path / "c.pt", step=3) as ckpt:
        (tmp_path / "c.pt").write_bytes(b"xyz")
    assert ckpt.good
    # A NaN step the trainer skipped, then finite losses again: the state is no longer suspect.
    job.record_training_iteration(4, float("nan"), None, 0.1)
    job.record_training_iteration(5, 0.3, None, 0.1)
    with job.checkpoint(tmp_path / "d.pt", step=5) as ckpt:
        (tmp_path / "d.pt").write_bytes(b"xyzw")
    assert ckpt.good
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **JOB) == 3


def _without_dac_override() -> None:
    """Root writes through a directory's mode bits; drop that capability (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH from the bounding set) so a read-only directory is read-only for it too."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


SAVE_READ_ONLY = """
import sys, torch
from foxhunt_trainer import JobMetrics, TrainingMetrics
job = TrainingMetrics().start_job("mlp", "run-1", gpu_uuids=[])
with job.checkpoint(sys.argv[1], step=1, state={"w": torch.ones(2)}, suppress_errors=True) as ckpt:
    torch.save({"w": torch.ones(2)}, sys.argv[1])
print(type(ckpt.error).__name__, ckpt.error_type, ckpt.good)
"""


def test_torch_save_to_a_read_only_directory_is_an_io_error(tmp_path):
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    result = subprocess.run(
        [sys.executable, "-c", SAVE_READ_ONLY, str(read_only / "x.pt")],
        capture_output=True,
        text=True,
        preexec_fn=_without_dac_override,
        cwd=Path(__file__).parents[2],
        check=True,
    )
    # torch.save raises RuntimeError here ("open file failed ... Permission denied"), not OSError.
    assert result.stdout.split() == ["RuntimeError", "io_error", "False"], result.stderr


def test_a_failed_save_is_counted_by_type_and_raised_unless_suppressed(tmp_path):
    metrics, job = started()
    with pytest.raises(AttributeError, match="pickle"), job.checkpoint(tmp_path / "a.pt", step=1):
        torch.save({"f": lambda: 1}, tmp_path / "a.pt")
    with job.checkpoint("s3://bucket/run-1/step-2", step=2, suppress_errors=True) as ckpt:
        raise ClientError("An error occurred (SlowDown) when calling the PutObject operation")
    assert ckpt.error_type == "storage"
    assert value(metrics, catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name, **JOB, error_type="serialization") == 1
    assert value(metrics, catalog.CHECKPOINT_SAVE_FAILURES_TOTAL.name, **JOB, error_type="storage") == 1
    assert value(metrics, catalog.CHECKPOINT_SAVES_TOTAL.name, **JOB) == 0
    assert job.last_good_checkpoint is None


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (PermissionError(13, "Permission denied"), "io_error"),
        (OSError(30, "Read-only file system"), "io_error"),
        (RuntimeError("Parent directory /nonexistent does not exist."), "io_error"),
        (
            RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0"),
            "io_error",
        ),
        (TimeoutError("write timed out"), "timeout"),
        (pickle.PicklingError("Can't pickle <function <lambda>>"), "serialization"),
        (AttributeError("Can't pickle local object 'f.<locals>.g'"), "serialization"),
        (ClientError("AccessDenied"), "storage"),
        (KeyError("epoch"), "other"),
    ],
)
def test_checkpoint_error_types(error, expected):
    assert checkpoint_error_type(error) == expected


def test_nonfinite_entries_of_nested_states():
    optimizer_state = {"state": {0: {"exp_avg": torch.tensor([1.0, float("inf")])}}, "param_groups": [{"lr": 0.1}]}
    state = {
        "model": {"w": torch.ones(2), "steps": torch.tensor([3])},
        "optimizer": optimizer_state,
        "scaler": np.array([1.0, np.nan]),
        "epoch": 3,
        "best": float("nan"),
        "name": "run",
    }
    assert sorted(nonfinite_entries(state)) == ["best", "optimizer.state.0.exp_avg", "scaler"]
    assert nonfinite_entries({"w": torch.ones(2), "lr": 0.1, "ids": np.arange(3)}) == []
