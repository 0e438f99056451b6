"""DistributedDataParallel as PyTorch's "Getting Started with Distributed Data Parallel" tutorial
writes it: `torch.multiprocessing.spawn` starts the ranks (no launcher, so no RANK or WORLD_SIZE in
their environment), each calls `init_process_group` with its rank and the world size; no
observability code.

    python ddp_spawn.py OUT_DIR --master-port PORT [--world-size N] [--steps N]

Each rank writes OUT_DIR/result-<rank>.json with its optimizer steps.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank: int, world_size: int, master_port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(master_port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def demo_basic(rank: int, world_size: int, master_port: int, steps: int, out_dir: str) -> None:
    setup(rank, world_size, master_port)
    model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for _ in range(steps):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as result:
        json.dump({"steps": steps}, result)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    mp.spawn(  # type: ignore[attr-defined]  # torch does not list it in __all__
        demo_basic,
        args=(args.world_size, args.master_port, args.steps, args.out_dir),
        nprocs=args.world_size,
        join=True,
    )
