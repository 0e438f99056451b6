"""Optimizer steps a framework's hooks count, handed to the job in batches: at most every
`RECORD_EVERY_SECONDS` and wherever the caller needs the job's count exact (a check, the end of
training, an error). Counting each step at once (`record_step`: the job's locks and a wall-clock
reading) would be most of a framework callback's cost on a fast step; a scrape sees the counts at
most that late. The steps also count down to the callback's next check."""

from __future__ import annotations

import math

from foxhunt_trainer.training import JobMetrics

RECORD_EVERY_SECONDS = 0.1


class StepBatches:
    def __init__(self, job: JobMetrics, check_every: int) -> None:
        self._job = job
        self._now = job.phases.clock  # the job's time source, which a hook may have read already
        self._check_every = check_every
        self._until_check = check_every
        self.unrecorded = 0  # steps counted and not yet handed to the job
        # When the steps waiting are due for a hand-over (`due`; a hook that already runs every
        # batch compares the clock with it itself).
        self.record_by = -math.inf

    def start(self) -> int:
        """Training starts: the checks fall on every `check_every`-th step of the job's count;
        returns the steps to the first (a hook that counts the steps itself counts down from it)."""
        self._until_check = self._check_every - (self._job.steps_done + self.unrecorded) % self._check_every
        return self._until_check

    def step(self) -> bool:
        """Count one optimizer step; returns whether it is a check step."""
        self.unrecorded += 1
        self._until_check -= 1
        if self._until_check:
            return False
        self._until_check = self._check_every
        return True

    def due(self) -> bool:
        """Whether steps wait and the last hand-over is `RECORD_EVERY_SECONDS` old (`record_by`
        is in the job's time source's seconds)."""
        return bool(self.unrecorded) and self._now() >= self.record_by

    def record(self, samples: int) -> bool:
        """Hand the steps counted since the last call to the job, with `samples` (the samples of
        them all); returns whether there were any."""
        if not self.unrecorded:
            return False
        self._job.record_step(samples=samples, count=self.unrecorded)
        self.unrecorded = 0
        self.record_by = self._now() + RECORD_EVERY_SECONDS
        return True
