"""A DistributedDataParallel script as PyTorch's DDP tutorial writes one (torchrun's environment,
`init_process_group`, the model wrapped, a DistributedSampler), with no observability code.

    torchrun --nproc-per-node=2 ddp_program.py OUT_DIR [--epochs N] [--slow-rank R --slow-seconds S]

`--slow-rank` makes one rank's every step longer (a slower node, a throttled GPU).

Each rank writes OUT_DIR/result-<rank>.json with its optimizer steps.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batches", type=int, default=20)
parser.add_argument("--step-seconds", type=float, default=0.02)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-seconds", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
features = torch.randn(args.batches * 16 * dist.get_world_size(), 10)
targets = features.sum(dim=1, keepdim=True)
dataset = TensorDataset(features, targets)
sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)

model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)))
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

steps = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        steps += 1
        time.sleep(args.step_seconds + (args.slow_seconds if rank == args.slow_rank else 0.0))
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)

with open(os.path.join(args.out_dir, f"result-{rank}.json"), "w") as result:
    json.dump({"steps": steps, "samples": steps * 16}, result)
dist.destroy_process_group()
