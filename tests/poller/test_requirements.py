"""The image's runtime pins (poller/requirements.txt) agree with the repository's pins."""

from __future__ import annotations

from pathlib import Path

from infra import REPO_ROOT


def pins(path: Path) -> dict[str, str]:
    result = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path}: {line!r} is not an exact name==version pin"
            result[name.strip().lower().replace("_", "-")] = version.strip()
    return result


def test_poller_pins_match_the_root_requirements() -> None:
    poller = pins(REPO_ROOT / "poller" / "requirements.txt")
    root = pins(REPO_ROOT / "requirements.txt")
    assert set(poller) == {"nvidia-ml-py", "prometheus-client", "pyyaml"}
    for name, version in poller.items():
        assert root.get(name) == version, f"{name}: poller pins {version}, root pins {root.get(name)}"
