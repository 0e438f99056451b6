"""A throwaway copy of this repository (tracked and new files, as `git status` sees them), committed
in its own git repository, with the shared virtualenv linked in: tests make a user's change there
and run the project's own commands on it, never touching the checkout under test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def copy_repo(target: Path) -> Path:
    """Copy the working tree into `target` (created), `git init` and commit it; returns `target`."""
    listed = _git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    target.mkdir(parents=True, exist_ok=True)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_file() or name == ".venv":
            continue
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    venv = REPO_ROOT / ".venv"
    (target / ".venv").symlink_to(venv.resolve())
    _git(target, "init", "-q", "-b", "main")
    (target / ".git" / "info" / "exclude").write_text(".venv\n")
    _git(target, "add", "-A", ".")
    _git(target, "commit", "-q", "-m", "copy of the repository under test")
    return target


def commit_all(repo: Path, message: str) -> None:
    _git(repo, "add", "-A", ".")
    _git(repo, "commit", "-q", "-m", message)


def reset(repo: Path) -> None:
    """Back to the copy's commit: every change, new file and output of a test (`rendered/`,
    regenerated files) gone; the virtualenv link and compiled bytecode stay."""
    _git(repo, "reset", "-q", "--hard", "HEAD")
    _git(repo, "clean", "-q", "-f", "-d", "-x", "-e", ".venv", "-e", "__pycache__")
