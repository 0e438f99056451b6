"""One rank of the DDP overhead benchmark (started by torchrun from `bench.distributed`).

Two DistributedDataParallel copies of the same model train side by side in one process group:
`plain` (DDP's default all-reduce, no instrumentation) and `instrumented` (the trainer library's
job: phases, per-rank steps, the timed communication hook and a timed flag all-reduce, its metrics
served on the rank's port). They alternate in blocks of `--block` steps, so both see the same
machine load; rank 0 writes every block's mean step time to `--out`.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from observability.instrument import TrainingMetrics
from observability.instrument.integrations.torch_distributed import CollectiveTimer, instrument_rank
from observability.instrument.phases import COMPUTE
from observability.instrument.training import JobMetrics

WIDTH, LAYERS, BATCH = 384, 4, 64


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def step(
    ddp: DistributedDataParallel, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
    device_seconds: float, job: JobMetrics | None, timer: CollectiveTimer | None,
) -> None:  # fmt: skip
    with job.phase(COMPUTE) if job is not None else nullcontext():
        time.sleep(device_seconds)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad()
        flag = torch.zeros(1)
        if timer is not None:
            timer.all_reduce(flag)
        else:
            dist.all_reduce(flag)
    if job is not None:
        job.record_step(samples=BATCH)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--block", type=int, default=40)
    parser.add_argument("--device-seconds", type=float, default=0.03)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    metrics = TrainingMetrics()
    job = metrics.start_job("bench", "ddp-overhead", gpu_uuids=())
    server = metrics.serve_rank(job.rank, addr="127.0.0.1")
    timer = instrument_rank(job)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    plain = DistributedDataParallel(model(), bucket_cap_mb=1)
    instrumented = DistributedDataParallel(model(), bucket_cap_mb=1)
    timer.register_ddp(instrumented)
    optimizers = {
        "plain": torch.optim.SGD(plain.parameters(), lr=1e-3),
        "instrumented": torch.optim.SGD(instrumented.parameters(), lr=1e-3),
    }
    runs: dict[str, tuple[DistributedDataParallel, JobMetrics | None, CollectiveTimer | None]] = {
        "plain": (plain, None, None),
        "instrumented": (instrumented, job, timer),
    }
    for name, (ddp, j, t) in runs.items():  # warm-up (bucket rebuilding, allocator)
        for _ in range(10):
            step(ddp, optimizers[name], x, y, args.device_seconds, j, t)
    blocks: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        order = ("plain", "instrumented") if pair % 2 == 0 else ("instrumented", "plain")
        for name in order:
            ddp, j, t = runs[name]
            dist.barrier()
            began = time.perf_counter()
            for _ in range(args.block):
                step(ddp, optimizers[name], x, y, args.device_seconds, j, t)
            blocks.append({"pair": pair, "run": name, "seconds_per_step": (time.perf_counter() - began) / args.block})
    buckets = len(list(instrumented.parameters()))
    if rank == 0:
        gradient_bytes = sum(p.numel() * p.element_size() for p in plain.parameters())
        args.out.write_text(json.dumps({"blocks": blocks, "gradient_bytes": gradient_bytes, "parameters": buckets,
                                        "world_size": dist.get_world_size(), "block": args.block,
                                        "device_seconds": args.device_seconds}))  # fmt: skip
    job.finish("completed")
    server.close(final_scrape_wait=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
