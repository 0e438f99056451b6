"""A named git revision of this repository as a source tree in a temporary directory (`git archive`),
for baselines measured against the code as it was instead of old code kept in the tree."""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infra import REPO_ROOT


class RevisionError(RuntimeError):
    pass


@contextmanager
def revision_tree(revision: str, root: Path = REPO_ROOT) -> Iterator[Path]:
    """The files of `revision` (any commit-ish) under a fresh directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="revision-") as work:
        archive = Path(work) / "tree.tar"
        done = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", f"--output={archive}", revision],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RevisionError(
                f"git archive {revision} failed (a shallow clone lacks it: git fetch --unshallow): "
                f"{done.stderr.strip()}"
            )
        tree = Path(work) / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree
