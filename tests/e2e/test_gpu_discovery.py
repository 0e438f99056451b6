"""Which GPUs a training job holds: NVML in the container (the fake libnvidia-ml), else GPU UUIDs in
NVIDIA_VISIBLE_DEVICES, else none; and the `ml_training_job_gpu_info` series the job exports."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.gpus import Discovery, Source, discover, from_visible_devices
from infra import REPO_ROOT

from .conftest import load_harness

UUID_A = "GPU-1b2c3d4e-aaaa-bbbb-cccc-000000000001"
UUID_B = "GPU-1b2c3d4e-aaaa-bbbb-cccc-000000000002"


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load_harness().build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))  # type: ignore[no-any-return]


MIG_A = "MIG-5c6d7e8f-aaaa-bbbb-cccc-000000000001"
MIG_B = "MIG-5c6d7e8f-aaaa-bbbb-cccc-000000000002"


def discover_in_a_container(
    tmp_path: Path, lib_dir: Path | None, visible_devices: str | None, gpus: list[Any] | None = None
) -> tuple[dict[str, Any], str]:
    """`python -m foxhunt_trainer` as a container would run it: (its JSON, its log)."""
    harness = load_harness()
    config = tmp_path / "nvml.conf"
    harness.FakeNvml(gpus=gpus or [harness.FakeGpu(uuid=UUID_A), harness.FakeGpu(uuid=UUID_B)]).write(config)
    env = harness.poller_env(lib_dir, config)
    env.pop("NVIDIA_VISIBLE_DEVICES", None)
    if visible_devices is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = visible_devices
    done = subprocess.run(
        [sys.executable, "-m", "foxhunt_trainer"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout), done.stderr


def test_nvml_in_the_container_names_every_gpu_it_was_given(tmp_path: Path, fake_nvml: Path) -> None:
    # The runtime exposes exactly the allocated GPUs; NVML wins over an index list in the env.
    found, log = discover_in_a_container(tmp_path, fake_nvml, "0,1")
    assert found == {"uuids": [UUID_A, UUID_B], "source": "nvml", "unattributed": ""}
    assert "unattributed" not in log


def test_nvml_in_a_mig_container_names_the_mig_devices_not_their_parent(tmp_path: Path, fake_nvml: Path) -> None:
    harness = load_harness()
    parent = harness.FakeGpu(
        uuid=UUID_A,
        mig_mode=True,
        migs={0: harness.mig(MIG_A, "1g.10gb", 7), 3: harness.mig(MIG_B, "3g.40gb", 2)},
    )
    found, _ = discover_in_a_container(tmp_path, fake_nvml, MIG_A, gpus=[parent, harness.FakeGpu(uuid=UUID_B)])
    assert found == {"uuids": [MIG_A, MIG_B, UUID_B], "source": "nvml", "unattributed": ""}


def test_mig_uuids_in_nvidia_visible_devices_are_used_and_the_legacy_form_is_not() -> None:
    assert from_visible_devices(f"{MIG_A},{MIG_B}") == Discovery((MIG_A, MIG_B), Source.ENVIRONMENT)
    legacy = from_visible_devices(f"MIG-{UUID_A}/1/0")
    assert legacy.uuids == () and "legacy MIG identifier" in legacy.unattributed_reason
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "job-mig", gpu_uuids=[MIG_A])
    assert gpu_info_lines(metrics) == [
        f'ml_training_job_gpu_info{{job_id="job-mig",model_type="dqn",uuid="{MIG_A}"}} 1.0'
    ]


def test_without_nvml_uuids_in_nvidia_visible_devices_are_used(tmp_path: Path) -> None:
    found, log = discover_in_a_container(tmp_path, None, f"{UUID_B}, {UUID_A}")
    assert found == {"uuids": [UUID_B, UUID_A], "source": "environment", "unattributed": ""}
    assert log == ""


@pytest.mark.parametrize("visible", ["0,1", "all"])
def test_indices_or_all_without_nvml_leave_the_job_unattributed_with_one_log_line(tmp_path: Path, visible: str) -> None:
    found, log = discover_in_a_container(tmp_path, None, visible)
    assert found["uuids"] == [] and found["source"] == "none"
    lines = [line for line in log.splitlines() if line.strip()]
    assert len(lines) == 1, log
    assert "unattributed" in lines[0] and f"NVIDIA_VISIBLE_DEVICES='{visible}'" in lines[0]
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in lines[0]


@pytest.mark.parametrize("visible", [None, "void", "none", ""])
def test_a_cpu_only_job_has_no_gpus_and_logs_nothing(tmp_path: Path, visible: str | None) -> None:
    found, log = discover_in_a_container(tmp_path, None, visible)
    assert found == {"uuids": [], "source": "none", "unattributed": ""}
    assert log == ""


def test_partly_named_devices_export_the_uuids_and_say_why_the_rest_is_missing() -> None:
    result = from_visible_devices(f"{UUID_A},1")
    assert result.uuids == (UUID_A,) and result.source is Source.ENVIRONMENT
    assert "by index" in result.unattributed_reason


def test_discover_prefers_nvml_and_falls_back_to_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert discover({"NVIDIA_VISIBLE_DEVICES": UUID_B}, nvml=lambda: (UUID_A,)) == Discovery((UUID_A,), Source.NVML)
    assert discover({"NVIDIA_VISIBLE_DEVICES": UUID_B}, nvml=lambda: None) == Discovery((UUID_B,), Source.ENVIRONMENT)
    # NVML answering with no device (no GPU given) is no answer: the environment decides.
    assert discover({}, nvml=lambda: ()) == Discovery((), Source.NONE)
    with caplog.at_level(logging.WARNING):
        assert discover({"NVIDIA_VISIBLE_DEVICES": "all"}, nvml=lambda: None).uuids == ()
    assert len(caplog.records) == 1


def gpu_info_lines(metrics: TrainingMetrics) -> list[str]:
    name = catalog.TRAINING_JOB_GPU_INFO.name
    return sorted(line for line in render_text(metrics.registry).decode().splitlines() if line.startswith(name + "{"))


def test_a_job_exports_one_info_series_per_gpu_it_holds() -> None:
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "job-1", gpu_uuids=[UUID_A, UUID_B])
    metrics.start_job("ppo", "job-2", gpu_uuids=[])
    assert gpu_info_lines(metrics) == [
        f'ml_training_job_gpu_info{{job_id="job-1",model_type="dqn",uuid="{UUID_A}"}} 1.0',
        f'ml_training_job_gpu_info{{job_id="job-1",model_type="dqn",uuid="{UUID_B}"}} 1.0',
    ]
    with pytest.raises(ValueError, match="GPU UUIDs start with 'GPU-'"):
        metrics.start_job("dqn", "job-3", gpu_uuids=["0"])


def test_a_job_discovers_its_gpus_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", UUID_B)
    monkeypatch.setattr("foxhunt_trainer.gpus.nvml_uuids", lambda: None)
    metrics = TrainingMetrics()
    job = metrics.start_job("dqn", "job-1")
    assert job.gpu_uuids == (UUID_B,)
    assert len(gpu_info_lines(metrics)) == 1
