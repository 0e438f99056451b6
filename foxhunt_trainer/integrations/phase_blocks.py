"""Phase blocks opened and closed by a framework's hooks (a start hook and an end hook, not a
`with` block): one block open at a time, on top of whatever phase the job is in."""

from __future__ import annotations

from contextlib import AbstractContextManager

from foxhunt_trainer.training import JobMetrics


class PhaseBlocks:
    """`switch(phase)` closes the open block and opens one in `phase`; `close()` ends it, and the
    phase the job was in before resumes."""

    def __init__(self, job: JobMetrics) -> None:
        self._job = job
        self._open: AbstractContextManager[None] | None = None
        self.current: str | None = None

    def switch(self, phase: str) -> None:
        if phase == self.current:
            return
        self.close()
        block = self._job.phase(phase)
        block.__enter__()
        self._open, self.current = block, phase

    def close(self) -> None:
        if self._open is not None:
            block, self._open, self.current = self._open, None, None
            block.__exit__(None, None, None)
