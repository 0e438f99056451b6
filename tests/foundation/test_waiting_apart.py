"""The xdist scheduler of `harness.waiting_apart`: with three workers the waiting modules run on the
last one alone, every other module on the other two, a module to one worker; with none of the
waiting modules collected the last worker stops at once, and with two workers the suite is shared
as `loadscope` shares it. Each case runs pytest with xdist on a small project of its own and reads
which worker ran each test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAITING_MODULE = "tests/e2e/test_waits.py"
OTHERS = [f"tests/unit/test_module_{i}.py" for i in range(6)]
TEST = """
import os
from pathlib import Path


def _ran(name):
    Path(os.environ["RAN_DIR"], name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))

"""


def project(root: Path, modules: list[str]) -> None:
    (root / "pytest.ini").write_text(f"[pytest]\nwaiting_modules =\n    {WAITING_MODULE}\n")
    for module in modules:
        path = root / module
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = module.replace("/", "_").removesuffix(".py")
        body = "".join(f"\ndef test_{i}():\n    _ran('{stem}-{i}')\n" for i in range(4))
        path.write_text(TEST + body)


def ran_on(root: Path, modules: list[str], workers: int) -> dict[str, set[str]]:
    """Run the project with `workers` xdist workers (loadscope): module -> the workers that ran its tests."""
    project(root, modules)
    ran = root / "ran"
    ran.mkdir()
    env = {**os.environ, "RAN_DIR": str(ran), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "harness.waiting_apart", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*command, "-n", str(workers), "--dist", "loadscope", *modules],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, set[str]] = {}
    for module in modules:
        stem = module.replace("/", "_").removesuffix(".py")
        files = [ran / f"{stem}-{i}" for i in range(4)]
        assert all(f.exists() for f in files), f"not every test of {module} ran"
        out[module] = {f.read_text() for f in files}
    return out


def test_with_three_workers_the_waiting_module_runs_alone_on_the_last(tmp_path: Path) -> None:
    ran = ran_on(tmp_path, [WAITING_MODULE, *OTHERS], workers=3)
    assert ran[WAITING_MODULE] == {"gw2"}
    others = set().union(*(ran[m] for m in OTHERS))
    assert others == {"gw0", "gw1"}, ran
    assert all(len(ran[m]) == 1 for m in OTHERS), ran  # a module to one worker


@pytest.mark.parametrize("workers", [2, 3])
def test_without_a_waiting_module_or_a_third_worker_two_workers_share_everything(tmp_path: Path, workers: int) -> None:
    modules = OTHERS if workers == 3 else [WAITING_MODULE, *OTHERS]
    ran = ran_on(tmp_path, modules, workers=workers)
    used = set().union(*ran.values())
    assert used == {"gw0", "gw1"}, ran
    assert all(len(workers_of) == 1 for workers_of in ran.values()), ran


def test_every_waiting_module_the_project_names_exists() -> None:
    import tomllib

    named = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["waiting_modules"]
    assert named, "pyproject names no waiting module"
    missing = [path for path in named if not (REPO / path).is_file()]
    assert not missing, f"waiting_modules names modules that do not exist: {missing}"
