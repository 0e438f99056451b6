"""Phase blocks opened and closed by a framework's hooks (a start hook and an end hook, not a
`with` block): one block open at a time, on top of whatever phase the job is in."""

from __future__ import annotations

from foxhunt_trainer.phases import PhaseBlock
from foxhunt_trainer.training import JobMetrics


class PhaseBlocks:
    """`switch(phase)` counts the time from now in `phase` (one block, opened at the first switch
    and switched in place: one clock reading a switch); `close()` ends it, and the phase the job
    was in before resumes."""

    def __init__(self, job: JobMetrics) -> None:
        self._job = job
        self._open: PhaseBlock | None = None
        self.current: str | None = None

    def switch(self, phase: str) -> None:
        if phase == self.current:
            return
        if self._open is None:
            self._open = self._job.phases.block(phase)
        else:
            self._open.switch(phase)
        self.current = phase

    def close(self) -> None:
        if self._open is not None:
            block, self._open, self.current = self._open, None, None
            block.close()
