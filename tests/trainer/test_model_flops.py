"""Model FLOPs per step from PyTorch's own FLOP counter, or declared, counted per step and rank;
checkpoint bytes written counted per rank."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from foxhunt_trainer import JobMetrics, TrainingMetrics
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.flops import measure_step_flops, model_precision, precision_of
from foxhunt_trainer.ranks import RankInfo

from .test_job_lifecycle import value

pytestmark = pytest.mark.slow

RANKED = {"model_type": "mlp", "job_id": "run-1", "rank": "0"}
FLOPS = catalog.TRAINING_MODEL_FLOPS_TOTAL.name


def started(rank: RankInfo | None = None) -> tuple[TrainingMetrics, JobMetrics]:
    metrics = TrainingMetrics()
    return metrics, metrics.start_job("mlp", "run-1", gpu_uuids=[], rank=rank)


def _train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(loss.item())


def test_a_known_mlps_training_step_matches_the_analytic_count():
    batch, widths = 32, (64, 256, 128, 10)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))
    loss, counted = measure_step_flops(_train_step, model, x, y)
    layers = list(itertools.pairwise(widths))
    forward = sum(2 * batch * fan_in * fan_out for fan_in, fan_out in layers)
    weight_grads = forward  # one matrix multiply per layer for its weight gradient
    input_grads = sum(2 * batch * fan_in * fan_out for fan_in, fan_out in layers[1:])  # the input needs none
    assert counted.flops == pytest.approx(forward + weight_grads + input_grads, rel=0.01)
    assert loss > 0  # the step ran: its result is the caller's
    assert {op for op, _ in counted.by_operator} <= {"aten.addmm", "aten.mm"}


def test_a_small_convolution_models_training_step_matches_the_analytic_count():
    batch = 4
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.Flatten(), nn.Linear(16 * 14 * 14, 10)
    )
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    _, counted = measure_step_flops(_train_step, model, x, y)
    conv1 = 2 * batch * (8 * 30 * 30) * (3 * 3 * 3)  # outputs x (in channels x kernel) multiply-adds
    conv2 = 2 * batch * (16 * 14 * 14) * (8 * 3 * 3)
    linear = 2 * batch * (16 * 14 * 14) * 10
    # Backward: weight gradients of all three, input gradients of all but the first layer.
    analytic = (conv1 + conv2 + linear) + (conv1 + conv2 + linear) + (conv2 + linear)
    assert counted.flops == pytest.approx(analytic, rel=0.01)
    assert "aten.convolution_backward" in dict(counted.by_operator)


def test_measured_flops_count_on_every_step_at_the_models_precision():
    metrics, job = started()
    model = nn.Linear(16, 4)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    job.measure_model_flops(_train_step, model, x, y, model=model)
    assert job.model_flops_precision == "fp32"  # CPU float32: no TF32
    per_step = job.model_flops_per_step
    assert per_step == 2 * 8 * 16 * 4 * 2  # forward and weight gradient
    assert value(metrics, FLOPS, **RANKED, precision="fp32") == 0  # exposed at 0 before the first step
    for _ in range(3):
        job.record_step(samples=8)
    assert value(metrics, FLOPS, **RANKED, precision="fp32") == 3 * per_step


def test_declared_flops_and_a_steps_own_flops_count_and_ranks_stay_apart():
    metrics, job = started(RankInfo(rank=1, local_rank=1, world_size=2, node_rank=0))
    job.set_model_flops(6e9, "bf16")
    job.record_step()
    job.record_step(flops=2e9)  # a shorter sequence this step
    ranked = {**RANKED, "rank": "1"}
    assert value(metrics, FLOPS, **ranked, precision="bf16") == 8e9
    assert value(metrics, FLOPS, **RANKED, precision="bf16") is None
    assert job.record_step(samples=12, count=3) == 5  # steps a framework hands over together
    assert value(metrics, FLOPS, **ranked, precision="bf16") == 8e9 + 3 * 6e9
    assert value(metrics, catalog.TRAINING_STEPS_TOTAL.name, **ranked) == 5
    with pytest.raises(ValueError, match=r"count is a number of steps of at least 1, got 0"):
        job.record_step(count=0)


def test_a_job_without_declared_flops_counts_none_and_bad_declarations_say_what_is_expected():
    metrics, job = started()
    job.record_step()
    assert value(metrics, FLOPS, **RANKED, precision="fp32") is None
    with pytest.raises(ValueError, match=r"unknown precision 'int4': expected one of fp32, tf32, bf16, fp16, fp8"):
        job.set_model_flops(1e9, "int4")
    with pytest.raises(ValueError, match=r"model FLOPs per step must be a positive number, got -5"):
        job.set_model_flops(-5, "bf16")
    with pytest.raises(ValueError, match=r"need the model's precision"):
        job.record_step(flops=1e9)
    with pytest.raises(ValueError, match=r"needs the precision or the model"):
        job.measure_model_flops(lambda: None)


def test_the_precision_follows_the_dtype_and_tf32():
    assert precision_of(torch.bfloat16) == "bf16" and precision_of(torch.float16) == "fp16"
    assert precision_of(torch.float32, tf32=True) == "tf32" and precision_of(torch.float32, tf32=False) == "fp32"
    assert model_precision(nn.Linear(2, 2).to(torch.bfloat16)) == "bf16"
    with pytest.raises(ValueError, match=r"no model-FLOPs precision for dtype torch.int64"):
        precision_of(torch.int64)


def test_checkpoint_bytes_written_add_up_per_rank(tmp_path):
    metrics, job = started()
    written = catalog.CHECKPOINT_WRITTEN_BYTES_TOTAL.name
    assert value(metrics, written, **RANKED) == 0
    model = nn.Linear(64, 64)
    sizes = []
    for step in (10, 20):
        path = tmp_path / f"step-{step}.pt"
        with job.checkpoint(path, step=step, state=model.state_dict()):
            torch.save(model.state_dict(), path)
        sizes.append(path.stat().st_size)
    job.record_checkpoint_save(False, 0.5, None, "io_error")  # a failed save writes nothing billable
    assert value(metrics, written, **RANKED) == sum(sizes)
