"""One rank of tests/trainer/test_ddp_step_timing.py (started by torchrun, two ranks over gloo).

Each scenario trains its own DDP copy of a small model, on its own job, and rank r writes what
its job counted to `--out/rank-<r>.json`:
- `per_step`: DDP's built-in all-reduce timed per step (the default). Rank 1 sleeps
  `SLOW_SECONDS` in compute before each forward (the straggler), so rank 0 waits for it in every
  all-reduce; at step `LIVE_STEP` rank 1 sleeps `LIVE_SECONDS` more between forward and backward,
  and a thread of each rank reads its current phase while rank 0 waits in DDP's reduction. The
  counts are read before and after the job finishes (the last step is counted at the finish).
- `no_sync`: gradient accumulation, two micro-batches per optimizer step, the first under
  `ddp.no_sync()`.
- `unused`: `find_unused_parameters=True` and a layer the forward pass never uses.
- `forward_only`: before each step, a forward pass with gradients enabled and no backward after
  it (a metric on the training batch): DDP reduces nothing for it.
- `sampled`: DDP timing one step in `SAMPLE_EVERY` after its first ten (`sample_every`).
- `per_bucket`: the per-bucket communication hook (`register_ddp(..., per_bucket=True)`).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.collectives import ALL_REDUCE
from foxhunt_trainer.integrations.torch_distributed import CollectiveTimer, instrument_rank
from foxhunt_trainer.phases import COMPUTE
from foxhunt_trainer.training import JobMetrics

WIDTH, BATCH = 64, 8
BUCKET_CAP_MB = 0.01  # a few buckets for this model
STEPS = 6
SLOW_SECONDS = 0.15
LIVE_STEP, LIVE_SECONDS = 3, 0.8
# DDP times its first 10 iterations, then one in SAMPLE_EVERY: the last steps are not timed
SAMPLE_EVERY, SAMPLED_STEPS = 4, 14


class WithUnused(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
        self.unused = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.used(x)
        return out


def model(unused: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    if unused:
        return WithUnused()
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 1),
    )  # fmt: skip


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def counted(timer: Any) -> dict[str, Any]:
    operations, nbytes, busy = timer.counts.totals()[ALL_REDUCE]
    return {"operations": operations, "bytes": nbytes, "busy": busy}


def rebuilt_buckets(ddp: DistributedDataParallel) -> int:
    """The buckets DDP holds after rebuilding them, from its own logging data."""
    data = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    return len(str(data["rebuilt_bucket_sizes"]).split(","))


def instrumented(
    job_id: str, module: torch.nn.Module | None = None, **ddp_kwargs: Any
) -> tuple[JobMetrics, CollectiveTimer, DistributedDataParallel]:
    """A job of its own, its rank instrumented, and a DDP copy of `module` (default: `model()`)."""
    job = TrainingMetrics().start_job("ddp", job_id, gpu_uuids=())
    timer = instrument_rank(job, node="node")
    ddp = DistributedDataParallel(module if module is not None else model(), bucket_cap_mb=BUCKET_CAP_MB, **ddp_kwargs)
    return job, timer, ddp


def train(job: JobMetrics, ddp: DistributedDataParallel, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """`steps` plain optimizer steps in the compute phase, then the job finishes."""
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(steps):
        with job.phase(COMPUTE):
            torch.nn.functional.mse_loss(ddp(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
        job.record_step(samples=BATCH)
    job.finish("completed")


def per_step(rank: int, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("per-step")
    try:
        timer.register_ddp(ddp, dist.group.WORLD)
        refused = ""
    except ValueError as error:  # the process group belongs to the per-bucket hook
        refused = str(error)
    timing = timer.register_ddp(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    live: dict[str, str] = {}
    for step in range(1, STEPS + 1):
        with job.phase(COMPUTE):
            if rank == 1:
                time.sleep(SLOW_SECONDS)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            reader = None
            if step == LIVE_STEP:
                # halfway through rank 1's pause rank 0 has long finished its backward computation
                reader = threading.Timer(LIVE_SECONDS / 2, lambda: live.update(phase=job.phases.current))
                reader.start()
                if rank == 1:
                    time.sleep(LIVE_SECONDS)
            loss.backward()  # type: ignore[no-untyped-call]
            if reader is not None:
                reader.join()
            optimizer.step()
            optimizer.zero_grad()
        job.record_step(samples=BATCH)
    before_finish = counted(timer)
    job.finish("completed")
    data = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    return {
        "before_finish": before_finish,
        "after_finish": counted(timer),
        "phases": job.phases.totals(),
        "wall": job.phases.wall(),
        "live_phase": live.get("phase"),
        "gradient_bytes": parameter_bytes(ddp.module),
        "rebuilt_buckets": rebuilt_buckets(ddp),
        "comm_hook": data.get("comm_hook", ""),
        "bytes_per_step": timing.bytes_per_step if timing is not None else None,
        "steps": job.steps_done,
        "refused_group": refused,
    }


def no_sync(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("no-sync")
    timer.register_ddp(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(3):
        with job.phase(COMPUTE):
            with ddp.no_sync():
                torch.nn.functional.mse_loss(ddp(x), y).backward()  # type: ignore[no-untyped-call]
            torch.nn.functional.mse_loss(ddp(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
        job.record_step(samples=2 * BATCH)
    job.finish("completed")
    return {**counted(timer), "gradient_bytes": parameter_bytes(ddp.module), "steps": job.steps_done}


def unused(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("unused", model(unused=True), find_unused_parameters=True)
    timer.register_ddp(ddp)
    train(job, ddp, x, y, 3)
    return {**counted(timer), "parameter_bytes": parameter_bytes(ddp.module), "steps": job.steps_done}


def forward_only(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("forward-only")
    timer.register_ddp(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(3):
        with job.phase(COMPUTE):
            ddp(x).mean().item()  # no backward: nothing reduced
            torch.nn.functional.mse_loss(ddp(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
        job.record_step(samples=BATCH)
    job.finish("completed")
    return {**counted(timer), "gradient_bytes": parameter_bytes(ddp.module), "steps": job.steps_done,
            "rebuilt_buckets": rebuilt_buckets(ddp)}  # fmt: skip


def sampled(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("sampled")
    try:
        timer.register_ddp(ddp, sample_every=0)
        refused = ""
    except ValueError as error:
        refused = str(error)
    timer.register_ddp(ddp, sample_every=SAMPLE_EVERY)
    train(job, ddp, x, y, SAMPLED_STEPS)
    data = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    return {
        **counted(timer), "gradient_bytes": parameter_bytes(ddp.module), "steps": job.steps_done,
        "rebuilt_buckets": rebuilt_buckets(ddp), "last_timed": data["iteration"], "refused": refused,
    }  # fmt: skip


def per_bucket(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    job, timer, ddp = instrumented("per-bucket")
    timing = timer.register_ddp(ddp, per_bucket=True)
    train(job, ddp, x, y, 3)
    data = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    return {
        **counted(timer), "gradient_bytes": parameter_bytes(ddp.module), "steps": job.steps_done,
        "comm_hook": data.get("comm_hook", ""), "returned": timing is not None,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    result = {
        "per_step": per_step(rank, x, y),
        "no_sync": no_sync(x, y),
        "unused": unused(x, y),
        "forward_only": forward_only(x, y),
        "sampled": sampled(x, y),
        "per_bucket": per_bucket(x, y),
    }
    (args.out / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
