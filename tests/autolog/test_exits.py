"""The auto job ends by the SystemExit that ends the program, whichever way it was raised.

On Python 3.12 and later (`sys.monitoring`) that includes a program's own `raise SystemExit(n)`,
and leaves out one the program catches or that ends a thread; the interpreters are pyenv's (the
job needs no torch: it is made here by the probe itself, as the first sign of training would). On
the project's own Python (3.11) `sys.exit(n)` is what is seen (test_autolog_safety)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import opentelemetry
import prometheus_client
import pytest
import typing_extensions

from harness.ports import free_port
from infra import REPO_ROOT
from tests.autolog.test_autolog_safety import END_REPORT

PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _newer_interpreter() -> Path:
    """The oldest Python of 3.12 or later on this machine (pyenv's): where `sys.monitoring` begins."""
    found = []
    for python in sorted(PYENV_VERSIONS.glob("3.*/bin/python3")):
        version = tuple(int(part) for part in python.parent.parent.name.split(".")[:2] if part.isdigit())
        if len(version) == 2 and version >= (3, 12):
            found.append((version, python))
    if not found:
        pytest.fail(f"no Python 3.12 or later under {PYENV_VERSIONS}: these tests need one (sys.monitoring)")
    return min(found)[1]


@pytest.fixture(scope="module")
def newer_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(an interpreter of 3.12 or later, a directory of the job's pure-Python dependencies for it)."""
    packages = tmp_path_factory.mktemp("packages")
    for module in (prometheus_client, opentelemetry):
        source = Path(next(iter(module.__path__)))
        shutil.copytree(source, packages / source.name)
    shutil.copy(typing_extensions.__file__, packages)
    return _newer_interpreter(), packages


ENDINGS = {
    "raise SystemExit(3)": ("raise SystemExit(3)", 3, "failed", ["exception"]),
    "raise SystemExit(81), the remediation's NaN code": ("raise SystemExit(81)", 81, "failed", ["nan"]),
    "raise SystemExit('a message')": ("raise SystemExit('bad config')", 1, "failed", ["exception"]),
    "raise SystemExit(3) in a function": ("def main():\n    raise SystemExit(3)\nmain()", 3, "failed", ["exception"]),
    "a bare raise SystemExit": ("raise SystemExit", 0, "completed", []),
    "sys.exit(2)": ("import sys\nsys.exit(2)", 2, "failed", ["exception"]),
    "the builtin exit(4)": ("exit(4)", 4, "failed", ["exception"]),
    "a SystemExit the program catches": (
        "try:\n    raise SystemExit(5)\nexcept SystemExit:\n    pass",
        0,
        "completed",
        [],
    ),
    "sys.exit(6) in a thread": (
        "import sys, threading\nworker = threading.Thread(target=sys.exit, args=(6,))\nworker.start()\nworker.join()",
        0,
        "completed",
        [],
    ),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_on_python_3_12_the_job_ends_by_the_system_exit_that_leaves_the_program(newer_python, ending):
    python, packages = newer_python
    code, expected_code, status, failures = ENDINGS[ending]
    probe = END_REPORT + "assert job.current() is not None\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON"))}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(packages)]),
        "FOXHUNT_METRICS_BASE_PORT": str(free_port()),
        "FOXHUNT_PROGRESS_SECONDS": "off",
        "FOXHUNT_AUTOLOG_DISABLE": "tracing",  # (the OTLP exporter's gRPC is compiled for 3.11 only)
    }
    command = [sys.executable, "-m", "foxhunt_trainer.autolog", str(python), "-c", probe + code]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, timeout=120)
    assert done.returncode == expected_code, done.stderr.decode()
    assert done.stdout.decode().strip() == f"{status} {failures}", done.stderr.decode()
    assert "foxhunt-autolog:" not in done.stderr.decode()  # nothing of the instrumentation failed


def test_the_wrapped_builtin_exit_reads_as_the_interpreter_s_own():
    probe = (
        "import builtins\n"
        "from foxhunt_trainer.autolog import exits\n"
        "before = repr(builtins.exit), repr(builtins.quit)\n"
        "exits.watch(); exits.watch()\n"
        "print(before == (repr(builtins.exit), repr(builtins.quit)), builtins.exit._quitter.__class__.__name__)\n"
        "exit(7)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, timeout=60)
    assert done.returncode == 7, done.stderr.decode()
    assert done.stdout.decode().split() == ["True", "Quitter"]  # wrapped once, not twice
