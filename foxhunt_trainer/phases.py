"""Time accounting: every second of a training job's life is in exactly one phase.

A `PhaseClock` is a stack of phases. Its bottom is the job's base phase: "startup" until the first
completed step, "idle" after it (time in no named activity: host overhead between steps, a loop
that waits on nothing the trainer reports). `with clock.phase("compute"):` pushes a phase and pops
it on exit, so phases nest (a checkpoint taken inside a compute block is checkpoint time, and
compute resumes after it); `clock.enter(name)` switches the phase on top of the stack.

The totals only ever grow (they are exported as counters), so time is never moved between phases
after the fact. Work that is lost is counted while it is redone instead: after a rollback,
`clock.substitute("compute", "lost_work")` makes compute time count as lost work until
`clock.substitute("compute", None)` (the job does this by step number: `JobMetrics.mark_lost_work`).

A block that alternates phases in place (`clock.block(name)`, `block.switch(other)`: a data loader
and its compute, a framework's batch hooks) switches without the lock: the switch is queued with
its clock reading and applied, in order, by the clock's next reading or change from any thread, or
by the block itself once `MAX_PENDING_SWITCHES` are queued. A switch queued after a reading that
came later (its thread preempted between its reading and the queue) counts from that reading, so
no total ever shrinks.

Invariant: `sum(clock.totals().values()) == clock.wall()` (up to float rounding), at any moment,
from any thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType

STARTUP = "startup"
DATA_WAIT = "data_wait"
COMPUTE = "compute"
COLLECTIVE = "collective"
CHECKPOINT = "checkpoint"
EVALUATION = "evaluation"
LOST_WORK = "lost_work"
IDLE = "idle"

# Every phase, in the order panels stack them: productive compute first, then the causes of badput.
PHASES: tuple[str, ...] = (STARTUP, DATA_WAIT, COMPUTE, COLLECTIVE, CHECKPOINT, EVALUATION, LOST_WORK, IDLE)
# The phases a trainer names itself; the other two are the clock's base phases.
ACTIVITY_PHASES: tuple[str, ...] = (DATA_WAIT, COMPUTE, COLLECTIVE, CHECKPOINT, EVALUATION, LOST_WORK)
# Block switches queued before the switching block applies them itself (when no reader has).
MAX_PENDING_SWITCHES = 256


def check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown training phase {phase!r}; expected one of {PHASES}")
    return phase


class PhaseClock:
    """Wall time split into phases; thread-safe. `clock` is the time source (monotonic seconds)."""

    def __init__(self, initial: str = STARTUP, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._stack: list[str] = [check_phase(initial)]
        self._substitutes: dict[str, str] = {}
        self._totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._start = self._since = self._latest = clock()
        self._stopped_at: float | None = None
        # Block switches not yet applied: (stack depth, phase, clock reading), oldest first.
        self._pending: deque[tuple[int, str, float]] = deque()
        # The phase time is being counted in right now (the top of the stack, after substitution).
        self._counting = self._counted(self._stack[-1])

    # --- reading ----------------------------------------------------------------------------
    @property
    def clock(self) -> Callable[[], float]:
        """The time source (monotonic seconds) every switch reads."""
        return self._clock

    @property
    def current(self) -> str:
        """The phase time is counted in now (after substitution; the last one once stopped)."""
        with self._lock:
            self._apply_pending()
            return self._counting

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopped_at is not None

    def totals(self) -> dict[str, float]:
        """Seconds per phase since the clock started, the running phase included."""
        with self._lock:
            self._apply_pending()
            totals = dict(self._totals)
            if self._stopped_at is None:
                self._latest = now = self._clock()
                totals[self._counting] += now - self._since
            return totals

    def wall(self) -> float:
        """Seconds since the clock started (until it stopped)."""
        with self._lock:
            end = self._stopped_at if self._stopped_at is not None else self._clock()
            return end - self._start

    # --- switching --------------------------------------------------------------------------
    def enter(self, phase: str) -> str:
        """Switch the phase on top of the stack to `phase`; returns the phase it replaced."""
        check_phase(phase)
        with self._lock:
            self._apply_pending()
            previous = self._stack[-1]
            self._stack[-1] = phase
            self._recount()
            return previous

    def set_base(self, phase: str) -> None:
        """Set the bottom of the stack: the phase time falls back to outside every block."""
        check_phase(phase)
        with self._lock:
            self._apply_pending()
            self._stack[0] = phase
            self._recount()

    @property
    def base(self) -> str:
        with self._lock:
            return self._stack[0]

    def phase(self, phase: str) -> AbstractContextManager[None]:
        """`with clock.phase(name):` counts the block's time in `name`; the previous phase resumes
        after it. Blocks nest; closing one closes any left open inside it."""
        return _PhaseScope(self, check_phase(phase))

    def block(self, phase: str) -> PhaseBlock:
        """Open a block in `phase` whose owner switches its phase in place (`block.switch`) and
        closes it (`block.close()`): what a loop that alternates two phases uses instead of a
        `with` block per phase (one clock reading per switch, which the switch returns)."""
        depth, now = self._push(check_phase(phase))
        return PhaseBlock(self, depth, now)

    def _push(self, phase: str) -> tuple[int, float]:
        """Push `phase` (checked by the caller); returns the stack depth and the clock reading."""
        with self._lock:
            self._apply_pending()
            self._stack.append(phase)
            return len(self._stack), self._recount_now()

    def _apply_pending_now(self) -> None:
        with self._lock:
            self._apply_pending()

    def _close_block(self, depth: int) -> None:
        with self._lock:
            self._apply_pending()
            # Blocks close in order; a block left open by another thread's misuse is closed too.
            del self._stack[max(depth - 1, 1) :]
            self._recount()

    def substitute(self, phase: str, instead: str | None) -> None:
        """Count time in `phase` as `instead` from now on (None: stop substituting)."""
        check_phase(phase)
        with self._lock:
            self._apply_pending()
            if instead is None:
                self._substitutes.pop(phase, None)
            else:
                self._substitutes[phase] = check_phase(instead)
            self._recount()

    def stop(self) -> None:
        """Freeze the totals (a finished job); later switches are ignored."""
        with self._lock:
            self._apply_pending()
            if self._stopped_at is None:
                now = self._clock()
                self._totals[self._counting] += now - self._since
                self._stopped_at = self._since = now

    # --- internals (lock held) -----------------------------------------------------------------
    def _apply_pending(self) -> None:
        """Apply the queued block switches in order, each at its reading (or at the latest reading
        the clock has counted to, when that came later)."""
        pending = self._pending
        while pending:
            depth, phase, at = pending.popleft()
            stack = self._stack
            if len(stack) >= depth:
                stack[depth - 1] = phase
            top = stack[-1]
            counting = self._substitutes.get(top, top)
            if counting != self._counting and self._stopped_at is None:
                at = max(at, self._since, self._latest)
                self._totals[self._counting] += at - self._since
                self._since = at
            self._counting = counting

    def _counted(self, phase: str) -> str:
        return self._substitutes.get(phase, phase)

    def _recount_now(self) -> float:
        """`_recount`, reading the clock whether or not the counted phase changes; returns the reading."""
        now = self._clock()
        top = self._stack[-1]
        counting = self._substitutes.get(top, top)  # `_counted`, inlined (twice a step)
        if counting != self._counting and self._stopped_at is None:
            self._totals[self._counting] += now - self._since
            self._since = now
        self._counting = counting
        return now

    def _recount(self) -> None:
        counting = self._counted(self._stack[-1])
        if counting == self._counting or self._stopped_at is not None:
            self._counting = counting
            return
        now = self._clock()
        self._totals[self._counting] += now - self._since
        self._since = now
        self._counting = counting


class PhaseBlock:
    """A block of a `PhaseClock` whose phase changes in place; made by `PhaseClock.block`.
    `opened_at` is the clock's reading when it opened."""

    def __init__(self, clock: PhaseClock, depth: int, opened_at: float) -> None:
        self._clock, self._depth, self.opened_at = clock, depth, opened_at
        self._closed = False

    def switch(self, phase: str) -> float:
        """Count the block's time in `phase` from now on; returns the clock's reading (now).
        Blocks opened inside this one stay on top of it, so their phase keeps counting."""
        if self._closed:
            raise ValueError("the phase block is closed")
        if phase not in PHASES:
            check_phase(phase)
        # Queued without the lock (the module's docstring), at the clock's reading now.
        clock = self._clock
        now = clock._clock()
        pending = clock._pending
        pending.append((self._depth, phase, now))  # a deque: appends and pops are atomic
        if len(pending) >= MAX_PENDING_SWITCHES:
            clock._apply_pending_now()
        return now

    def close(self) -> None:
        """End the block (and any left open inside it); the phase below resumes. Idempotent."""
        if not self._closed:
            self._closed = True
            self._clock._close_block(self._depth)


class HookedBlock:
    """A block a framework's start and end hooks switch (not a `with` block): opened at its first
    switch, switched in place after that (a switch to the phase it is in changes nothing), ended
    by `close()`, after which the phase below resumes (the next switch opens a new one). One call
    a switch: the hooks switch twice a step.

    A hook that runs every step and cannot afford the call writes `switch`'s common case out
    itself: with a block open (`depth`) and a new phase, it appends `(depth, phase, now)` to
    `pending` (the clock's queue, appended to without its lock), sets `current`, and calls
    `flush()` once `MAX_PENDING_SWITCHES` wait; every other case goes through `switch`.
    """

    def __init__(self, clock: PhaseClock) -> None:
        self._clock = clock
        self.depth = 0  # the open block's stack depth; 0: none open
        self.current: str | None = None
        self.now = clock.clock  # the clock's time source: what a switch's reading comes from
        self.pending = clock._pending

    def switch(self, phase: str, now: float | None = None) -> None:
        """Count the block's time in `phase` from `now` (a reading of `self.now` the caller just
        took; by default the clock is read here)."""
        if phase == self.current:
            return
        if phase not in PHASES:
            check_phase(phase)
        if not self.depth:
            self.depth, _ = self._clock._push(phase)
        else:  # queued without the lock, as `PhaseBlock.switch`
            pending = self.pending
            pending.append((self.depth, phase, self.now() if now is None else now))
            if len(pending) >= MAX_PENDING_SWITCHES:
                self.flush()
        self.current = phase

    def flush(self) -> None:
        """Apply the queued switches now (the queue is full)."""
        self._clock._apply_pending_now()

    def close(self) -> None:
        if self.depth:
            depth, self.depth, self.current = self.depth, 0, None
            self._clock._close_block(depth)


class _PhaseScope(AbstractContextManager[None]):
    """The `with clock.phase(name):` block (a class, not a generator: it runs twice a step)."""

    __slots__ = ("_clock", "_depth", "_phase")

    def __init__(self, clock: PhaseClock, phase: str) -> None:
        self._clock, self._phase, self._depth = clock, phase, 0

    def __enter__(self) -> None:
        self._depth, _ = self._clock._push(self._phase)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._clock._close_block(self._depth)
