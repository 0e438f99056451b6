"""An Optuna study of PyTorch trials as Optuna's own examples write one (an objective that trains,
reports each epoch and prunes), with no observability code.

    python optuna_study.py OUT_DIR [--trials N]
"""

import argparse
import json
import os

import optuna
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("--trials", type=int, default=6)
args = parser.parse_args()

torch.manual_seed(1)
x = torch.randn(512, 4)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])


def objective(trial):
    lr = trial.suggest_float("lr", 1e-3, 0.3, log=True)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(5):
        for i in range(0, len(x), 64):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[i : i + 64]).squeeze(1), y[i : i + 64])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val = nn.functional.mse_loss(model(x).squeeze(1), y).item()
        trial.report(val, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return val


optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(study_name="mlp-lr", sampler=optuna.samplers.TPESampler(seed=0))
study.optimize(objective, n_trials=args.trials)

states: dict[str, int] = {}
for trial in study.trials:
    states[trial.state.name.lower()] = states.get(trial.state.name.lower(), 0) + 1
with open(os.path.join(args.out_dir, "result.json"), "w") as result:
    json.dump({"best_value": study.best_value, "states": states, "steps": args.trials * 5 * 8}, result)
