"""The auto-instrumentation's process-wide state (standard library only): which integrations are
on, whether the program instruments itself, and the one-line report of an integration that failed.

Every patch runs its own work inside `guarded` (or checks `on` and reports through `failed`): an
exception there turns that integration off for the rest of the process, is reported once on
stderr with its cause, and never reaches the program.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from foxhunt_trainer.autolog import switches

P = ParamSpec("P")
R = TypeVar("R")


class Follower(Protocol):
    """An object whose hooks read its own `recording` flag (one attribute read a step, where the
    switches' dictionary would be several)."""

    recording: bool


class State:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.switches = switches.Switches(False)
        self.off: set[str] = set()  # integrations turned off by a failure
        self.installed = False
        # The program made its own `TrainingMetrics` (the manual API): the auto layer steps aside.
        self.manual = False
        self.creating_metrics = False  # the auto layer is making its own
        self.on_manual: Callable[[], None] | None = None  # the auto job hands over (set by `job`)
        # A framework integration (Lightning's fit, SB3's learn) is running: the plain PyTorch
        # integration leaves its optimizer steps, losses and loaders to it.
        self.framework_depth = 0
        self.live: dict[str, bool] = {}
        # What the plain PyTorch patches read at every call: the torch integration is on and no
        # framework's fit or learn is running (kept by `refresh` and the framework's start and end).
        self.plain_torch = False
        self._followers: dict[str, weakref.WeakSet[Any]] = {}
        self._followers_lock = threading.Lock()

    def on(self, integration: str) -> bool:
        return self.live.get(integration, False)

    def refresh(self) -> None:
        """Recompute `live`, what `on` reads (every patched call asks it: a dictionary lookup),
        and every follower's `recording`. Updated in place, one key at a time: a hook may hold
        the dictionary itself."""
        self.live.update(
            {
                name: self.installed and not self.manual and self.switches.on(name) and name not in self.off
                for name in (*switches.INTEGRATIONS, "job", "import hook")
            }
        )
        self._update_plain_torch()
        with self._followers_lock:
            for name, followers in self._followers.items():
                on = self.live.get(name, False)
                for follower in list(followers):
                    follower.recording = on

    def framework_started(self) -> None:
        """A framework's fit or learn began: its own integration counts, the plain PyTorch one waits."""
        self.framework_depth += 1
        self._update_plain_torch()

    def framework_ended(self) -> None:
        self.framework_depth -= 1
        self._update_plain_torch()

    def _update_plain_torch(self) -> None:
        self.plain_torch = self.framework_depth == 0 and self.live.get(switches.TORCH, False)

    def follow(self, integration: str, follower: Follower) -> None:
        """Keep `follower.recording` equal to whether `integration` is on, from now on (held
        weakly: a follower the program drops is forgotten)."""
        with self._followers_lock:
            self._followers.setdefault(integration, weakref.WeakSet()).add(follower)
            follower.recording = self.live.get(integration, False)

    def failed(self, integration: str, error: BaseException) -> None:
        """`integration` raised `error`: turn it off, and say so once."""
        with self._lock:
            if integration in self.off:
                return
            self.off.add(integration)
            self.refresh()
        cause = f"{type(error).__name__}: {error}".replace("\n", " ")
        try:
            sys.stderr.write(f"{switches.PREFIX}: the {integration} integration failed and is off ({cause})\n")
            sys.stderr.flush()
        except Exception:  # a closed stderr: nothing to report to
            pass

    def metrics_created(self) -> None:
        """A `TrainingMetrics` was made: by the program itself unless the auto layer is making it."""
        if self.creating_metrics:
            return
        with self._lock:
            if self.manual:
                return
            self.manual = True
            self.refresh()
            hand_over = self.on_manual
        if hand_over is not None:
            try:
                hand_over()
            except Exception as error:
                self.failed("job", error)


STATE = State()


def guarded(integration: str, default: Any = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function only while `integration` is on; an exception inside it turns the
    integration off (`State.failed`) and returns `default`."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if not STATE.live.get(integration, False):  # `STATE.on`, inlined: it runs at every call
                return default  # type: ignore[no-any-return]
            try:
                return function(*args, **kwargs)
            except Exception as error:
                STATE.failed(integration, error)
                return default  # type: ignore[no-any-return]

        return wrapper

    return decorate


def guarded_subclass(base: type[R], integration: str, methods: dict[str, Any]) -> type[R]:
    """A subclass of a framework callback `base` whose `methods` (name -> what to return when off
    or failed) run `guarded`: the framework calls it, and its failure never reaches the training."""
    namespace = {name: guarded(integration, default)(getattr(base, name)) for name, default in methods.items()}
    return type(f"Auto{base.__name__}", (base,), namespace)
