"""Benchmarks run by `make bench`; each module writes its figures into BENCHMARKS.md, where each
benchmark owns one section, between its own begin and end markers, and rewrites only that section
(or appends it the first time)."""

from __future__ import annotations

import re
from pathlib import Path

from infra import REPO_ROOT

BENCHMARKS = REPO_ROOT / "BENCHMARKS.md"


def write_section(section: str, begin: str, end: str, path: Path = BENCHMARKS) -> None:
    """Replace the text from `begin` to `end` with `section` (which starts with `begin` and ends
    with `end`), or append `section` when the file has no such markers yet."""
    if not (section.startswith(begin) and section.rstrip("\n").endswith(end)):
        raise ValueError("a section starts with its begin marker and ends with its end marker")
    section = section.rstrip("\n") + "\n"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(text):
        updated = pattern.sub(lambda _: section, text, count=1)
    else:
        updated = text.rstrip("\n") + "\n\n" + section
    path.write_text(updated, encoding="utf-8")
