"""pytest plugin (`-p harness.live_marker`, in pyproject's addopts): a test that starts a server tool
or runs a framework must carry the `slow` marker, which `make test-fast` leaves out.

While each test runs (its fixtures' setup and teardown included) an audit hook watches for:
- a process started from one of LIVE_TOOLS (Prometheus, Alertmanager, promtool, amtool, buildah,
  torchrun), however it is started (subprocess, asyncio, os.posix_spawn, os.exec*);
- a Python process started on a script or `-m` module that imports a training framework;
- the first import of a training framework (torch, Stable-Baselines3, Lightning) in this process;
and a test whose module imports a training framework when it loads counts as live too.
A test that did any of these without the marker fails at its teardown, naming what it did. The
import is seen once per process (a module loads once), so a full run can miss a test that
imports torch after a marked test loaded it; `make test-fast` runs no marked test, so there every
such import, spawn and fixture start is seen."""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Generator, Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

MARKER = "slow"
LIVE_TOOLS = frozenset({"prometheus", "alertmanager", "promtool", "amtool", "buildah", "torchrun"})
FRAMEWORKS = frozenset({"torch", "stable_baselines3", "pytorch_lightning", "lightning"})
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")

_seen: list[str] | None = None  # what the running test did; None between tests


@cache
def script_frameworks(path: str) -> frozenset[str]:
    """The frameworks a Python file imports at any depth of its code (empty if unreadable)."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return frozenset(found & FRAMEWORKS)


@cache
def module_frameworks(path: str) -> frozenset[str]:
    """The frameworks a test module imports when it is loaded (outside its functions)."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    found: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return frozenset(found & FRAMEWORKS)


def module_file(module: str) -> str | None:
    parts = module.split(".")
    for root in sys.path:
        base = Path(root or ".", *parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return str(candidate)
    return None


def spawned(executable: object, argv: Iterable[object]) -> str | None:
    """Why starting `argv` makes a test live, or None."""
    args = [os.fsdecode(a) if isinstance(a, bytes | str) else str(a) for a in argv]
    program = os.fsdecode(executable) if isinstance(executable, bytes | str) else (args[0] if args else "")
    name = Path(program).name
    if name in LIVE_TOOLS or (args and Path(args[0]).name in LIVE_TOOLS):
        return f"started {Path(args[0]).name if args else name}"
    if not (PYTHON.match(name) or (args and PYTHON.match(Path(args[0]).name))):
        return None
    rest = args[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        if rest[1].split(".")[0] in FRAMEWORKS:
            return f"started python -m {rest[1]}"
        file = module_file(rest[1])
    elif len(rest) >= 2 and rest[0] == "-c":
        code = rest[1]
        hit = sorted(f for f in FRAMEWORKS if re.search(rf"^\s*(import|from) {f}\b", code, re.MULTILINE))
        return f"started python -c importing {hit[0]}" if hit else None
    else:
        file = rest[0] if rest and rest[0].endswith(".py") else None
    frameworks = script_frameworks(file) if file else frozenset()
    return (
        f"started python on {Path(file).name}, which imports {sorted(frameworks)[0]}" if file and frameworks else None
    )


def audit(event: str, args: tuple[Any, ...]) -> None:
    if _seen is None:
        return
    if event == "import":
        if args[0] in FRAMEWORKS:
            _seen.append(f"imported {args[0]}")
    elif event == "subprocess.Popen" or event in ("os.posix_spawn", "os.exec"):
        why = spawned(args[0], args[1] or ())
        if why:
            _seen.append(why)


sys.addaudithook(audit)


MODULE_MARKED = re.compile(rf"^pytestmark = pytest\.mark\.{MARKER}$", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` a module marked slow as a whole is not even imported (its framework imports
    and fixtures cost seconds, and every test of it would be deselected)."""
    if config.getoption("markexpr", "") != f"not {MARKER}" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    try:
        return True if MODULE_MARKED.search(collection_path.read_text()) else None
    except OSError:
        return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    global _seen
    _seen = []
    item.stash[SEEN] = _seen
    try:
        yield
    finally:
        _seen = None


SEEN = pytest.StashKey[list[str]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when != "teardown" or item.get_closest_marker(MARKER) is not None:
        return
    seen = item.stash.get(SEEN, [])
    frameworks = module_frameworks(str(item.path))
    if frameworks:
        seen = [*seen, f"is in a module that imports {sorted(frameworks)[0]}"]
    if seen and report.passed:
        report.outcome = "failed"
        what = "; ".join(sorted(set(seen)))
        report.longrepr = (
            f"{item.nodeid} {what}: a test that starts a server tool or runs a framework must carry "
            f"@pytest.mark.{MARKER} (module level: pytestmark = pytest.mark.{MARKER}), which make test-fast leaves out"
        )
