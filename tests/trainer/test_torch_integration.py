"""`watch(job, model, optimizer)` on real PyTorch loops: steps, samples, data wait vs compute, loss,
gradient norm, learning rates, hyperparameters and non-finite values checked every N steps."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from observability import catalog
from observability.instrument import TrainingMetrics
from observability.instrument.integrations.torch import batch_size_of, watch

from .test_job_lifecycle import value

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
    recorded = [torch.tensor(1.0), torch.tensor([2.0]), 3.0, torch.tensor(4.0, dtype=torch.float64)]
    with watch(job, model, optimizer, check_every=len(recorded), check_every_seconds=3600) as watcher:
        for loss in recorded:
            watcher.record_loss(loss)
            model(torch.zeros(1, 8)).sum().backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
        assert watcher.checks == 1
        assert value(metrics, catalog.TRAINING_STEP_LOSS.name, **JOB) == pytest.approx(2.5)
        with pytest.raises(ValueError, match=r"the step's loss, one value; got a tensor of shape \(4,\)"):
            watcher.record_loss(torch.ones(4))
