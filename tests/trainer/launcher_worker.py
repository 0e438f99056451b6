"""A torchrun worker for tests/trainer/test_launcher.py: each rank serves nothing and imports no
framework, and ends as it is told.

    python -m tests.trainer.launcher_worker --ranks 1 --ending budget-spent [--others-sleep 30]

The ranks in `--ranks` (comma-separated, `all` or `none`) end with `--ending`:
- `budget-spent`: non-finite training with the rollback budget spent, through the trainer
  library's remediation (a real `Remediation` of a real job): exit 80;
- `retriable`: exit 3 (a failure a restart may fix);
- `clean`: exit 0.
The other ranks sleep `--others-sleep` seconds and exit 0 (torchrun stops them when a rank fails).
Every rank writes `started-<rank>` into `--out`, and `sigterm-<rank>` there when SIGTERM reaches it;
a rank in `--ranks` ends only once every rank has started.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.remediation import Remediation, RemediationPolicy

STARTUP_TIMEOUT_SECONDS = 120.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", required=True)
    parser.add_argument("--ending", choices=("budget-spent", "retriable", "clean"), required=True)
    parser.add_argument("--others-sleep", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ["RANK"])
    out = Path(args.out)

    def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
        (out / f"sigterm-{rank}").write_text("")
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    (out / f"started-{rank}").write_text(str(os.getpid()))
    named = {"all": {rank}, "none": set()}
    chosen = named[args.ranks] if args.ranks in named else {int(r) for r in args.ranks.split(",")}
    if rank not in chosen:
        time.sleep(args.others_sleep)
        return 0
    # Every rank runs (and has its SIGTERM handler) before one ends: torchrun stops the others as
    # soon as a rank fails, and a rank still importing would be killed before it started.
    world_size, deadline = int(os.environ["WORLD_SIZE"]), time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not all((out / f"started-{r}").exists() for r in range(world_size)):
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: not every one of {world_size} ranks started within {STARTUP_TIMEOUT_SECONDS:g} s")
        time.sleep(0.05)
    if args.ending == "retriable":
        return 3
    if args.ending == "clean":
        return 0
    metrics = TrainingMetrics()
    with metrics.job("dqn", "launcher-test") as job:
        fix = Remediation(job, RemediationPolicy(enabled=True, max_rollbacks=0), restore=print, lower_lr=print)
        fix.recover("loss")  # the budget is spent: NonFiniteError, exit code 80
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
