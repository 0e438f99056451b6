"""The lock files (requirements.txt: the deploy set; requirements-dev.txt: the development set on top)
and the plain pin lists beside them (policy/requirements.txt, poller/requirements.txt), read as
{canonical distribution name: version}."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from infra import REPO_ROOT

DEPLOY_INPUT = REPO_ROOT / "requirements.in"
DEPLOY_LOCK = REPO_ROOT / "requirements.txt"
DEV_INPUT = REPO_ROOT / "requirements-dev.in"
DEV_LOCK = REPO_ROOT / "requirements-dev.txt"

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    version: str
    hashes: frozenset[str]


def logical_lines(path: Path) -> list[str]:
    """Lines without comments, backslash continuations joined."""
    joined: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("--hash") else raw.strip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            joined.append(line)
    return joined


def lock(path: Path) -> dict[str, Locked]:
    """A hashed lock: every line `name==version --hash=sha256:...` (nothing else)."""
    result: dict[str, Locked] = {}
    for line in logical_lines(path):
        requirement, *options = line.split()
        pin = PIN.match(requirement)
        assert pin, f"{path.name}: {requirement!r} is not an exact name==version pin"
        hashes = frozenset(o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:"))
        assert len(hashes) == len(options), f"{path.name}: {line!r} carries options other than hashes"
        assert hashes, f"{path.name}: {requirement} has no hash"
        name = canonical(pin["name"])
        assert name not in result, f"{path.name}: {name} locked twice"
        result[name] = Locked(pin["version"], hashes)
    return result


def pins(path: Path) -> dict[str, str]:
    """Exact pins of a requirements file, hashed or not; `-r`/`-c` lines are skipped."""
    result: dict[str, str] = {}
    for line in logical_lines(path):
        if line.startswith(("-r ", "-c ")):
            continue
        requirement = line.split()[0]
        pin = PIN.match(requirement)
        assert pin, f"{path.name}: {requirement!r} is not an exact name==version pin"
        result[canonical(pin["name"])] = pin["version"]
    return result
