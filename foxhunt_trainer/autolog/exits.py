"""How the program ends, as far as the auto job can tell before the interpreter exits.

An unhandled exception is what the interpreter printed a traceback of (`sys.last_value`). A
`SystemExit` has no traceback and leaves nothing behind by the time exit hooks run, so its code is
caught on its way out:

- on Python 3.12 and later, `sys.monitoring` reports the exception that leaves the main module's
  frame (`PY_UNWIND`: an event of exceptions leaving Python frames only, so a call of ours each time
  one does and no cost anywhere else; only the main module's frame is looked at). That is exactly
  what ends the program: a program's own `raise SystemExit(code)` wherever it is raised, `sys.exit`
  and argparse's errors; a `SystemExit` the program catches, or one that ends a thread, is not;
- on Python 3.11, and where the main module is not running when the job is made, `sys.exit(code)`
  and the interactive builtins `exit(code)` and `quit(code)` are wrapped to note the code
  (argparse's errors too). A program's own `raise SystemExit(code)` is not seen there (only tracing
  every call would see it) and the job ends "completed".
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from typing import Any, NoReturn

from foxhunt_trainer.autolog.state import STATE

EXITS = "exits"  # what a failure here is reported as (`STATE.failed`); the job goes on without it
_TOOL_NAME = "foxhunt-autolog"
# The ids `sys.monitoring` leaves to tools other than debuggers, coverage, profilers and optimizers.
_FREE_TOOL_IDS = (3, 4)

_called: list[object] = []  # the code of each `sys.exit` call, the last one last
_left_main: list[object] = []  # the code of the SystemExit that left the main module, once it has
_monitoring: list[int] = []  # the `sys.monitoring` tool id in use, once the main module is watched


def exit_code() -> object:
    """The code the program is exiting with, as far as seen (None: none seen, or a bare exit)."""
    if _monitoring:
        return _left_main[-1] if _left_main else None
    return _called[-1] if _called else None


def watch() -> None:
    """Start noting how the program exits (idempotent)."""
    _patch_sys_exit()
    _wrap_builtin_quitters()
    try:
        _monitor_main_module()
    except Exception as error:  # `sys.exit` is still seen
        STATE.failed(EXITS, error)


def _patch_sys_exit() -> None:
    original = sys.exit
    if getattr(original, "__foxhunt_autolog__", False):
        return

    def exit(status: str | int | None = None) -> NoReturn:
        _called.append(status)
        original(status)

    exit.__foxhunt_autolog__ = True  # type: ignore[attr-defined]
    exit.__doc__ = original.__doc__
    sys.exit = exit


class _NotedQuitter:
    """The builtin `exit` or `quit` (site's), noting the code it is called with first."""

    __foxhunt_autolog__ = True

    def __init__(self, quitter: Any) -> None:
        self._quitter = quitter

    def __repr__(self) -> str:
        return repr(self._quitter)

    def __call__(self, code: object = None) -> NoReturn:
        _called.append(code)
        self._quitter(code)
        raise SystemExit(code)  # (site's quitter raises it; this only if a replacement did not)


def _wrap_builtin_quitters() -> None:
    for name in ("exit", "quit"):
        quitter = getattr(builtins, name, None)  # absent under `python -S`
        if callable(quitter) and not getattr(quitter, "__foxhunt_autolog__", False):
            setattr(builtins, name, _NotedQuitter(quitter))


def main_module_code() -> types.CodeType | None:
    """The code object of the `__main__` module being run (a script, `-m`, `-c`), found on the main
    thread's stack; None when it is not running (the job made after it returned, an embedded
    interpreter)."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", None)
    main_thread = threading.main_thread().ident
    frame = sys._current_frames().get(main_thread) if main_thread is not None else None
    while frame is not None:
        if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
            return frame.f_code
        frame = frame.f_back
    return None


def _monitor_main_module() -> None:
    monitoring: Any = getattr(sys, "monitoring", None)
    if monitoring is None or _monitoring:
        return
    code = main_module_code()
    if code is None:
        return
    tool = next((tool for tool in _FREE_TOOL_IDS if monitoring.get_tool(tool) is None), None)
    if tool is None:  # other tools hold every spare id: `sys.exit` is still seen
        return
    monitoring.use_tool_id(tool, _TOOL_NAME)
    _main_code[:] = [code]
    # (A global event: Python 3.12 does not take PY_UNWIND as one local to a code object.)
    monitoring.register_callback(tool, monitoring.events.PY_UNWIND, _unwound)
    monitoring.set_events(tool, monitoring.get_events(tool) | monitoring.events.PY_UNWIND)
    _monitoring.append(tool)


_main_code: list[types.CodeType] = []


def _unwound(code: types.CodeType, offset: int, exception: BaseException) -> None:
    if code is _main_code[0] and isinstance(exception, SystemExit):
        _left_main.append(exception.code)
