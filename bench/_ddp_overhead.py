"""One rank of the DDP overhead benchmark (started by torchrun from `bench.distributed`).

Three DistributedDataParallel copies of one model train in one process group:
- `plain`: DDP's built-in all-reduce (in C++), nothing instrumented;
- `python_hook`: PyTorch's own all-reduce communication hook in Python
  (`default_hooks.allreduce_hook`), nothing else: what any Python communication hook costs;
- `instrumented`: the trainer library's job: the compute phase, per-rank steps, the timed
  communication hook on every gradient bucket and a timed flag all-reduce.
They alternate step by step, each round cycling through every order of the three (none always goes
first or follows the same one), so all see the same machine from one moment to the next. Each
step's wall time and CPU time (of the whole process: the process group's and autograd's threads
too) is recorded.

A step is what a GPU trainer's host does: it waits `--device-seconds` for the device's kernels (a
sleep, which machine load does not stretch), runs forward and backward of a 16-layer MLP whose
gradients DDP reduces in 64 KB buckets (about one per layer: 16 or so per step of about 110 ms,
as many buckets per second as BERT-large or a 1.5B-parameter model reduce with DDP's default 25 MB
buckets), the optimizer step, and one all-reduce of a stop flag. The model is small on purpose: on
a GPU the gradient arithmetic is the device's (in the sleep), and on this CPU a large model would
make the host do it, at CPU memory bandwidth; what the instrumentation adds runs on the host, per
step and per bucket.

After the rounds, rank 0 scrapes its own metrics server `--scrapes` times and measures the CPU the
process spent per scrape (rendering and serving the exposition, and the client's side: an upper
bound). Rank 0 writes everything to `--out`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import urllib.request
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from observability.instrument import TrainingMetrics
from observability.instrument.collectives import ALL_REDUCE
from observability.instrument.integrations.torch_distributed import CollectiveTimer, instrument_rank
from observability.instrument.phases import COMPUTE
from observability.instrument.training import JobMetrics

WIDTH, LAYERS, BATCH = 128, 16, 64
BUCKET_CAP_MB = 0.0625
WARMUP_STEPS = 10
VARIANTS = ("plain", "python_hook", "instrumented")
ORDERS = tuple(itertools.permutations(VARIANTS))


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


def scrape_cpu_seconds(port: int, scrapes: int) -> float:
    """CPU seconds of this process per scrape of its own metrics server (both ends of the request)."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:  # warm-up
        response.read()
    began = time.process_time()
    for _ in range(scrapes):
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
    return (time.process_time() - began) / scrapes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=12, help="steps of each variant per round, one per order")
    parser.add_argument("--device-seconds", type=float, default=0.1)
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per rank: the ranks of a node do not share their cores
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    metrics = TrainingMetrics()
    job = metrics.start_job("bench", "ddp-overhead", gpu_uuids=())
    server = metrics.serve_rank(job.rank, addr="127.0.0.1")
    timer = instrument_rank(job)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    plain = DistributedDataParallel(model(), bucket_cap_mb=BUCKET_CAP_MB)
    python_hook = DistributedDataParallel(model(), bucket_cap_mb=BUCKET_CAP_MB)
    python_hook.register_comm_hook(None, default_hooks.allreduce_hook)
    instrumented = DistributedDataParallel(model(), bucket_cap_mb=BUCKET_CAP_MB)
    timer.register_ddp(instrumented)
    runs: dict[str, tuple[DistributedDataParallel, JobMetrics | None, CollectiveTimer | None]] = {
        "plain": (plain, None, None),
        "python_hook": (python_hook, None, None),
        "instrumented": (instrumented, job, timer),
    }
    optimizers = {name: torch.optim.SGD(ddp.parameters(), lr=1e-4) for name, (ddp, _, _) in runs.items()}

    def timed(name: str) -> tuple[float, float]:
        ddp, j, t = runs[name]
        wall, cpu = time.perf_counter(), time.process_time()
        step(ddp, optimizers[name], x, y, args.device_seconds, j, t)
        return time.perf_counter() - wall, time.process_time() - cpu

    for name in runs:  # warm-up: DDP rebuilds its buckets after the first steps, the allocator settles
        for _ in range(WARMUP_STEPS):
            timed(name)
    rounds: list[dict[str, list[tuple[float, float]]]] = []
    for _ in range(args.rounds):
        steps: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        dist.barrier()
        for cycle in range(args.cycles):
            for name in ORDERS[cycle % len(ORDERS)]:
                steps[name].append(timed(name))
        rounds.append(steps)
    operations, _, _ = timer.counts.totals()[ALL_REDUCE]
    instrumented_steps = WARMUP_STEPS + args.rounds * args.cycles
    buckets = operations / instrumented_steps - 1  # every step: its gradient buckets and the flag
    gradient_bytes = sum(p.numel() * p.element_size() for p in plain.parameters())
    dist.barrier()
    if rank == 0:
        scrape = scrape_cpu_seconds(server.port, args.scrapes)
        result: dict[str, Any] = {
            "rounds": rounds, "world_size": dist.get_world_size(), "cycles": args.cycles,
            "device_seconds": args.device_seconds, "gradient_bytes": gradient_bytes, "buckets": buckets,
            "bucket_cap_mb": BUCKET_CAP_MB, "scrape_cpu_seconds": scrape, "scrapes": args.scrapes,
        }  # fmt: skip
        args.out.write_text(json.dumps(result))
    dist.barrier()
    job.finish("completed")
    server.close(final_scrape_wait=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
