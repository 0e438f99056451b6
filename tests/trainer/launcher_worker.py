"""A torchrun worker for tests/trainer/test_launcher.py: each rank serves nothing and imports no
framework, and ends as it is told.

    python -m tests.trainer.launcher_worker --ranks 1 --ending budget-spent [--others-sleep 30]

The ranks in `--ranks` (comma-separated, `all` or `none`) end with `--ending`:
- `budget-spent`: non-finite training with the rollback budget spent, through the trainer
  library's remediation (a real `Remediation` of a real job): exit 80;
- `retriable`: exit 3 (a failure a restart may fix);
- `clean`: exit 0.
The other ranks sleep `--others-sleep` seconds and exit 0 (torchrun stops them when a rank fails).
Every rank writes `started-<rank>` into `--out`, and `sigterm-<rank>` there when SIGTERM reaches it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from observability.instrument import TrainingMetrics
from observability.instrument.remediation import Remediation, RemediationPolicy


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
