"""The deploy set is only the deploy: the Pulumi program, the offline render with its checks, the
review diff and the CrossGuard policy pack load no distribution that requirements.txt does not lock.

They run in a fresh interpreter (the dev stack rendered and checked, the pack's policies loaded; the
other stacks run the same modules), which then lists the file of every module it loaded; each file
is traced to the installed distribution whose RECORD names it. A module of this checkout is the project's own, one of the interpreter's
standard library is Python's; anything else must come from a distribution of the deploy lock."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from infra import REPO_ROOT
from tests import locks

# promtool is a binary, not an import: the check that runs it is left out here (the render tests run it).
SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import infra.program, infra.offline.review_diff, infra.stacks
import policy.pack
from infra.offline import checks
from infra.offline.render import render_stack
result = render_stack("dev")
for name, check in checks.ALL_CHECKS:
    if name != "promtool-rules":
        problems = check(result)
        assert not problems, (name, problems)
files = {m: getattr(module, "__file__", None) for m, module in list(sys.modules.items())}
print(json.dumps(files))
"""


def distribution_files() -> dict[Path, str]:
    owners: dict[Path, str] = {}
    for dist in metadata.distributions():
        for file in dist.files or ():
            if file.suffix == ".py" or file.suffix == ".so" or ".cpython-" in file.name:
                owners[Path(str(dist.locate_file(file))).resolve()] = locks.canonical(dist.metadata["Name"])
    return owners


def loaded_module_files() -> dict[str, str | None]:
    run = subprocess.run(
        [sys.executable, "-I", "-c", SCRIPT, str(REPO_ROOT)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    files: dict[str, str | None] = json.loads(run.stdout.splitlines()[-1])
    return files


def test_program_render_and_pack_load_only_the_deploy_lock() -> None:
    deploy = set(locks.lock(locks.DEPLOY_LOCK))
    owners = distribution_files()
    stdlib = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")}
    used: dict[str, set[str]] = {}
    unknown: list[str] = []
    for module, file in loaded_module_files().items():
        if file is None:  # built in, or a namespace package (its portions are modules of their own)
            continue
        path = Path(file).resolve()
        if path.is_relative_to(REPO_ROOT) and not path.is_relative_to(REPO_ROOT / ".venv"):
            continue
        if path in owners:
            used.setdefault(owners[path], set()).add(module)
        elif any(path.is_relative_to(s) for s in stdlib) and "site-packages" not in path.parts:
            continue
        else:
            unknown.append(f"{module} ({path})")
    assert not unknown, f"modules no installed distribution owns: {unknown}"
    outside = {d: sorted(m)[:3] for d, m in used.items() if d not in deploy}
    assert not outside, f"the deploy loads distributions requirements.txt does not lock: {outside}"
    # The deploy really ran: the program's and the pack's own distributions were loaded.
    assert {"pulumi", "pulumi-kubernetes", "pulumi-policy", "grafana-foundation-sdk", "promql-parser"} <= set(used)
