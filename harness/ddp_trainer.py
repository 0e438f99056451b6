"""A tiny DistributedDataParallel trainer over gloo, instrumented as a production trainer would be,
that a test steers through files in its control directory.

Every step: a simulated device time (the host waiting for GPU kernels: a sleep, so CPU contention
on the test machine does not change it), forward and backward of a two-layer model (DDP reduces
its gradients with its built-in all-reduce, timed per step), an optimizer step, and one timed
all-reduce of a stop flag, so that every rank stops at the same step. The whole step is in the
`compute` phase; the timing moves the exposed gradient wait into `collective`.

Control files (in `--control`): `slow-<rank>` makes that rank's device time `--slow-factor`
longer while it exists; `stop` ends the run (rank 0 reads it, the flag all-reduce tells the
others). Each rank writes `pid-<rank>` at start, `ready-<rank>` after its first step and
`done-<rank>.json` at the end: the bytes it reduced by its own count and the model's gradient
bytes per step.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.integrations.torch_distributed import instrument_rank
from foxhunt_trainer.phases import COMPUTE

WIDTH = 64
BATCH = 16


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--device-seconds", type=float, default=0.05)
    parser.add_argument("--slow-factor", type=float, default=1.3)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(minutes=10))
    rank = dist.get_rank()
    control: Path = args.control
    (control / f"pid-{rank}").write_text(str(os.getpid()))

    metrics = TrainingMetrics()
    job = metrics.start_job("ddp", args.job_id)
    server = metrics.serve_rank(job.rank, addr="127.0.0.1")
    timer = instrument_rank(job)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
    ddp = DistributedDataParallel(model)  # the model has no buffers to broadcast
    timer.register_ddp(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)

    started, steps = time.monotonic(), 0
    while True:
        with job.phase(COMPUTE):
            slow = (control / f"slow-{rank}").exists()
            time.sleep(args.device_seconds * (args.slow_factor if slow else 1.0))
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            stop = torch.tensor([1.0 if rank == 0 and (control / "stop").exists() else 0.0])
            timer.all_reduce(stop, op=dist.ReduceOp.MAX)
        steps = job.record_step(samples=BATCH)
        if steps == 1:
            (control / f"ready-{rank}").write_text("")
        if stop.item() > 0 or time.monotonic() - started > args.max_seconds:
            break

    totals = timer.counts.totals()
    job.finish("completed")
    (control / f"done-{rank}.json").write_text(
        json.dumps({"steps": steps, "gradient_bytes": gradient_bytes, "totals": totals, "port": server.port})
    )
    server.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
