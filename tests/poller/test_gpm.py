"""GPM (profiling metrics) on the fake libnvidia-ml.so.1: every path of the two-sample logic.

Most tests drive `NvmlSource` in this process (the fake library loaded by path, so nvidia-ml-py's
real ctypes path runs) to control each pass exactly; the driver without GPM and the served page
are tested on a poller process.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer.contract import catalog
from poller.error_counters import ErrorCounters
from poller.nvml_source import Backoff, NvmlSource
from poller.samples import GpuSample

GAUGES = ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent", "dram_bandwidth_utilization_percent")
COUNTERS = ("pcie_rx_bytes_total", "pcie_tx_bytes_total", "nvlink_rx_bytes_total", "nvlink_tx_bytes_total")
MIB = 1024 * 1024
_resets = itertools.count(1000)  # a fresh gpm_reset value puts a GPU's counters back to their start


class Rig:
    """An in-process NvmlSource over the fake library and its config file."""

    def __init__(self, harness: ModuleType, work: Path, config: Any) -> None:
        self.harness = harness
        self.path = work / "nvml.conf"
        self.live_path = work / "gpm-live"
        self.config = config
        self.write()
        self.counters = ErrorCounters()
        self.source = NvmlSource(self.counters, backoff=Backoff(0.01, 0.01))

    def write(self) -> None:
        self.config.write(self.path)

    def collect(self) -> dict[int, GpuSample]:
        """One pass; the GPUs' samples by index."""
        result = self.source.collect()
        assert result.nvml_up
        return {sample.gpu.index: sample for sample in result.samples}

    def live_samples(self) -> int:
        """GPM samples the fake has allocated and not freed."""
        return int(self.live_path.read_text()) if self.live_path.exists() else 0

    def failures(self, reason: str) -> int:
        return dict(self.counters.snapshot().failures)[reason]


@pytest.fixture(scope="module")
def in_process_library(harness: ModuleType, fake_nvml_lib: Path) -> None:
    # nvidia-ml-py's CDLL("libnvidia-ml.so.1") now finds the fake already loaded in this process.
    ctypes.CDLL(str(fake_nvml_lib / harness.SONAME))


@pytest.fixture
def rig(
    harness: ModuleType, in_process_library: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """rig(config) -> a Rig; its NvmlSource is closed at teardown."""
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(tmp_path / "nvml.conf"))
    monkeypatch.setenv("FAKE_NVML_GPM_LIVE", str(tmp_path / "gpm-live"))
    monkeypatch.setenv("FAKE_NVML_RELOAD_MS", "0")
    made: list[Rig] = []

    def make(config: Any) -> Rig:
        made.append(Rig(harness, tmp_path, config))
        return made[-1]

    yield make
    for each in made:
        each.source.close()
    assert all(each.live_samples() == 0 for each in made), "GPM samples leaked"


def gpm_values(sample: GpuSample) -> dict[str, float | None]:
    return {name: getattr(sample, name) for name in (*GAUGES, *COUNTERS)}


def test_first_pass_reports_nothing_then_each_pass_covers_the_interval_since_the_previous(
    harness: ModuleType, rig: Any
) -> None:
    gpm = {"sm_util": 87.5, "sm_occupancy": 40.0, "any_tensor_util": 61.25, "dram_bw_util": 33.0}
    gpm |= {"pcie_rx": 1000.0, "pcie_tx": 250.0, "nvlink_rx": 4096.0, "nvlink_tx": 2048.0}
    r = rig(harness.FakeNvml(gpus=[harness.FakeGpu(gpm=gpm, gpm_reset=next(_resets))]))

    started = time.monotonic()
    first = r.collect()[0]
    assert set(gpm_values(first).values()) == {None}  # the baseline: no figure over no interval
    assert first.utilization_percent == 50  # the rest of the pass is there
    time.sleep(0.2)
    second = r.collect()[0]
    elapsed = time.monotonic() - started
    assert second.sm_active_percent == pytest.approx(87.5, abs=1e-3)
    assert second.sm_occupancy_percent == pytest.approx(40.0, abs=1e-3)
    assert second.tensor_active_percent == pytest.approx(61.25, abs=1e-3)
    assert second.dram_bandwidth_utilization_percent == pytest.approx(33.0, abs=1e-3)
    # Throughput integrated over the interval into byte counters (MiB/s x seconds).
    assert second.nvlink_rx_bytes_total == pytest.approx(4096 * MIB * elapsed, rel=0.1)
    assert second.pcie_rx_bytes_total == pytest.approx(4 * second.pcie_tx_bytes_total, rel=1e-3)

    r.config.gpus[0].gpm["sm_util"] = 12.0  # the GPU goes quiet: the next interval shows it
    r.config.gpus[0].gpm["nvlink_rx"] = 0.0
    r.write()
    third = r.collect()[0]
    assert third.sm_active_percent == pytest.approx(12.0, abs=1e-3)
    assert third.nvlink_rx_bytes_total == second.nvlink_rx_bytes_total  # no traffic: no increase
    assert third.pcie_rx_bytes_total > second.pcie_rx_bytes_total
    assert r.failures("query") == 0
    assert r.live_samples() == 2  # two samples per GPU, made once


def test_gpus_without_gpm_are_omitted_with_one_log_line(
    harness: ModuleType, rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poller")
    config = harness.FakeNvml(
        gpus=[harness.FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm_supported=False), harness.FakeGpu()]
    )
    r = rig(config)
    for _ in range(3):
        samples = r.collect()
    assert set(gpm_values(samples[0]).values()) == {None}
    assert samples[0].temperature_celsius == 40  # everything else of that GPU is reported
    assert samples[1].sm_active_percent == pytest.approx(42.0, abs=1e-3)
    # A re-initialisation (GPU 1 lost and back) must not log the unsupported GPU again.
    config.gpus[1].lost = True
    r.write()
    r.collect()
    config.gpus[1].lost = False
    r.write()
    time.sleep(0.05)
    r.collect()
    lines = [m for m in caplog.messages if "not supported on" in m]
    assert len(lines) == 1, caplog.messages
    assert "GPU 0 (NVIDIA A100-SXM4-80GB" in lines[0] and "GPU 1" not in lines[0]
    assert r.failures("query") == 0
    assert r.live_samples() == 2


def test_a_gpu_that_disappears_and_returns_reports_nothing_on_its_first_pass_back(
    harness: ModuleType, rig: Any
) -> None:
    config = harness.FakeNvml(gpus=[harness.FakeGpu(), harness.FakeGpu()])
    r = rig(config)
    r.collect()
    before = r.collect()
    assert before[1].sm_active_percent is not None
    assert r.live_samples() == 4

    config.gpus[1].lost = True
    r.write()
    during = r.collect()
    assert 1 not in during and during[0].sm_active_percent is not None
    assert r.live_samples() == 2  # the lost GPU's samples were freed

    config.gpus[1].lost = False
    r.write()
    time.sleep(0.05)  # past the re-initialisation backoff
    back = r.collect()
    assert 1 in back
    assert [back[1].sm_active_percent, back[1].tensor_active_percent] == [None, None]  # a new baseline
    # The byte counters are the poller's own: they continue, never go back.
    counter = before[1].nvlink_rx_bytes_total
    assert counter is not None and back[1].nvlink_rx_bytes_total == counter
    after = r.collect()
    assert after[1].sm_active_percent == pytest.approx(42.0, abs=1e-3)
    assert (after[1].nvlink_rx_bytes_total or 0) > counter
    assert r.live_samples() == 4


def test_counters_that_wrap_between_two_samples_give_no_figure_for_that_interval(
    harness: ModuleType, rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poller")
    slow = {name: 1.0 for name in ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx")}  # no second wrap
    wrapping = harness.FakeGpu(
        gpm=harness.DEFAULT_GPM_RATES | slow,
        gpm_reset=next(_resets),
        gpm_counter_bits=32,
        gpm_counter_start=2**32 - 1000,  # 1000 counts below the wrap: the first interval crosses it
    )
    r = rig(harness.FakeNvml(gpus=[wrapping, harness.FakeGpu()]))
    r.collect()
    time.sleep(0.05)  # every counter crosses the wrap (at 1 MiB/s: after 1 ms), none twice
    wrapped = r.collect()
    assert set(gpm_values(wrapped[0]).values()) == {None}  # nothing rather than a negative figure
    assert wrapped[1].sm_active_percent == pytest.approx(42.0, abs=1e-3)  # the other GPU is unaffected
    after = r.collect()  # the wrapped sample is the next baseline
    assert after[0].sm_active_percent == pytest.approx(42.0, abs=1e-3)
    assert after[0].pcie_rx_bytes_total is not None
    assert len([m for m in caplog.messages if "out of range (counters wrapped or reset)" in m]) == 1
    assert r.failures("query") == 0


def test_counters_reset_between_two_samples_give_no_figure_and_the_byte_counters_never_go_back(
    harness: ModuleType, rig: Any
) -> None:
    gpu = harness.FakeGpu(gpm_reset=next(_resets))
    r = rig(harness.FakeNvml(gpus=[gpu]))
    r.collect()
    good = r.collect()[0]
    assert good.tensor_active_percent == pytest.approx(31.0, abs=1e-3)
    gpu.gpm_reset = next(_resets)  # a GPU reset: its counters start again from 0
    r.write()
    reset = r.collect()[0]
    assert [reset.sm_active_percent, reset.tensor_active_percent] == [None, None]
    assert reset.nvlink_rx_bytes_total == good.nvlink_rx_bytes_total  # the interval is not counted
    after = r.collect()[0]
    assert after.tensor_active_percent == pytest.approx(31.0, abs=1e-3)
    assert (after.nvlink_rx_bytes_total or 0) > (good.nvlink_rx_bytes_total or 0)


def test_metrics_a_gpu_does_not_offer_are_dropped_with_one_log_line(
    harness: ModuleType, rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poller")
    not_supported = harness.NVML_ERROR_NOT_SUPPORTED
    pcie_card = harness.FakeGpu(
        name="NVIDIA H100 PCIe", gpm_errors={"nvlink_rx": not_supported, "nvlink_tx": not_supported}
    )
    r = rig(harness.FakeNvml(gpus=[pcie_card]))
    for _ in range(4):
        sample = r.collect()[0]
        assert sample.nvlink_rx_bytes_total is None and sample.nvlink_tx_bytes_total is None
    assert sample.sm_active_percent == pytest.approx(42.0, abs=1e-3)
    assert sample.pcie_tx_bytes_total is not None
    lines = [m for m in caplog.messages if "not supported; omitted" in m]
    assert lines == [
        "GPU 0 (GPU-00000000-0000-0000-0000-000000000000): GPM metric(s) nvlink_rx, nvlink_tx not supported; omitted"
    ]
    assert r.failures("query") == 0


def test_a_failing_metric_is_omitted_for_that_pass_and_counted(harness: ModuleType, rig: Any) -> None:
    gpu = harness.FakeGpu(gpm_errors={"any_tensor_util": harness.NVML_ERROR_UNKNOWN})
    r = rig(harness.FakeNvml(gpus=[gpu]))
    r.collect()
    failing = r.collect()[0]
    assert failing.tensor_active_percent is None
    assert failing.sm_active_percent == pytest.approx(42.0, abs=1e-3)
    assert r.failures("query") == 1
    gpu.gpm_errors = {}
    r.write()
    assert r.collect()[0].tensor_active_percent == pytest.approx(31.0, abs=1e-3)  # asked again: back


def test_a_failing_sample_keeps_the_previous_baseline(harness: ModuleType, rig: Any) -> None:
    gpu = harness.FakeGpu()
    r = rig(harness.FakeNvml(gpus=[gpu]))
    r.collect()
    gpu.errors = {"gpm_sample": harness.NVML_ERROR_UNKNOWN}
    r.write()
    failing = r.collect()[0]
    assert failing.sm_active_percent is None and failing.temperature_celsius == 40
    assert r.failures("query") == 1
    gpu.errors = {}
    r.write()
    assert r.collect()[0].sm_active_percent == pytest.approx(42.0, abs=1e-3)  # over both intervals


def test_a_gpu_refusing_gpm_samples_loses_gpm_until_reinitialisation(
    harness: ModuleType, rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # What a GPU in MIG mode answers for device-level samples (MIG instances are out of scope).
    caplog.set_level(logging.INFO, logger="poller")
    gpu = harness.FakeGpu(errors={"gpm_sample": harness.NVML_ERROR_NOT_SUPPORTED})
    r = rig(harness.FakeNvml(gpus=[gpu]))
    for _ in range(3):
        sample = r.collect()[0]
        assert sample.sm_active_percent is None and sample.utilization_percent == 50
    assert len([m for m in caplog.messages if "nvmlGpmSampleGet not available" in m]) == 1
    assert r.live_samples() == 0  # freed at once
    assert r.failures("query") == 0


def test_nvml_gone_during_a_gpm_sample_reports_nvml_down(harness: ModuleType, rig: Any) -> None:
    gpu = harness.FakeGpu()
    config = harness.FakeNvml(gpus=[gpu])
    r = rig(config)
    r.collect()
    gpu.errors = {"gpm_sample": harness.NVML_ERROR_DRIVER_NOT_LOADED}
    config.init_error = harness.NVML_ERROR_DRIVER_NOT_LOADED
    r.write()
    assert r.source.collect().nvml_up is False
    assert r.live_samples() == 0  # freed before nvmlShutdown
    gpu.errors = {}
    config.init_error = 0
    r.write()
    time.sleep(0.05)
    assert r.collect()[0].sm_active_percent is None  # a new session starts with a new baseline
    assert r.collect()[0].sm_active_percent == pytest.approx(42.0, abs=1e-3)


def test_a_driver_without_gpm_serves_everything_else_and_says_so_once(
    harness: ModuleType, nvml_config: Path, start_poller: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    lib = harness.build_fake_nvml(tmp_path_factory.mktemp("no-gpm"), omit=harness.GPM_FUNCTIONS)
    harness.FakeNvml(gpus=[harness.FakeGpu(), harness.FakeGpu()]).write(nvml_config)
    poller = start_poller(lib, nvml_config)
    for _ in range(2):
        names = {name for name, _, _ in poller.samples()}
        assert catalog.GPU_TEMPERATURE_CELSIUS.name in names
        gpm_names = {
            m.name
            for m in (
                catalog.GPU_SM_ACTIVE_PERCENT,
                catalog.GPU_SM_OCCUPANCY_PERCENT,
                catalog.GPU_TENSOR_ACTIVE_PERCENT,
                catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT,
                catalog.GPU_PCIE_BYTES_TOTAL,
                catalog.GPU_NVLINK_BYTES_TOTAL,
            )
        }
        assert not names & gpm_names
    assert poller.log().count("has no GPM") == 1, poller.log()
    assert poller.value(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name, reason="query") == 0


def test_the_served_page_has_gpm_gauges_and_byte_counters(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: Any
) -> None:
    gpu = harness.FakeGpu(gpm=harness.DEFAULT_GPM_RATES | {"sm_util": 97.0, "any_tensor_util": 3.0})
    harness.FakeNvml(gpus=[gpu]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)  # the start-up pass is the baseline
    first = {f.name: f for f in text_string_to_metric_families(poller.scrape())}
    time.sleep(0.1)
    second = {f.name: f for f in text_string_to_metric_families(poller.scrape())}
    # "Busy" by NVML's figure, and by SM activity, but the tensor cores are nearly idle.
    assert second[catalog.GPU_SM_ACTIVE_PERCENT.name].samples[0].value == pytest.approx(97.0, abs=1e-3)
    assert second[catalog.GPU_TENSOR_ACTIVE_PERCENT.name].samples[0].value == pytest.approx(3.0, abs=1e-3)
    nvlink = catalog.GPU_NVLINK_BYTES_TOTAL.name.removesuffix("_total")
    assert second[nvlink].type == "counter"
    rx = {s.labels["direction"]: s.value for s in second[nvlink].samples if s.name.endswith("_total")}
    before = {s.labels["direction"]: s.value for s in first[nvlink].samples if s.name.endswith("_total")}
    assert set(rx) == {"rx", "tx"} and rx["rx"] > before["rx"] > 0
