"""A Lightning fit on two processes with Lightning's own launcher, as its multi-GPU docs write it
(`Trainer(strategy="ddp", devices=2)`, started with plain `python`: Lightning starts the second
process itself), on the CPU with gloo; no observability code.

    python lightning_ddp.py OUT_DIR [--epochs N]

Each rank writes OUT_DIR/result-<rank>.json with the trainer's global step.
"""

import argparse
import json
import os

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


class LitRegression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x).squeeze(1), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


torch.manual_seed(0)
x = torch.randn(256, 4)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
trainer = pl.Trainer(
    max_epochs=args.epochs,
    strategy="ddp",
    devices=2,
    accelerator="cpu",
    default_root_dir=args.out_dir,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    enable_checkpointing=False,
)
trainer.fit(LitRegression(), DataLoader(TensorDataset(x, y), batch_size=32))

with open(os.path.join(args.out_dir, f"result-{trainer.global_rank}.json"), "w") as result:
    json.dump({"global_step": trainer.global_step, "world_size": trainer.world_size}, result)
