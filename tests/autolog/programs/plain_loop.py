"""A PyTorch training loop as PyTorch's own tutorials write one (DataLoader, Adam, a learning-rate
scheduler, torch.save each epoch), with no observability code: what `foxhunt-run` instruments.

    python plain_loop.py OUT_DIR [--epochs N] [--lr LR] [--batches-per-epoch N]

Writes OUT_DIR/result.json (the losses, reproducible: seeded) and OUT_DIR/model_<epoch>.pt.
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
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--batches-per-epoch", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--step-seconds", type=float, default=0.0)
args = parser.parse_args()

torch.manual_seed(0)
samples = args.batches_per_epoch * args.batch_size
features = torch.randn(samples, 32)
targets = (features[:, :4].sum(dim=1) > 0).long()
train_dataloader = DataLoader(TensorDataset(features, targets), batch_size=args.batch_size, shuffle=True)
test_dataloader = DataLoader(TensorDataset(features[:64], targets[:64]), batch_size=args.batch_size)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear_relu_stack = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x):
        return self.linear_relu_stack(x)


model = NeuralNetwork()
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def train(dataloader, model, loss_fn, optimizer):
    model.train()
    total = 0.0
    for X, y in dataloader:
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total += loss.item()
        if args.step_seconds:
            import time

            time.sleep(args.step_seconds)
    return total / len(dataloader)


def test(dataloader, model, loss_fn):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    return test_loss / len(dataloader), correct / len(dataloader.dataset)


losses = []
for t in range(args.epochs):
    train_loss = train(train_dataloader, model, loss_fn, optimizer)
    test_loss, accuracy = test(test_dataloader, model, loss_fn)
    scheduler.step()
    losses.append(train_loss)
    print(f"Epoch {t + 1}: train loss {train_loss:.6f}, test loss {test_loss:.6f}, accuracy {accuracy:.3f}")
    torch.save(model.state_dict(), os.path.join(args.out_dir, f"model_{t + 1}.pt"))

with open(os.path.join(args.out_dir, "result.json"), "w") as result:
    json.dump({"losses": losses, "steps": args.epochs * len(train_dataloader)}, result)
print("Done!")
