"""harness.live_marker: a test that starts a server tool or runs a framework without the `slow`
marker fails; with it, it passes. The cases run in one pytest of their own, over a fake `promtool`
on the PATH and a fake `torch` package on the import path (nothing real starts)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from harness import live_marker
from infra import REPO_ROOT

LIVE = {
    "spawns_promtool": "subprocess.run(['promtool', 'check', 'rules'], check=True)",
    "spawns_a_torch_script": "subprocess.run([sys.executable, WORKER], check=True)",
    "spawns_python_c_torch": "subprocess.run([sys.executable, '-c', 'import torch'], check=True)",
    "imports_torch": "import torch",
    "starts_promtool_in_a_fixture": "assert server",
}
QUIET = {"spawns_plain_python": "subprocess.run([sys.executable, '-c', 'pass'], check=True)"}


def outcomes(tmp_path: Path) -> dict[str, str]:
    tools, fakes = tmp_path / "bin", tmp_path / "fakes"
    (fakes / "torch").mkdir(parents=True)
    (fakes / "torch" / "__init__.py").write_text("")
    tools.mkdir()
    (tools / "promtool").write_text("#!/bin/sh\nexit 0\n")
    (tools / "promtool").chmod(0o755)
    worker = tmp_path / "worker.py"
    worker.write_text("if __name__ == '__never__':\n    import torch\n")
    lines = [
        "import subprocess, sys",
        "import pytest",
        f"WORKER = {str(worker)!r}",
        "@pytest.fixture",
        "def server():",
        "    subprocess.run(['promtool', '--version'], check=True)",
        "    yield True",
    ]
    for name, body in {**LIVE, **QUIET}.items():
        argument = "server" if "server" in body else ""
        lines += [f"def test_{name}_unmarked({argument}):", f"    {body}"]
        lines += ["@pytest.mark.slow", f"def test_{name}_marked({argument}):", f"    {body}"]
    (tmp_path / "test_cases.py").write_text(textwrap.dedent("\n".join(lines)) + "\n")
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{fakes}",
    }
    command = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "harness.live_marker"]
    command += ["-o", "markers=slow: live", "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py")]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    found: dict[str, str] = {}
    for outcome, name in re.findall(r"^(PASSED|FAILED|ERROR) test_cases\.py::test_(\w+)", run.stdout, re.MULTILINE):
        found[name] = "passed" if outcome == "PASSED" and found.get(name, "passed") == "passed" else "failed"
    assert "must carry @pytest.mark.slow" in run.stdout, run.stdout + run.stderr
    return found


def test_an_unmarked_live_test_fails_and_a_marked_one_passes(tmp_path):
    found = outcomes(tmp_path)
    expected = {f"{n}_unmarked": "failed" for n in LIVE} | {f"{n}_marked": "passed" for n in LIVE}
    expected |= {f"{n}_{m}": "passed" for n in QUIET for m in ("marked", "unmarked")}
    assert found == expected


def test_a_module_that_imports_a_framework_makes_its_tests_live(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text("import os\ntry:\n    from torch import nn\nexcept ImportError:\n    pass\n")
    assert live_marker.module_frameworks(str(module)) == {"torch"}
    inside = tmp_path / "test_y.py"
    inside.write_text("import os\n\ndef helper():\n    from torch import nn\n")  # seen when it runs
    assert live_marker.module_frameworks(str(inside)) == frozenset()
    assert live_marker.script_frameworks(str(inside)) == {"torch"}  # a script run as a process: anywhere
    assert live_marker.module_frameworks(__file__) == frozenset()  # names torch only in strings
