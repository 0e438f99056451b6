"""`watch(job, model, optimizer)` on real PyTorch loops: steps, samples, data wait vs compute, loss,
gradient norm, learning rates, hyperparameters and non-finite values checked every N steps."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.integrations.torch import (
    batch_size_of,
    record_regression_quality,
    regression_quality,
    watch,
)

from .test_job_lifecycle import value

pytestmark = pytest.mark.slow

JOB = {"model_type": "mlp", "job_id": "run-1"}
RANKED = {**JOB, "rank": "0"}


def regression(samples: int = 320, batch: int = 16) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator) + 0.1 * torch.randn(samples, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=False)


def model_and_optimizer(lr: float = 1e-2) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    groups: list[dict[str, Any]] = [
        {"params": model[0].parameters(), "name": "encoder"},
        {"params": model[2].parameters(), "name": "head", "lr": lr / 10},
    ]
    optimizer = torch.optim.Adam(groups, lr=lr)
    return model, optimizer


def test_a_training_loop_reports_steps_samples_phases_loss_gradients_and_learning_rates():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    losses: list[float] = []
    norms: list[float] = []
    with watch(job, model, optimizer, scheduler=scheduler, check_every=10, check_every_seconds=3600) as watcher:
        for _epoch in range(2):
            for x, y in watcher.loader(regression()):
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()  # type: ignore[no-untyped-call]
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)))
                watcher.record_loss(loss)
                losses.append(loss.item())
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step()
    assert watcher.steps == 40 and watcher.checks == 4
    assert value(metrics, catalog.TRAINING_STEPS_TOTAL.name, **RANKED) == 40
    assert value(metrics, catalog.TRAINING_SAMPLES_TOTAL.name, **RANKED) == 640
    assert value(metrics, catalog.TRAINING_DATA_LOADING_SECONDS.count, **JOB) == 40
    assert value(metrics, catalog.TRAINING_DATA_BATCHES_TOTAL.name, **JOB) == 40
    # The last check covered steps 31-40: their mean loss, and the gradient norm of step 40.
    assert value(metrics, catalog.TRAINING_STEP_LOSS.name, **JOB) == pytest.approx(sum(losses[30:]) / 10, rel=1e-5)
    assert value(metrics, catalog.TRAINING_GRADIENT_NORM.name, **JOB) == pytest.approx(norms[-1], rel=1e-4)
    for name, group in zip(("encoder", "head"), optimizer.param_groups, strict=True):
        assert value(metrics, catalog.TRAINING_LEARNING_RATE.name, **JOB, param_group=name) == pytest.approx(
            group["lr"]
        )
    info = {"batch_size": "16", "optimizer": "Adam", "precision": "fp32", "lr_schedule": "StepLR"}
    assert value(metrics, catalog.TRAINING_HYPERPARAMETERS_INFO.name, **JOB, **info) == 1
    totals = job.phases.totals()
    assert totals["data_wait"] > 0 and totals["compute"] > 0
    assert sum(totals.values()) == pytest.approx(job.phases.wall(), abs=0.05)
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="loss") == 0


def test_a_blown_up_learning_rate_counts_nan_losses_and_gradients_without_a_check_in_the_loop():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer(lr=1e12)
    with watch(job, model, optimizer, check_every=4, check_every_seconds=3600) as watcher:
        for x, y in watcher.loader(regression(samples=160)):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            watcher.record_loss(loss)
            optimizer.step()
            optimizer.zero_grad()
    assert not all(math.isfinite(p.detach().sum().item()) for p in model.parameters())  # it did blow up
    assert (value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="loss") or 0) >= 1
    assert watcher.checks == 3  # steps 4 and 8, then the last two steps at close


def test_the_last_steps_are_checked_at_close():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer()
    with watch(job, model, optimizer, check_every=1000, check_every_seconds=3600) as watcher:
        for i, (x, y) in enumerate(watcher.loader(regression(samples=48))):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            watcher.record_loss(loss if i < 2 else loss * float("nan"))
            optimizer.step()
            optimizer.zero_grad()
        assert watcher.checks == 0
    assert watcher.checks == 1
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="loss") == 1


def test_gradient_accumulation_counts_every_micro_batch_as_samples_of_one_step():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer()
    with watch(job, model, optimizer, check_every=2) as watcher:
        for i, (x, y) in enumerate(watcher.loader(regression(samples=128, batch=8))):
            torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
            if i % 4 == 3:
                optimizer.step()
                optimizer.zero_grad()
    assert value(metrics, catalog.TRAINING_STEPS_TOTAL.name, **RANKED) == 4
    assert value(metrics, catalog.TRAINING_SAMPLES_TOTAL.name, **RANKED) == 128


def test_batch_sizes_and_bad_options():
    assert batch_size_of((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_size_of({"input_ids": torch.zeros(3, 7)}) == 3
    assert batch_size_of("text") is None
    job = TrainingMetrics().start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer()
    with pytest.raises(ValueError, match="check_every is a number of steps of at least 1"):
        watch(job, model, optimizer, check_every=0)


def test_losses_of_any_shape_of_one_value_and_plain_numbers_average_at_the_check():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    model, optimizer = model_and_optimizer()
    recorded: list[torch.Tensor | float] = [torch.tensor(1.0), torch.tensor([2.0]), 3.0, torch.tensor(4.0).double()]
    with watch(job, model, optimizer, check_every=len(recorded), check_every_seconds=3600) as watcher:
        for loss in recorded:
            watcher.record_loss(loss)
            model(torch.zeros(1, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        assert watcher.checks == 1
        assert value(metrics, catalog.TRAINING_STEP_LOSS.name, **JOB) == pytest.approx(2.5)
        with pytest.raises(ValueError, match=r"the step's loss, one value; got a tensor of shape \(4,\)"):
            watcher.record_loss(torch.ones(4))


def _reference_quality(predictions: list[list[float]], targets: list[list[float]]) -> tuple[float, float, float]:
    """RMSE, MAE and R squared by their textbook definitions, in plain Python."""
    errors = [p - t for prow, trow in zip(predictions, targets, strict=True) for p, t in zip(prow, trow, strict=True)]
    rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
    mae = sum(abs(e) for e in errors) / len(errors)
    scores = []
    for column in range(len(targets[0])):
        t = [row[column] for row in targets]
        p = [row[column] for row in predictions]
        mean = sum(t) / len(t)
        scores.append(1 - sum((a - b) ** 2 for a, b in zip(p, t, strict=True)) / sum((b - mean) ** 2 for b in t))
    return rmse, mae, sum(scores) / len(scores)


@pytest.mark.parametrize("outputs", [1, 3])
def test_regression_quality_matches_the_definitions_and_reaches_the_page(outputs):
    generator = torch.Generator().manual_seed(3)
    targets = torch.randn(64, outputs, generator=generator) * 5 + 2
    predictions = targets + torch.randn(64, outputs, generator=generator)
    rmse, mae, r2 = _reference_quality(predictions.tolist(), targets.tolist())
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    quality = record_regression_quality(job, predictions.to(torch.float16).to(torch.float32), targets)
    expected = _reference_quality(predictions.to(torch.float16).to(torch.float32).tolist(), targets.tolist())
    assert (quality.rmse, quality.mae, quality.r2) == pytest.approx(expected, rel=1e-9)
    assert (quality.rmse, quality.mae, quality.r2) == pytest.approx((rmse, mae, r2), rel=1e-2)
    assert 0 < quality.mae < quality.rmse and 0.9 < quality.r2 < 1  # type: ignore[operator]
    assert value(metrics, catalog.MODEL_RMSE.name, **JOB) == pytest.approx(quality.rmse)
    assert value(metrics, catalog.MODEL_MAE.name, **JOB) == pytest.approx(quality.mae)
    assert value(metrics, catalog.MODEL_R2_SCORE.name, **JOB) == pytest.approx(quality.r2)


def test_regression_quality_edges_and_bad_input():
    exact = regression_quality(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0]))
    assert (exact.rmse, exact.mae, exact.r2) == (0.0, 0.0, 1.0)
    mean = regression_quality(torch.full((4,), 2.5), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert mean.r2 == pytest.approx(0.0)  # no better than the mean
    assert regression_quality(torch.tensor([4.0, 1.0]), torch.tensor([1.0, 4.0])).r2 == pytest.approx(-3.0)
    assert regression_quality(torch.tensor([2.0, 2.0]), torch.tensor([2.0, 2.0])).r2 == 1.0  # constant, exact
    with pytest.raises(ValueError, match=r"same shape, got \(3,\) and \(3, 1\)"):
        regression_quality(torch.zeros(3), torch.zeros(3, 1))
    with pytest.raises(ValueError, match="at least one prediction"):
        regression_quality(torch.zeros(0), torch.zeros(0))
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "run-1", gpu_uuids=[])
    with pytest.raises(ValueError, match="rmse must be at least 0"):
        job.set_regression_quality(rmse=-1.0)
    with pytest.raises(ValueError, match=r"r2 must be at most 1, got 1\.5"):
        job.set_regression_quality(r2=1.5)
    with pytest.raises(TypeError, match="mae must be a number"):
        job.set_regression_quality(mae="0.3")  # type: ignore[arg-type]
    nan = regression_quality(torch.tensor([float("nan"), 1.0]), torch.tensor([0.0, 1.0]))
    job.set_regression_quality(rmse=nan.rmse, mae=nan.mae, r2=nan.r2)
    assert value(metrics, catalog.TRAINING_NAN_COUNT.name, **JOB, tensor_type="activation") == 1
