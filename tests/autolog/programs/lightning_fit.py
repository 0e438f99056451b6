"""A Lightning fit as Lightning's own tutorials write it (a LightningModule, a Trainer, fit), with
no observability code; from the `pytorch_lightning` package, or from the `lightning` package
(`import lightning as L`, as Lightning's current documentation writes it).

    python lightning_fit.py OUT_DIR [--epochs N] [--package lightning]
"""

import argparse
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--package", choices=["pytorch_lightning", "lightning"], default="pytorch_lightning")
args = parser.parse_args()
if args.package == "lightning":
    import lightning as pl
else:
    import pytorch_lightning as pl  # type: ignore[no-redef]


class LitRegression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).squeeze(1), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x).squeeze(1), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


torch.manual_seed(0)
x = torch.randn(512, 4)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
train_loader = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32)
val_loader = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=128)
trainer = pl.Trainer(
    max_epochs=args.epochs,
    default_root_dir=args.out_dir,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    accelerator="cpu",
)
trainer.fit(LitRegression(), train_loader, val_loader)

with open(os.path.join(args.out_dir, "result.json"), "w") as result:
    json.dump(
        {"global_step": trainer.global_step, "samples": args.epochs * 384, "trainer": type(trainer).__module__}, result
    )
