"""What the poller image copies is enough to run it, and the build context lets it through.

Without building the image: the Dockerfile's COPY lines are replayed into a temporary directory
(the image's /opt/poller/app), and the poller's modules are imported from there alone, so a module
the poller starts to import (such as the shared exposition module) but the image lacks fails here.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
from pathlib import Path

from infra import REPO_ROOT

APP = "/opt/poller/app/"


def app_copies() -> list[tuple[list[str], str]]:
    """(source patterns, destination) of each COPY of the repository into the app directory."""
    copies = []
    for line in (REPO_ROOT / "poller" / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words) and words[-1].startswith(APP):
            copies.append((words[1:-1], words[-1]))
    return copies


def allowed_by_dockerignore(path: str) -> bool:
    allowed = False
    for rule in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        rule = rule.strip()
        if rule and not rule.startswith("#"):
            negated = rule.startswith("!")
            if fnmatch.fnmatch(path, rule.removeprefix("!")):
                allowed = negated
    return allowed


def test_the_copied_modules_alone_run_the_poller(tmp_path: Path) -> None:
    copies = app_copies()
    assert copies, "no COPY into the app directory found in poller/Dockerfile"
    for patterns, destination in copies:
        target = tmp_path / destination.removeprefix(APP)
        target.mkdir(parents=True, exist_ok=True)
        for pattern in patterns:
            matches = sorted(REPO_ROOT.glob(pattern))
            assert matches, f"COPY {pattern}: nothing matches"
            for source in matches:
                relative = str(source.relative_to(REPO_ROOT))
                assert allowed_by_dockerignore(relative), f"{relative} is copied but .dockerignore excludes it"
                shutil.copy(source, target / source.name)
    code = "import poller.server, poller.healthcheck, poller.cli, foxhunt_trainer.contract.exposition as e; print(e.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(tmp_path))
