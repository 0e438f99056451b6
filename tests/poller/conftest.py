"""Fixtures of the poller tests: the fake NVML library (built once per session) and pollers."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HARNESS_MODULE = "harness.fake_nvml"


def load_harness() -> ModuleType:
    """The fake NVML harness (a plain module; the repository root is on the import path)."""
    return importlib.import_module(HARNESS_MODULE)


@pytest.fixture(scope="session")
def harness() -> ModuleType:
    """harness/fake_nvml/__init__.py (FakeNvml, FakeGpu, PollerProcess, ...)."""
    return load_harness()


@pytest.fixture(scope="session")
def fake_nvml_lib(harness: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the complete fake libnvidia-ml.so.1."""
    return harness.build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))  # type: ignore[no-any-return]


@pytest.fixture
def nvml_config(tmp_path: Path) -> Path:
    return tmp_path / "nvml.conf"


@pytest.fixture
def start_poller(harness: ModuleType, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """start_poller(lib_dir, config, **kwargs) -> a ready PollerProcess, stopped at teardown."""
    started: list[Any] = []

    def start(lib_dir: Path | None, config: Path, **kwargs: Any) -> Any:
        poller = harness.PollerProcess(lib_dir, config, tmp_path, **kwargs)
        started.append(poller)
        poller.wait_ready()
        return poller

    yield start
    for poller in started:
        poller.stop()
