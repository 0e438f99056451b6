"""The trainer library as its own distribution: what it ships, what it imports, and a wheel built
from this checkout installed offline into an empty venv that runs an instrumented script."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from . import wheelhouse

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Third-party imports the library may make anywhere, and those only an optional part may make
# (the NVML discovery, one framework integration each), inside that part alone.
DEPENDENCIES = {"prometheus_client", "opentelemetry"}
OPTIONAL = {
    "pynvml": ("foxhunt_trainer/gpus.py",),
    "yaml": ("foxhunt_trainer/contract/web_config.py",),
    "torch": (
        "foxhunt_trainer/flops.py",  # only when a step's FLOPs are measured
        "foxhunt_trainer/integrations/torch.py",
        "foxhunt_trainer/integrations/sb3.py",
        "foxhunt_trainer/integrations/lightning.py",
        "foxhunt_trainer/integrations/torch_distributed.py",
        "foxhunt_trainer/integrations/optimizers.py",
        "foxhunt_trainer/integrations/torch_remediation.py",
        # the auto-instrumentation's patches, each imported once the program imported its framework
        "foxhunt_trainer/autolog/torch_patches.py",
        "foxhunt_trainer/autolog/sb3_patches.py",
        "foxhunt_trainer/autolog/lightning_patches.py",
    ),
    "numpy": ("foxhunt_trainer/integrations/sb3.py",),
    "stable_baselines3": ("foxhunt_trainer/integrations/sb3.py", "foxhunt_trainer/autolog/sb3_patches.py"),
    "pytorch_lightning": (
        "foxhunt_trainer/integrations/lightning.py",
        "foxhunt_trainer/autolog/lightning_patches.py",
    ),
    "optuna": ("foxhunt_trainer/integrations/optuna.py", "foxhunt_trainer/autolog/optuna_patches.py"),
}
FORBIDDEN_DISTRIBUTIONS = {
    "pulumi",
    "pulumi-kubernetes",
    "pyyaml",
    "mypy",
    "ruff",
    "pytest",
    "torch",
    "grafana-foundation-sdk",
}


def shipped_modules() -> dict[str, Path]:
    """Module name -> source file of everything the distribution ships (from pyproject.toml)."""
    patterns = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    modules: dict[str, Path] = {}
    for init in sorted(REPO.rglob("__init__.py")):
        if ".venv" in init.parts:
            continue
        package = ".".join(init.parent.relative_to(REPO).parts)
        if any(fnmatch.fnmatch(package, p) for p in patterns):
            for source in sorted(init.parent.glob("*.py")):
                name = package if source.stem == "__init__" else f"{package}.{source.stem}"
                modules[name] = source
    return modules


def imports_of(source: Path, *, module_level: bool = False) -> set[str]:
    """The modules `source` imports; `module_level`: only those imported when it is imported (an
    import inside a function runs only when that function is used)."""
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(source.read_text())]
    while pending:
        node = pending.pop()
        if module_level and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        pending.extend(ast.iter_child_nodes(node))
    return names


def test_the_library_imports_only_what_it_ships_its_two_dependencies_and_the_standard_library():
    shipped = shipped_modules()
    problems = []
    for name, source in shipped.items():
        relative = str(source.relative_to(REPO))
        for imported in imports_of(source, module_level=True):
            top = imported.split(".")[0]
            if top == "foxhunt_trainer":
                # `from pkg import name` names a module or an attribute of pkg: either is shipped.
                if imported not in shipped and imported.rsplit(".", 1)[0] not in shipped:
                    problems.append(f"{name} imports {imported}, which the distribution does not ship")
            elif top in sys.stdlib_module_names or top in DEPENDENCIES:
                continue
            elif relative not in OPTIONAL.get(top, ()):
                problems.append(f"{name} imports {top}, not a dependency of the trainer library")
    assert problems == []
    # One import package named for the distribution: the platform's `observability` (rules,
    # dashboards, Pulumi) is not in it.
    assert {name.split(".")[0] for name in shipped} == {"foxhunt_trainer"}


def build_wheel(work: Path) -> Path:
    """The trainer library's wheel, built from a copy of the tracked sources as `make wheel` does."""
    source = work / "source"
    source.mkdir()
    shutil.copy2(REPO / "pyproject.toml", source)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "foxhunt_trainer"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--wheel-dir", str(work / "dist"), str(source)], check=True, env=offline_env())
    (wheel,) = (work / "dist").glob("foxhunt_trainer-*.whl")
    return wheel


def offline_env() -> dict[str, str]:
    """pip without this machine's configuration (indexes, find-links, constraints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


SCRIPT = """
import json, math, urllib.request
import foxhunt_trainer as instrument
from foxhunt_trainer import TrainingMetrics

metrics = TrainingMetrics()
server = metrics.serve(0, "127.0.0.1")
try:
    with metrics.job("mlp", "from-wheel", gpu_uuids=[]) as job:
        job.record_training_iteration(1, math.nan, 0.5, 0.01)
        with job.checkpoint("ckpt.bin", step=1, state={"w": [1.0, 2.0]}) as ckpt:
            open("ckpt.bin", "wb").write(b"weights")
        raise TimeoutError("the data loader stalled")
except TimeoutError:
    pass
page = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
server.close()
print(json.dumps({"file": instrument.__file__, "good": ckpt.good, "page": page}))
"""


@pytest.mark.slow
def test_the_wheel_installs_offline_into_an_empty_venv_and_instruments_a_script(tmp_path):
    wheel = build_wheel(tmp_path)
    requirements = PYPROJECT["project"]["dependencies"]
    wheels = wheelhouse.build(requirements, tmp_path / "wheelhouse")
    shutil.copy2(wheel, tmp_path / "wheelhouse")
    target = tmp_path / "venv"
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    install = [
        *pip,
        "install",
        "--quiet",
        "--no-compile",
        "--no-index",
        "--find-links",
        str(tmp_path / "wheelhouse"),
        "foxhunt-trainer",
    ]
    subprocess.run(install, check=True, env=offline_env())

    listed = subprocess.run(
        [*pip, "list", "--format=json"], capture_output=True, text=True, check=True, env=offline_env()
    )
    installed = {wheelhouse.canonical(d["name"]) for d in json.loads(listed.stdout)}
    assert installed == {*wheels, "foxhunt-trainer"}
    assert not installed & FORBIDDEN_DISTRIBUTIONS

    run = subprocess.run(
        [str(python), "-I", "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["file"].startswith(str(target))
    assert result["good"] is True  # a NaN loss, but the saved state is finite: the state decides
    page = result["page"]
    assert 'ml_training_nan_count{job_id="from-wheel",model_type="mlp",tensor_type="loss"} 1.0' in page
    assert 'ml_training_failures_total{error_type="timeout",job_id="from-wheel",model_type="mlp"} 1.0' in page
    assert 'ml_training_jobs_by_status{status="failed"} 1.0' in page
    # The end-of-run summary (a script that configured no logging: on stderr), with the peak table
    # and the verdict's thresholds the wheel ships.
    assert "foxhunt model_type=mlp job_id=from-wheel: run summary: failed after" in run.stderr, run.stderr
    assert "verdict: " in run.stderr and "MFU: not known: the job reports no model FLOPs" in run.stderr, run.stderr
    # The launcher the training job template runs torchrun through is installed as a command.
    usage = subprocess.run([str(target / "bin" / "foxhunt-torchrun"), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "torchrun" in usage.stdout, usage.stderr
    # foxhunt-run, the job template's command for one process: its sitecustomize is shipped and
    # installs the import hook in the program it runs (from the wheel, nothing of the checkout).
    hook_probe = "import sys, foxhunt_trainer.autolog.state as s; print(s.STATE.installed, s.__file__)"
    hooked = subprocess.run(
        [str(target / "bin" / "foxhunt-run"), str(python), "-c", hook_probe],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")},
    )  # fmt: skip
    assert hooked.returncode == 0 and hooked.stdout.startswith(f"True {target}"), hooked.stderr
    # The run report is a command of the wheel too, with no dependency beyond it (its plots are SVG).
    unreachable = subprocess.run(
        [str(target / "bin" / "foxhunt-report"), "job", "--url", "http://127.0.0.1:9"], capture_output=True, text=True
    )
    assert unreachable.returncode == 2, unreachable.stderr
    assert unreachable.stderr.startswith("foxhunt-report: cannot reach Prometheus at http://127.0.0.1:9: ")
    for absent in ("yaml", "pulumi", "observability", "dashboards"):
        probe = subprocess.run([str(python), "-I", "-c", f"import {absent}"], cwd=tmp_path, capture_output=True)
        assert probe.returncode != 0, f"{absent} is importable from the trainer's venv"
