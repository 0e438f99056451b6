"""The poller image: hadolint-clean Dockerfile; built for real with buildah (offline), run as its
non-root user against the fake NVML library, scraped from the host, stopped with SIGTERM."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from harness.ports import free_port
from infra import REPO_ROOT

HADOLINT = Path(sys.executable).parent / "hadolint"
MAX_IMAGE_BYTES = 150 * 1000 * 1000  # the goal: under 150 MB uncompressed


image_harness: ModuleType = importlib.import_module("harness.poller_image")


def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run([str(HADOLINT), str(REPO_ROOT / "poller" / "Dockerfile")], capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_dockerfile_has_base_image_args_a_numeric_user_and_a_healthcheck() -> None:
    text = (REPO_ROOT / "poller" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text
    assert "ARG BUILD_IMAGE=" in text and "FROM ${BUILD_IMAGE} AS build" in text
    assert "\nUSER 65532:65532\n" in text
    assert "\nHEALTHCHECK " in text


def test_the_debian_mirror_comes_from_apt_sources() -> None:
    mirror = image_harness.debian_mirror()
    assert mirror.startswith(("http://", "https://", "file:/"))
    assert any(mirror in entry.get("uris", []) for entry in image_harness.apt_sources())


@pytest.fixture
def image_store() -> Iterator[Path]:
    # Not under pytest's tmp_path: its later clean-up must never walk into a buildah tree.
    store = Path(tempfile.mkdtemp(prefix="poller-image-", dir="/var/tmp"))
    store.chmod(0o755)
    yield store
    image_harness.Buildah(store).remove_store()


@pytest.mark.slow
def test_image_builds_offline_runs_as_non_root_and_serves_metrics(
    image_store: Path, harness: ModuleType, fake_nvml_lib: Path
) -> None:
    image = image_harness.build_poller_image(image_store)
    print(f"\npoller image: {image.size_bytes / 1e6:.1f} MB uncompressed (layers {image.layer_sizes})")
    assert image.size_bytes < MAX_IMAGE_BYTES
    config = image.config
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/usr/bin/python3", "-m", "poller"]
    assert config["Healthcheck"]["Test"] == ["CMD", "/usr/bin/python3", "-m", "poller.healthcheck"]
    assert "POLLER_LISTEN=0.0.0.0:9400" in config["Env"]

    # The fake driver and its config, readable by the image's user.
    shared = image_store / "fake-nvml"
    shared.mkdir(mode=0o755)
    shutil.copy(fake_nvml_lib / harness.SONAME, shared / harness.SONAME)
    config_path = shared / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu(), harness.hot_gpu()]).write(config_path)
    config_path.chmod(0o644)

    buildah = image.buildah
    container = buildah("from", image.tag)
    mount = Path(buildah("mount", container))
    marker = time.time()
    buildah("umount", container)
    assert buildah("run", container, "--", "/usr/bin/python3", "-c", "import os; print(os.getuid(), os.getgid())") == (
        "65532 65532"
    )

    port = free_port()
    listen = f"127.0.0.1:{port}"
    run = subprocess.Popen(
        buildah.command(
            "run",
            "--volume",
            f"{shared}:/opt/fake-nvml:ro",
            "--env",
            "LD_LIBRARY_PATH=/opt/fake-nvml",
            "--env",
            "FAKE_NVML_CONFIG=/opt/fake-nvml/nvml.conf",
            "--env",
            "NODE_NAME=image-node",
            container,
            "--",
            *config["Entrypoint"],
            "--listen",
            listen,
            "--min-interval",
            "0",
        ),
        env=buildah.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    poller_pid = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and poller_pid is None:
            assert run.poll() is None, run.communicate()[0]
            poller_pid = next(
                (
                    pid
                    for pid in image_harness.descendants(run.pid)
                    if image_harness.process_cmdline(pid)[:3] == config["Entrypoint"]
                ),
                None,
            )
            time.sleep(0.1)
        assert poller_pid is not None, "the poller process did not start"
        assert image_harness.process_uid(poller_pid) == 65532

        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = harness.http_get("127.0.0.1", port, "/healthz", timeout=2)[0]
            except OSError:
                time.sleep(0.2)
        assert status == 200
        probe = subprocess.run(
            buildah.command(
                "run", "--env", f"POLLER_LISTEN={listen}", container, "--", *config["Healthcheck"]["Test"][1:]
            ),
            env=buildah.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.returncode == 0, probe.stderr

        scraper = harness.MetricsEndpoint("127.0.0.1", port)
        assert scraper.value("ml_gpu_temperature_celsius", gpu_id="1", node="image-node") == 90
        assert scraper.value("ml_gpu_poller_nvml_up") == 1
        assert scraper.value("ml_gpu_poller_devices") == 2

        os.kill(poller_pid, signal.SIGTERM)  # buildah run does not forward signals: stop the poller itself
        output, _ = run.communicate(timeout=30)
        assert run.returncode == 0, output
        assert "SIGTERM received, stopping" in output
    finally:
        if run.poll() is None:
            for pid in reversed(image_harness.descendants(run.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            run.kill()
            run.wait()

    # Read-only root friendly: the poller wrote nothing into the image's filesystem. buildah run
    # itself writes /etc/hosts and makes the mount points /run and /opt/fake-nvml.
    made_by_buildah = ["etc", "etc/hosts", "opt", "opt/fake-nvml"]
    mount = Path(buildah("mount", container))
    try:
        written = sorted(
            str(path.relative_to(mount))
            for path in mount.rglob("*")
            if not path.is_symlink()
            and path.lstat().st_mtime > marker
            and path.relative_to(mount).parts[0] not in ("proc", "sys", "dev", "run")
        )
    finally:
        buildah("umount", container)
    assert [path for path in written if path not in made_by_buildah] == []
