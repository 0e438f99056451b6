"""Bounded remediation of non-finite training: roll back to the last good checkpoint, lower the
learning rate and continue, at most a configured number of times per job.

Opt-in per stack (the training job template sets the environment below from the stack file) and
per job (the job's own environment, or a `RemediationPolicy` the training code passes). On a
non-finite loss or gradient `Remediation.recover(what)`:

- restores the job's `last_good_checkpoint` (model, optimizer, scheduler and step: the framework
  integration's `restore`), lowers the learning rate by `lr_factor`, sets the rank's step count
  back to the checkpoint's and counts the compute until it is back where it was as lost work
  (`JobMetrics.rewind_steps`, `mark_lost_work`: the "lost_work" phase);
- counts the rollback (`ml_training_rollbacks_total`), sets the budget left
  (`ml_training_rollback_budget`) and logs it, with the trace id of the "training.rollback" span;
- or, when remediation is off, the budget is spent or there is no good checkpoint, ends the process
  with a documented exit code (`EXIT_CODES`) that the Job's podFailurePolicy fails the Job on at
  once: a restart would replay the same divergence. Under torchrun the code is also recorded for
  `foxhunt-torchrun` (`foxhunt_trainer.launcher`), which exits with it: torchrun's own code would not
  tell.

Framework-free: `restore` and `lower_lr` come from the integration
(`foxhunt_trainer.integrations.torch_remediation` for PyTorch).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from opentelemetry import trace

from foxhunt_trainer.checkpoints import GoodCheckpoint
from foxhunt_trainer.launcher import (
    EXIT_CODES,
    EXIT_NO_GOOD_CHECKPOINT,
    EXIT_REMEDIATION_OFF,
    EXIT_ROLLBACK_BUDGET_SPENT,
    UNFIXABLE_EXIT_CODES,
    record_exit_code,
)
from foxhunt_trainer.trainer_env import (
    REMEDIATION_ENABLED_ENV as ENABLED_ENV,
)
from foxhunt_trainer.trainer_env import (
    REMEDIATION_LR_FACTOR_ENV as LR_FACTOR_ENV,
)
from foxhunt_trainer.trainer_env import (
    REMEDIATION_MAX_ROLLBACKS_ENV as MAX_ROLLBACKS_ENV,
)
from foxhunt_trainer.trainer_env import (
    REMEDIATION_MAX_ROLLBACKS_LIMIT as MAX_ROLLBACKS_LIMIT,
)
from foxhunt_trainer.training import JobMetrics

LOG = logging.getLogger(__name__)
TRACER = trace.get_tracer(__name__)

__all__ = [
    "ENABLED_ENV",
    "EXIT_CODES",
    "EXIT_NO_GOOD_CHECKPOINT",
    "EXIT_REMEDIATION_OFF",
    "EXIT_ROLLBACK_BUDGET_SPENT",
    "LR_FACTOR_ENV",
    "MAX_ROLLBACKS_ENV",
    "MAX_ROLLBACKS_LIMIT",
    "UNFIXABLE_EXIT_CODES",
    "NonFiniteError",
    "Remediation",
    "RemediationPolicy",
]


class NonFiniteError(SystemExit):
    """Non-finite training that remediation does not (or no longer) fix: exits with `code`, and the
    job records the failure as `nan`."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code)
        self.what = what

    def __str__(self) -> str:
        return f"non-finite {self.what}: {EXIT_CODES[int(self.code or 0)]} (exit code {self.code})"


@dataclass(frozen=True)
class RemediationPolicy:
    """Whether a job rolls back non-finite training, how often at most, and by how much each
    rollback lowers the learning rate."""

    enabled: bool = False
    max_rollbacks: int = 3
    lr_factor: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.max_rollbacks <= MAX_ROLLBACKS_LIMIT:
            raise ValueError(f"max_rollbacks must be 0 to {MAX_ROLLBACKS_LIMIT}, got {self.max_rollbacks}")
        if not 0 < self.lr_factor < 1:
            raise ValueError(f"lr_factor must be above 0 and below 1 (it lowers the rate), got {self.lr_factor}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RemediationPolicy:
        """The policy the job's environment sets (the template's, from the stack file); off when unset."""
        env = os.environ if environ is None else environ
        enabled = env.get(ENABLED_ENV, "off").strip().lower()
        if enabled not in ("on", "off"):
            raise ValueError(f"{ENABLED_ENV}={enabled!r}: expected on or off")
        default = cls()
        try:
            max_rollbacks = int(env.get(MAX_ROLLBACKS_ENV, default.max_rollbacks))
            lr_factor = float(env.get(LR_FACTOR_ENV, default.lr_factor))
        except ValueError as exc:
            raise ValueError(
                f"{MAX_ROLLBACKS_ENV} must be a whole number and {LR_FACTOR_ENV} a number: {exc}"
            ) from None
        return cls(enabled=enabled == "on", max_rollbacks=max_rollbacks, lr_factor=lr_factor)


class Remediation:
    """One job's rollbacks; see the module docstring."""

    def __init__(
        self,
        job: JobMetrics,
        policy: RemediationPolicy,
        *,
        restore: Callable[[GoodCheckpoint], None],
        lower_lr: Callable[[float], None],
    ) -> None:
        self.job = job
        self.policy = policy
        self._restore = restore
        self._lower_lr = lower_lr
        self.rollbacks = 0
        self._publish_budget()

    @property
    def budget_left(self) -> int:
        return max(0, self.policy.max_rollbacks - self.rollbacks) if self.policy.enabled else 0

    def _publish_budget(self) -> None:
        m = self.job._m
        m.rollback_budget.labels(model_type=self.job.model_type, job_id=self.job.job_id).set(self.budget_left)

    def recover(self, what: str) -> GoodCheckpoint:
        """The loss or gradients (`what`) went non-finite: roll back and return the checkpoint rolled
        back to, or raise `NonFiniteError` with the exit code that says why not."""
        job = self.job
        labels = {"model_type": job.model_type, "job_id": job.job_id, "what": what}
        checkpoint = job.last_good_checkpoint
        if not self.policy.enabled:
            code = EXIT_REMEDIATION_OFF
        elif self.rollbacks >= self.policy.max_rollbacks:
            code = EXIT_ROLLBACK_BUDGET_SPENT
        elif checkpoint is None:
            code = EXIT_NO_GOOD_CHECKPOINT
        else:
            code = 0
        if code:
            LOG.error("non-finite training not remediated: %s", EXIT_CODES[code], extra={**labels, "exit_code": code})
            record_exit_code(code)  # for foxhunt-torchrun, whose own exit code torchrun's would hide
            raise NonFiniteError(code, what)
        assert checkpoint is not None
        with TRACER.start_as_current_span("training.rollback") as span:
            steps_before = job.steps_done
            self._restore(checkpoint)
            self._lower_lr(self.policy.lr_factor)
            job.rewind_steps(checkpoint.step)
            job.mark_lost_work(until_step=steps_before)
            self.rollbacks += 1
            job.record_rollback()
            self._publish_budget()
            span.set_attributes(
                {"checkpoint.step": checkpoint.step, "rollback.number": self.rollbacks, "rollback.what": what}
            )
            LOG.warning(
                "non-finite %s: rolled back to the checkpoint of step %d and lowered the learning rate by %g "
                "(rollback %d of %d)",
                what,
                checkpoint.step,
                self.policy.lr_factor,
                self.rollbacks,
                self.policy.max_rollbacks,
                extra={
                    **labels,
                    "checkpoint": checkpoint.path,
                    "checkpoint_step": checkpoint.step,
                    "steps_lost": steps_before - checkpoint.step,
                    "rollback": self.rollbacks,
                },
            )
        return checkpoint
