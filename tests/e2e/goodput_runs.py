"""`python -m tests.e2e.goodput_runs --listen HOST:PORT --run SHAPE:JOB_ID[:GPU_UUID] ...`: real
PyTorch CPU training runs of known shapes, one thread each, their metrics served on one endpoint
until SIGTERM.

Shapes (what the bottleneck verdict must say about each):
- `input`: a data set whose samples take 15 ms each to load, no loader workers: waits for data;
- `compute`: large matrix multiplies per step, batches prefetched by a loader worker: computes;
- `checkpoint`: a small model that saves a 16 MB checkpoint after every step: saves checkpoints;
- `gpu`: small steps on the GPU the job is given (the fake NVML's), the step's device time slept:
  the time split says compute, the GPUs' own evidence decides (busy or idle).

The time split comes from the trainer library's documented context managers (`job.phase`); the
model FLOPs per step from PyTorch's FLOP counter on the first step. `--seconds` ends the runs by
themselves (each job finishes "completed" and logs its summary), `--epoch-steps N` records an epoch's
losses every N steps, `--rank R --world-size W` makes the process rank R of W of each job, `--log`
writes the trainer's log (logfmt) to stdout, and `--flush` waits for the final scrape at exit.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from foxhunt_trainer import TrainingMetrics, configure_logging
from foxhunt_trainer.ranks import RankInfo

SHAPES = ("input", "compute", "checkpoint", "gpu")
MAX_SECONDS = 180.0  # a run the test forgot to stop ends by itself


class SlowSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Samples that take `seconds` each to load (a slow disk or decoder)."""

    def __init__(self, seconds: float, features: int = 32) -> None:
        self.seconds, self.features = seconds, features

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.seconds)
        return torch.randn(self.features), torch.tensor(index % 4)


class ReadySamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Samples already in memory."""

    def __init__(self, features: int) -> None:
        self.x, self.y = torch.randn(256, features), torch.randint(0, 4, (256,))

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index % 256], self.y[index % 256]


class Wide(nn.Module):
    """Matrix multiplies of `width` x `width`, `depth` times per forward pass."""

    def __init__(self, features: int, width: int, depth: int) -> None:
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.out = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)  # type: ignore[no-any-return]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.e2e.goodput_runs", description=__doc__)
    p.add_argument("--listen", required=True, help="metrics HOST:PORT")
    p.add_argument("--run", action="append", required=True, help="SHAPE:JOB_ID[:GPU_UUID] (repeatable)")
    p.add_argument("--model-type", default="mlp")
    p.add_argument("--gpu-step-seconds", type=float, default=0.02, help="gpu shape: device time of a step")
    p.add_argument("--seconds", type=float, default=MAX_SECONDS, help="each run's length")
    p.add_argument("--epoch-steps", type=int, default=0, help="record an epoch's losses every N steps (0: never)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--log", action="store_true", help="the trainer's log (logfmt) on stdout")
    p.add_argument("--flush", action="store_true", help="wait for one more scrape at exit")
    return p


def loader(shape: str) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    if shape == "input":
        return DataLoader(SlowSamples(0.015), batch_size=4)
    if shape == "compute":
        return DataLoader(ReadySamples(64), batch_size=32, num_workers=1, prefetch_factor=8, persistent_workers=True)
    return DataLoader(ReadySamples(32), batch_size=8)


def model_for(shape: str) -> nn.Module:
    if shape == "compute":
        return Wide(64, 1024, 8)
    return Wide(32, 32, 1)


def train(metrics: TrainingMetrics, args: argparse.Namespace, run: str, stop: threading.Event) -> None:
    model_type, gpu_step_seconds = args.model_type, args.gpu_step_seconds
    shape, job_id, *gpu = run.split(":")
    if shape not in SHAPES:
        raise SystemExit(f"unknown shape {shape!r}: expected one of {SHAPES}")
    model = model_for(shape)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpoints = Path(tempfile.mkdtemp(prefix="goodput-ckpt-"))
    big_state = {"weights": torch.zeros(4 * 1024 * 1024)}  # 16 MB of float32

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if shape == "gpu":
            time.sleep(gpu_step_seconds)  # the step's kernels running on the device
        return float(loss.item())

    batches = iter(loader(shape))
    rank = RankInfo(rank=args.rank, world_size=args.world_size)
    job = metrics.start_job(model_type, job_id, gpu_uuids=gpu, rank=rank)
    deadline = time.monotonic() + min(args.seconds, MAX_SECONDS)
    held_out = next(batches)
    losses: list[float] = []
    epoch_started = time.monotonic()
    with job:
        with job.phase("data_wait"):
            x, y = next(batches)
        with job.phase("compute"):
            job.measure_model_flops(step, x, y, model=model)
        job.record_step(samples=len(x))
        while not stop.is_set() and time.monotonic() < deadline:
            with job.phase("data_wait"):
                x, y = next(batches)
            with job.phase("compute"):
                loss = step(x, y)
            if args.epoch_steps:
                losses.append(loss)
            done = job.record_step(samples=len(x))
            if args.epoch_steps and done % args.epoch_steps == 0:
                with job.phase("evaluation"), torch.no_grad():
                    val = float(nn.functional.cross_entropy(model(held_out[0]), held_out[1]))
                now = time.monotonic()
                job.record_training_iteration(
                    done // args.epoch_steps, sum(losses) / len(losses), val, now - epoch_started
                )
                losses.clear()
                epoch_started = now
            if shape == "checkpoint":
                path = checkpoints / f"step-{done}.pt"
                with job.checkpoint(path, step=done, state=model.state_dict()):
                    torch.save({**big_state, "model": model.state_dict()}, path)
                (checkpoints / f"step-{done - 2}.pt").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.log:
        configure_logging("logfmt", "INFO")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    host, _, port = args.listen.rpartition(":")
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    metrics = TrainingMetrics()
    server = metrics.serve(int(port), host)
    threads = [threading.Thread(target=train, args=(metrics, args, run, stop), daemon=True) for run in args.run]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if args.flush:
        server.close()
    else:
        server.close(final_scrape_wait=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
