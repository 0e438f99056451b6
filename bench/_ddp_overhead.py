"""One rank of the DDP overhead benchmark (started by torchrun from `bench.distributed`).

Four DistributedDataParallel copies of one model train in one process group:
- `plain`: DDP's built-in all-reduce (in C++), nothing instrumented;
- `python_hook`: PyTorch's own all-reduce communication hook in Python
  (`default_hooks.allreduce_hook`), nothing else: what any Python communication hook costs;
- `instrumented`: the trainer library's default: the compute phase, per-rank steps, DDP's
  gradient all-reduce timed per step (`register_ddp(ddp)`: DDP's built-in all-reduce kept) and a
  timed flag all-reduce;
- `per_bucket`: the same with the per-bucket communication hook (`register_ddp(ddp,
  per_bucket=True)`).
They alternate step by step, each round cycling through orders of the four (the rounds continue
where the last left off, so none always goes first or follows the same one), so all see the same
machine from one moment to the next. Each step's wall time and CPU time (of the whole process:
the process group's and autograd's threads too) is recorded.

A step is what a GPU trainer's host does: it waits `--device-seconds` for the device's kernels (a
sleep, which machine load does not stretch), runs forward and backward of a 16-layer MLP whose
gradients DDP reduces in 64 KB buckets (about one per layer: 16 or so per step of about 110 ms,
as many buckets per second as BERT-large or a 1.5B-parameter model reduce with DDP's default 25 MB
buckets), the optimizer step, and one all-reduce of a stop flag. The model is small on purpose: on
a GPU the gradient arithmetic is the device's (in the sleep), and on this CPU a large model would
make the host do it, at CPU memory bandwidth; what the instrumentation adds runs on the host, per
step and per bucket.

Then the fixed cost per step, sharper than the rounds' spread: the same four variants on a
one-layer model (one bucket) without device time, steps of well under a millisecond, in
`FIXED_RUNS` interleaved runs of `--fixed-steps` steps; per variant the least CPU time per step
over the runs.

After that, rank 0 scrapes its own metrics server `--scrapes` times and measures the CPU the
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

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.collectives import ALL_REDUCE
from foxhunt_trainer.integrations.torch_distributed import CollectiveTimer, instrument_rank
from foxhunt_trainer.phases import COMPUTE
from foxhunt_trainer.server import MetricsServer, rank_metrics_port
from foxhunt_trainer.training import JobMetrics

WIDTH, LAYERS, BATCH = 128, 16, 64
BUCKET_CAP_MB = 0.0625
WARMUP_STEPS = 10
VARIANTS = ("plain", "python_hook", "instrumented", "per_bucket")
ORDERS = tuple(itertools.permutations(VARIANTS))
FIXED_RUNS = 15


def model(layers: int = LAYERS, width: int = WIDTH) -> torch.nn.Module:
    torch.manual_seed(0)
    stack: list[torch.nn.Module] = []
    for _ in range(layers):
        stack += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*stack, torch.nn.Linear(width, 1))


Run = tuple[DistributedDataParallel, torch.optim.Optimizer, JobMetrics | None, CollectiveTimer | None]


def variants(name: str, layers: int, width: int) -> dict[str, Run]:
    """The four DDP copies of one model; each instrumented one is a job of its own trainer (one
    rank's placement per registry), `name` and the variant its job ID."""
    runs: dict[str, Run] = {}
    for variant in VARIANTS:
        ddp = DistributedDataParallel(model(layers, width), bucket_cap_mb=BUCKET_CAP_MB)
        job: JobMetrics | None = None
        timer: CollectiveTimer | None = None
        if variant == "python_hook":
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        elif variant in ("instrumented", "per_bucket"):
            job = TrainingMetrics().start_job("bench", f"{name}-{variant}", gpu_uuids=())
            timer = instrument_rank(job)
            timer.register_ddp(ddp, per_bucket=variant == "per_bucket")
        runs[variant] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-4), job, timer)
    return runs


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
    parser.add_argument("--fixed-steps", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per rank: the ranks of a node do not share their cores
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    runs = variants("ddp-overhead", LAYERS, WIDTH)
    served = runs["instrumented"][2]
    assert served is not None
    server = MetricsServer(served.registry, rank_metrics_port(served.rank.local_rank), "127.0.0.1")

    def timed(name: str, device_seconds: float, chosen: dict[str, Run], xs: torch.Tensor) -> tuple[float, float]:
        ddp, optimizer, job, timer = chosen[name]
        wall, cpu = time.perf_counter(), time.process_time()
        step(ddp, optimizer, xs, y, device_seconds, job, timer)
        return time.perf_counter() - wall, time.process_time() - cpu

    for name in runs:  # warm-up: DDP rebuilds its buckets after the first steps, the allocator settles
        for _ in range(WARMUP_STEPS):
            timed(name, args.device_seconds, runs, x)
    rounds: list[dict[str, list[tuple[float, float]]]] = []
    for index in range(args.rounds):
        steps: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        dist.barrier()
        for cycle in range(args.cycles):
            for name in ORDERS[(index * args.cycles + cycle) % len(ORDERS)]:
                steps[name].append(timed(name, args.device_seconds, runs, x))
        rounds.append(steps)

    # the fixed cost per step: one bucket, no device time
    tiny = variants("ddp-fixed-cost", 0, 1)
    xs = torch.randn(BATCH, 1)
    for name in tiny:
        for _ in range(WARMUP_STEPS):
            timed(name, 0.0, tiny, xs)
    fixed: dict[str, list[float]] = {name: [] for name in tiny}
    for index in range(FIXED_RUNS):
        dist.barrier()
        for name in ORDERS[index % len(ORDERS)]:
            began = time.process_time()
            for _ in range(args.fixed_steps):
                timed(name, 0.0, tiny, xs)
            fixed[name].append((time.process_time() - began) / args.fixed_steps)

    per_bucket_timer = runs["per_bucket"][3]
    assert per_bucket_timer is not None
    operations, _, _ = per_bucket_timer.counts.totals()[ALL_REDUCE]
    per_bucket_steps = WARMUP_STEPS + args.rounds * args.cycles
    buckets = operations / per_bucket_steps - 1  # every step: its gradient buckets and the flag
    gradient_bytes = sum(p.numel() * p.element_size() for p in runs["plain"][0].parameters())
    dist.barrier()
    if rank == 0:
        scrape = scrape_cpu_seconds(server.port, args.scrapes)
        result: dict[str, Any] = {
            "rounds": rounds, "world_size": dist.get_world_size(), "cycles": args.cycles,
            "device_seconds": args.device_seconds, "gradient_bytes": gradient_bytes, "buckets": buckets,
            "bucket_cap_mb": BUCKET_CAP_MB, "scrape_cpu_seconds": scrape, "scrapes": args.scrapes,
            "fixed_cpu_seconds": {name: min(times) for name, times in fixed.items()},
            "fixed_runs": FIXED_RUNS, "fixed_steps": args.fixed_steps,
        }  # fmt: skip
        args.out.write_text(json.dumps(result))
    dist.barrier()
    for chosen in (runs, tiny):
        for _, _, job, _ in chosen.values():
            if job is not None:
                job.finish("completed")
    server.close(final_scrape_wait=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
