"""Phase blocks opened and closed by a framework's hooks (a start hook and an end hook, not a
`with` block): one block open at a time, on top of whatever phase the job is in."""

from __future__ import annotations

from foxhunt_trainer.phases import HookedBlock
from foxhunt_trainer.training import JobMetrics


class PhaseBlocks(HookedBlock):
    """`switch(phase)` counts the time from now in `phase` (one block, opened at the first switch
    and switched in place: one clock reading a switch); `close()` ends it, and the phase the job
    was in before resumes."""

    def __init__(self, job: JobMetrics) -> None:
        super().__init__(job.phases)
