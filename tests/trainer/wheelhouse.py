"""Offline wheels of installed distributions: each distribution of the running interpreter's
environment (the shared venv) packed back into a wheel from the files its RECORD lists, so pip can
install them into an empty venv with `--no-index --find-links` and no package index at all."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions `requirements` need, transitively (no extras), by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        key = canonical(requirement.name)
        if key in found:
            continue
        distribution = metadata.distribution(requirement.name)
        found[key] = distribution
        for text in distribution.requires or []:
            needed = Requirement(text)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                pending.append(needed)
    return found


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def repack(distribution: metadata.Distribution, directory: Path) -> Path:
    """`distribution` as a wheel in `directory` (its site-packages files; scripts and caches left out)."""
    info = Path(str(distribution._path))  # type: ignore[attr-defined]  # the .dist-info directory
    site = info.parent
    tags = [
        line.split(":", 1)[1].strip() for line in (info / "WHEEL").read_text().splitlines() if line.startswith("Tag:")
    ]
    name = distribution.metadata["Name"].replace("-", "_")
    wheel = directory / f"{name}-{distribution.version}-{tags[0]}.whl"
    record_name = f"{info.name}/RECORD"
    rows: list[list[str]] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for entry in distribution.files or []:
            path = str(entry)
            if path.startswith("..") or "__pycache__" in path or path == record_name or path.endswith(".pyc"):
                continue
            if Path(path).name in ("INSTALLER", "REQUESTED", "direct_url.json"):
                continue
            data = (site / path).read_bytes()
            archive.writestr(path, data)
            rows.append(_record_line(path, data))
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([*rows, [record_name, "", ""]])
        archive.writestr(record_name, out.getvalue())
    return wheel


def build(requirements: Iterable[str], directory: Path) -> dict[str, Path]:
    """A wheel for each distribution `requirements` need, in `directory`; by canonical name."""
    directory.mkdir(parents=True, exist_ok=True)
    return {key: repack(dist, directory) for key, dist in closure(requirements).items()}
