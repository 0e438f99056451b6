"""PyTorch: a resumable training state (model, optimizer, scheduler, step), saved through
`job.checkpoint`, and the bounded rollback of non-finite training on top of it.

    state = TrainingState(model, optimizer, scheduler, directory="/checkpoints/job-42")
    start = state.resume_latest(job)                       # a restarted pod resumes, else 0
    fix = state.remediation(job)                           # RemediationPolicy.from_env() by default
    for step in range(start, steps):
        loss = ...; loss.backward()
        if not math.isfinite(loss.item()) or not state.gradients_finite():
            fix.recover("loss")                            # rolls back, or exits with its code
            continue
        optimizer.step(); scheduler.step(); job.record_step()
        if step % 100 == 0:
            state.save(job, step=job.steps_done)

A save goes through `job.checkpoint` (timed, failures classified, non-finite weights refused);
only a good save updates `latest-good.json` in the directory, so a restarted pod (a new process)
resumes from the latest checkpoint worth resuming from, at its step, with its optimizer and
scheduler state.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from foxhunt_trainer.checkpoints import GoodCheckpoint
from foxhunt_trainer.remediation import Remediation, RemediationPolicy
from foxhunt_trainer.training import JobMetrics

MANIFEST = "latest-good.json"


class TrainingState:
    """What a rollback and a restart restore: the model, optimizer and (optional) LR scheduler."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        *,
        directory: str | os.PathLike[str],
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.directory = Path(directory)

    def state_dict(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
        }

    def save(self, job: JobMetrics, *, step: int) -> bool:
        """Save the state at `step` through `job.checkpoint`; returns whether it counted as good
        (then it is the one a rollback or a restart restores)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"step-{step:09d}.pt"
        state = self.state_dict(step)
        with job.checkpoint(path, step=step, state=state["model"]) as ckpt:
            if ckpt.finite:
                torch.save(state, path)
        if ckpt.good:
            manifest = {"path": str(path), "step": step, "time": time.time()}
            partial = self.directory / f".{MANIFEST}.partial"
            partial.write_text(json.dumps(manifest))
            partial.replace(self.directory / MANIFEST)  # atomic: a restart never reads half a manifest
        return bool(ckpt.good)

    def restore(self, checkpoint: GoodCheckpoint) -> None:
        """Load the model, optimizer and scheduler state of `checkpoint`."""
        state = torch.load(checkpoint.path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])

    def lower_lr(self, factor: float) -> None:
        """Multiply the learning rate by `factor`, in the optimizer and in the scheduler's base rates
        (so the schedule goes on from the lower rate instead of restoring the old one)."""
        for group in self.optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
        if self.scheduler is not None:
            self.scheduler.base_lrs = [lr * factor for lr in self.scheduler.base_lrs]
            last = getattr(self.scheduler, "_last_lr", None)
            if last is not None:
                self.scheduler._last_lr = [lr * factor for lr in last]

    def gradients_finite(self) -> bool:
        """Whether every gradient is finite (one reduction, one device synchronisation)."""
        grads = [p.grad.detach() for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return True
        total = torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]).sum()
        return math.isfinite(float(total))

    def resume_latest(self, job: JobMetrics) -> int:
        """A restarted pod: restore the latest good checkpoint of the directory and return its step
        (the job's step count and last good checkpoint follow, the resume is counted); 0 when there
        is none."""
        manifest = self.directory / MANIFEST
        if not manifest.is_file():
            return 0
        entry = json.loads(manifest.read_text())
        checkpoint = GoodCheckpoint(path=str(entry["path"]), step=int(entry["step"]), time=float(entry["time"]))
        self.restore(checkpoint)
        job.record_resume(checkpoint)
        return checkpoint.step

    def remediation(self, job: JobMetrics, policy: RemediationPolicy | None = None) -> Remediation:
        """The job's bounded rollbacks onto this state (the policy from the environment by default)."""
        chosen = policy if policy is not None else RemediationPolicy.from_env()
        return Remediation(job, chosen, restore=self.restore, lower_lr=self.lower_lr)
