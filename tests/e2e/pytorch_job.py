"""A real PyTorch training script, instrumented as the README says and nothing more: no NaN check,
no try/except around the training, checkpoints with `torch.save`. The end-to-end tests run it as a
process scraped by Prometheus.

    python -m tests.e2e.pytorch_job --port 9100 --job-id run-1 --checkpoint-dir /tmp/ckpt
        [--task regression|classification] [--folds 3] [--epochs 2] [--lr 0.01]
        [--epoch-seconds 0] [--blow-up-at-epoch N] [--crash-at-epoch N]

Regression: an MLP on k folds of synthetic data (rows with a missing feature are dropped by the
feature step and counted) whose validation RMSE, MAE and R squared it reports; classification: a two-class MLP whose validation accuracy, F1,
precision and recall it reports. `--epoch-seconds` slows the data loader to that long an epoch (a
remote data source), `--blow-up-at-epoch` raises the learning rate to 1e4 from that epoch on (a
broken schedule: the loss goes NaN), `--crash-at-epoch` calls the model with a wrong input shape there.
Prints one JSON line per epoch (`{"epoch": .., "loss": .., "time": ..}`), as a training log would.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.integrations.torch import record_regression_quality, watch
from foxhunt_trainer.training import JobMetrics

FEATURES = 8


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows read from a slow source: each row takes `seconds_per_row`."""

    def __init__(self, data: TensorDataset, seconds_per_row: float) -> None:
        self.data, self.seconds_per_row = data, seconds_per_row

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.seconds_per_row:
            time.sleep(self.seconds_per_row)
        x, y = self.data[index]
        return x, y


def features(job: JobMetrics, rows: int, task: str, generator: torch.Generator) -> TensorDataset:
    x = torch.randn(rows, FEATURES, generator=generator)
    x[::37, 3] = float("nan")  # a few rows come with a missing feature
    weights = torch.randn(FEATURES, 1, generator=generator)
    missing = torch.isnan(x).any(dim=1)
    for _ in range(int(missing.sum())):
        job.record_feature_engineering_error("missing_value")
    x = x[~missing]
    target = x @ weights
    y = (target > 0).float() if task == "classification" else target + 0.1 * torch.randn(len(x), 1, generator=generator)
    return TensorDataset(x, y)


def classification_quality(logits: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float, float]:
    predicted = (logits > 0).float()
    tp = float(((predicted == 1) & (y == 1)).sum())
    fp = float(((predicted == 1) & (y == 0)).sum())
    fn = float(((predicted == 0) & (y == 1)).sum())
    accuracy = float((predicted == y).float().mean())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return accuracy, f1, precision, recall


def resident_bytes() -> float:
    try:
        return float(int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, IndexError, ValueError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--task", choices=("regression", "classification"), default="regression")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epoch-seconds", type=float, default=0.0)
    parser.add_argument("--blow-up-at-epoch", type=int, default=0)
    parser.add_argument("--crash-at-epoch", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    metrics = TrainingMetrics()
    server = metrics.serve(args.port, "127.0.0.1")
    while server.page.scrapes_seen == 0:  # a long job is scraped before it gets anywhere
        time.sleep(0.05)
    wall, cpu = time.monotonic(), time.process_time()
    with metrics.job("mlp", args.job_id, folds_planned=args.folds, gpu_uuids=[]) as job:
        data = features(job, 480, args.task, torch.Generator().manual_seed(1))
        fold_size = len(data) // args.folds
        epoch = step = 0
        for fold in range(args.folds):
            started = time.monotonic()
            validation_rows = (
                range(fold * fold_size, (fold + 1) * fold_size) if args.folds > 1 else range(len(data) // 5)
            )
            train_rows = [i for i in range(len(data)) if i not in validation_rows]
            train = torch.utils.data.Subset(data, train_rows)
            x_val, y_val = data[list(validation_rows)]
            model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
            optimizer: torch.optim.Optimizer = (
                torch.optim.Adam(model.parameters(), lr=args.lr)
                if args.task == "classification"
                else torch.optim.SGD(model.parameters(), lr=args.lr)
            )
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
            loss_fn = torch.nn.BCEWithLogitsLoss() if args.task == "classification" else torch.nn.MSELoss()
            row_seconds = args.epoch_seconds / len(train)
            loader = DataLoader(SlowDataset(TensorDataset(*train[:]), row_seconds), batch_size=32, shuffle=True)
            best_train = best_val = math.inf
            with watch(job, model, optimizer, scheduler=scheduler, check_every=5, check_every_seconds=1.0) as watcher:
                for _ in range(args.epochs):
                    epoch += 1
                    if args.blow_up_at_epoch and epoch >= args.blow_up_at_epoch:
                        for group in optimizer.param_groups:
                            group["lr"] = 1e4
                    epoch_started, total, batches = time.monotonic(), 0.0, 0
                    for x, y in watcher.loader(loader):
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        watcher.record_loss(loss)
                        optimizer.step()
                        optimizer.zero_grad()
                        total, batches, step = total + loss.item(), batches + 1, step + 1
                    scheduler.step()
                    if epoch == args.crash_at_epoch:
                        model(torch.randn(4, FEATURES + 1))  # a wrong input shape: RuntimeError
                    with job.phase("evaluation"), torch.no_grad():
                        logits = model(x_val)
                        val_loss = float(loss_fn(logits, y_val))
                    train_loss = total / batches
                    job.record_training_iteration(epoch, train_loss, val_loss, time.monotonic() - epoch_started)
                    best_train, best_val = min(best_train, train_loss), min(best_val, val_loss)
                    if args.task == "classification":
                        job.set_model_quality(*classification_quality(logits, y_val))
                    else:
                        record_regression_quality(job, logits, y_val)
                    job.set_progress(100 * epoch / (args.folds * args.epochs))
                    now_wall, now_cpu = time.monotonic(), time.process_time()
                    job.set_resource_usage(resident_bytes(), 100 * (now_cpu - cpu) / (now_wall - wall))
                    wall, cpu = now_wall, now_cpu
                    path = args.checkpoint_dir / f"{args.job_id}-step{step}.pt"
                    with job.checkpoint(path, step=step, state=model.state_dict(), suppress_errors=True):
                        torch.save({"model": model.state_dict(), "step": step}, path)
                    print(json.dumps({"epoch": epoch, "loss": train_loss, "time": time.time()}), flush=True)
            job.record_fold(fold, best_train, best_val, args.epochs, time.monotonic() - started)


if __name__ == "__main__":
    main()
