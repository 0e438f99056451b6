"""A pytest-xdist scheduler that keeps one worker for the test modules that mostly wait.

Some modules spend minutes waiting on real servers' clocks (the high-availability scenario: four
faults, each held and resolved through Prometheus and Alertmanager's own intervals, about six
minutes at a tenth of a core). With `--dist loadscope` such a module takes a worker like any other,
and the core that worker would use sits idle while it waits. Here, with three or more workers, the
last one (by number: gw2 of three) runs only the modules named by the `waiting_modules` ini
setting (and stops once they are done, or at once when none was collected), and the others share
every other module, a module to one worker as `loadscope` does. With fewer workers, or another
`--dist`, scheduling is xdist's own.

Loaded by `-p harness.waiting_apart` (pyproject's addopts, beside `waiting_modules`).
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

INI = "waiting_modules"
# Workers needed before one is kept apart: the waiting modules' own, and two for everything else.
MIN_WORKERS = 3


def _number(node: WorkerController) -> int:
    """The worker's number (gw2: 2); workers register in the order they come up, not by number."""
    return int(str(node.workerinput["workerid"]).removeprefix("gw"))


class WaitingApartScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no type information
    """`loadscope`, with the last worker kept for the waiting modules (see the module docstring)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.waiting = frozenset(str(path) for path in config.getini(INI))
        self.apart: WorkerController | None = None

    def schedule(self) -> None:
        if self.collection is None and self.apart is None and len(self.nodes) >= MIN_WORKERS:
            collection: list[str] = next(iter(self.registered_collections.values()), [])
            if len({self._split_scope(nodeid) for nodeid in collection}) >= len(self.nodes):
                self.apart = max(self.nodes, key=_number)
        super().schedule()

    def remove_node(self, node: WorkerController) -> str | None:
        if node is self.apart:  # done, or crashed: what it left is anyone's
            self.apart = None
        crashed: str | None = super().remove_node(node)
        return crashed

    def _next_scope(self, node: WorkerController) -> str | None:
        """The first queued scope this worker takes: the waiting ones for the worker kept apart,
        every other for the rest."""
        for scope in self.workqueue:
            if (scope.split("::", 1)[0] in self.waiting) == (node is self.apart):
                return str(scope)
        return None

    def _assign_work_unit(self, node: WorkerController) -> None:
        if self.apart is not None:
            scope = self._next_scope(node)
            if scope is None:
                return
            self.workqueue.move_to_end(scope, last=False)  # `loadscope` hands out the first in the queue
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if self.apart is None:
            super()._reschedule(node)
            return
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()  # finishes what it was given, then stops
            return
        if self._pending_of(self.assigned_work.get(node, {})) > 2:
            return
        self._assign_work_unit(node)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI,
        "test modules (paths from the root directory) that wait on servers' clocks far more than they compute: "
        "with three or more xdist workers under --dist loadscope, the last worker runs them alone",
        type="linelist",
        default=[],
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadscope":
        return None
    return WaitingApartScheduling(config, log)
