"""A real PyTorch training script with bounded remediation, run as its own process by
tests/trainer/test_remediation.py (the way the training job template runs a trainer).

Linear regression y = 3x (x ~ N(0, 3^2)) with SGD and momentum and a StepLR schedule: at the given
learning rate it diverges until the loss overflows to a non-finite value; remediation rolls it back
to its last good checkpoint with a lower rate, where it converges. The environment sets the
remediation policy (FOXHUNT_REMEDIATION*). `--exit-at-step` ends the process as a failing pod
would (exit code 3, a retriable failure) after that step; a second run with the same directory
resumes at the latest good checkpoint. The last line on stdout is a JSON summary.

`--port` serves the job's metrics there (from before the first step until a last scrape after the
end, as in a pod) and `--step-seconds` makes each step's compute last that long, so a Prometheus
scraping every second sees the rollbacks, the resume and the lost work.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.contract.exposition import render_text
from foxhunt_trainer.integrations.torch_remediation import TrainingState
from foxhunt_trainer.tracing import init_observability


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--exit-at-step", type=int, default=0)
    parser.add_argument("--job-id", default="remediation-e2e")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)

    init_observability("remediation-trainer")
    torch.manual_seed(7)
    generator = torch.Generator().manual_seed(11)
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000, gamma=0.5)
    metrics = TrainingMetrics()
    state = TrainingState(model, optimizer, scheduler, directory=args.dir)
    losses: list[float] = []
    if args.port:
        server = metrics.serve(args.port, "127.0.0.1")
        while server.page.scrapes_seen == 0:  # scraped before it starts, as a pod's trainer is
            time.sleep(0.05)
    with metrics.job("dqn", args.job_id) as job:
        start = state.resume_latest(job)
        fix = state.remediation(job)
        resumed_momentum = bool(start) and all("momentum_buffer" in s for s in optimizer.state.values())
        if start == 0:
            state.save(job, step=0)
        while job.steps_done < args.steps:
            x = torch.randn(64, 1, generator=generator) * 3
            with job.phase("compute"):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), 3 * x)
                loss.backward()  # type: ignore[no-untyped-call]
                time.sleep(args.step_seconds)
            value = float(loss.detach())
            if not job.check_finite(value) or not state.gradients_finite():
                fix.recover("loss")
                continue
            optimizer.step()
            scheduler.step()
            losses.append(value)
            done = job.record_step(samples=64)
            if done % args.checkpoint_every == 0:
                state.save(job, step=done)
            if args.exit_at_step and done == args.exit_at_step:
                print(json.dumps({"exited_at": done, "rollbacks": fix.rollbacks}), flush=True)
                return 3
        summary = {
            "resumed_from": start,
            "resumed_momentum": resumed_momentum,
            "scheduler_last_epoch": scheduler.last_epoch,
            "steps_done": job.steps_done,
            "rollbacks": fix.rollbacks,
            "lr": optimizer.param_groups[0]["lr"],
            "final_loss": losses[-1] if losses else None,
            "final_loss_finite": bool(losses) and math.isfinite(losses[-1]),
            "lost_work_seconds": job.phases.totals()["lost_work"],
            "weight": float(model.weight.detach()[0, 0]),
        }
    summary["exposition"] = render_text(metrics.registry).decode()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
