"""The image's runtime pins (poller/requirements.txt) agree with the development lock's."""

from __future__ import annotations

from infra import REPO_ROOT
from tests import locks


def test_poller_pins_match_the_root_requirements() -> None:
    poller = locks.pins(REPO_ROOT / "poller" / "requirements.txt")
    root = locks.pins(locks.DEV_LOCK)
    assert set(poller) == {"nvidia-ml-py", "prometheus-client", "pyyaml"}
    for name, version in poller.items():
        assert root.get(name) == version, f"{name}: poller pins {version}, root pins {root.get(name)}"
