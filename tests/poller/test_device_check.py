"""The device check (`make device-check`) proven ready on the fake libnvidia-ml.so.1 and a fake
nvidia-smi: it passes when they agree, names the field when they do not, sees GPM rise under a
load, writes the BENCHMARKS.md section and its $OUT files, and says when there is no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

# Each runs scripts/device_check.py, which starts the poller on the fake driver and reads it for seconds.
pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "device_check.py"
LOAD = REPO_ROOT / "harness" / "fake_nvml" / "fake_gpu_load.py"


def run_check(
    harness: ModuleType, lib: Path, config: Path, work: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    tools = work / "bin"
    harness.install_fake_nvidia_smi(tools)
    environment = harness.poller_env(lib, config, {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"})
    environment.update(env or {})
    out = work / "out"
    out.mkdir(exist_ok=True)
    environment["OUT"] = str(out)
    command = [sys.executable, str(SCRIPT), "--benchmarks", str(work / "BENCHMARKS.md"), "--passes", "20", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=280)


@pytest.fixture
def two_gpus(harness: ModuleType, nvml_config: Path) -> Path:
    """An H100 (GPM) and an A100 (no GPM: compute capability 8.0)."""
    harness.FakeNvml(
        gpus=[harness.FakeGpu(), harness.FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm_supported=False)],
        driver_version="560.35.03",
    ).write(nvml_config)
    return nvml_config


def test_device_check_passes_on_the_fake_driver_sees_gpm_rise_and_writes_its_figures(
    harness: ModuleType, fake_nvml_lib: Path, two_gpus: Path, tmp_path: Path
) -> None:
    load = f"{sys.executable} {LOAD} {two_gpus}"
    result = run_check(harness, fake_nvml_lib, two_gpus, tmp_path, "--load", load, "--load-seconds", "4")
    report = result.stdout
    assert result.returncode == 0, report + result.stderr
    assert "[FAIL]" not in report
    for field in ("utilization.gpu", "memory.total", "memory.free", "temperature.gpu", "power.draw", "clocks.sm"):
        assert f"[ok] GPU 0 (NVIDIA H100 80GB HBM3): {field}:" in report, field
    assert "[ok] driver version: poller 560.35.03, nvidia-smi 560.35.03" in report
    assert "[ok] GPU NVIDIA H100 80GB HBM3 (GPU-00000000-0000-0000-0000-000000000000): energy counter rose" in report
    assert "compute capability 9.0: GPM gauges present (4/4)" in report
    assert "compute capability 8.0 (before Hopper): no GPM gauges" in report
    assert "[ok] GPM SM activity rose by 10 points or more under the load" in report
    assert "sm_active_percent 42.0 -> 95.0" in report  # idle -> peak
    assert "collection pass (20 passes, 2 GPUs)" in report
    section = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## On a real GPU" in section and "make device-check" in section
    assert "GPUs reporting GPM | 1 of 2" in section
    out = tmp_path / "out"
    assert (out / "device-check-report.txt").read_text().startswith(report)
    assert (out / "BENCHMARKS.md").read_text() == section


def test_a_field_nvidia_smi_disagrees_on_fails_the_check_and_is_named(
    harness: ModuleType, fake_nvml_lib: Path, two_gpus: Path, tmp_path: Path
) -> None:
    overrides = {"FAKE_NVIDIA_SMI_OVERRIDES": "1:temperature.gpu=71;0:enforced.power.limit=650.00"}
    result = run_check(harness, fake_nvml_lib, two_gpus, tmp_path, "--load", "none", env=overrides)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert failed == [
        "[FAIL] GPU 0 (NVIDIA H100 80GB HBM3): enforced.power.limit: poller 700, nvidia-smi 650 (tolerance 1: rounding)",
        "[FAIL] GPU 1 (NVIDIA A100-SXM4-80GB): temperature.gpu: poller 40, nvidia-smi 71 (tolerance 3: moves "
        "within a second)",
    ]
    assert "[--] no CUDA load: --load none" in result.stdout
    assert "Result: 2 check(s) failed" in result.stdout
    assert "Checks: 2 failed" in (tmp_path / "BENCHMARKS.md").read_text()


def test_without_nvidia_smi_it_says_there_is_no_gpu_and_exits_2(
    harness: ModuleType, fake_nvml_lib: Path, two_gpus: Path, tmp_path: Path
) -> None:
    result = run_check(harness, fake_nvml_lib, two_gpus, tmp_path, "--nvidia-smi", "no-such-nvidia-smi")
    assert result.returncode == 2
    assert "no no-such-nvidia-smi on PATH: this machine has no NVIDIA driver to check against" in result.stdout
    assert not (tmp_path / "BENCHMARKS.md").exists()


def test_mig_devices_of_a_gpu_already_in_mig_mode_are_compared_with_nvidia_smi(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, tmp_path: Path
) -> None:
    migs = {
        0: harness.mig("MIG-aaaaaaaa-0000-0000-0000-000000000001", "3g.40gb", 2),
        4: harness.mig("MIG-aaaaaaaa-0000-0000-0000-000000000002", "1g.10gb", 9),
    }
    parent = harness.FakeGpu(mig_mode=True, migs=migs, errors={"utilization": 3})
    harness.FakeNvml(gpus=[parent, harness.FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm_supported=False)]).write(
        nvml_config
    )
    result = run_check(harness, fake_nvml_lib, nvml_config, tmp_path, "--load", "none")
    report = result.stdout
    assert result.returncode == 0, report + result.stderr
    assert "[ok] MIG devices: poller 2, nvidia-smi -L 2 on 1 GPU(s) in MIG mode" in report
    assert "profile 3g.40gb / 3g.40gb" in report and "profile 1g.10gb / 1g.10gb" in report
    assert "MIG devices (GPUs already in MIG mode) | 2" in (tmp_path / "BENCHMARKS.md").read_text()
    # this machine's PyTorch has no CUDA: said, not failed
    assert "[--] no PyTorch with CUDA: two processes on one GPU not checked" in report


def test_without_a_gpu_in_mig_mode_it_says_so_and_changes_nothing(
    harness: ModuleType, fake_nvml_lib: Path, two_gpus: Path, tmp_path: Path
) -> None:
    before = two_gpus.read_text()
    result = run_check(harness, fake_nvml_lib, two_gpus, tmp_path, "--load", "none")
    assert "[--] no GPU is in MIG mode (the check never changes a GPU's mode): MIG devices not checked" in result.stdout
    assert two_gpus.read_text() == before
