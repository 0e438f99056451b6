"""The poller as a process, through nvidia-ml-py's real ctypes path into the fake libnvidia-ml.so.1.

Every fault of the issue: library missing, driver not loaded, GPU lost (and back), unsupported
fields, functions missing from an older driver, failing fields, NVML gone mid-session; values and
units against what the fake holds; XID counting; the shared pass; the minimum interval; SIGTERM.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer.contract import catalog

StartPoller = Callable[..., Any]

TEMP = catalog.GPU_TEMPERATURE_CELSIUS.name
UP = catalog.GPU_POLLER_NVML_UP.name
DEVICES = catalog.GPU_POLLER_DEVICES.name
ENUMERATED = catalog.GPU_POLLER_DEVICES_ENUMERATED.name
FAILURES = catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name
ERRORS = catalog.GPU_ERRORS_TOTAL.name
XIDS = catalog.GPU_XID_ERRORS_TOTAL.name
ENERGY = catalog.GPU_ENERGY_JOULES_TOTAL.name


def test_values_units_and_labels_match_the_fake_driver(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    gpus = [
        harness.FakeGpu(
            name="NVIDIA A100-SXM4-80GB",
            uuid="GPU-1b2c3d4e-aaaa-bbbb-cccc-000000000001",
            util_gpu=97,
            util_memory=63,
            memory_total=85_899_345_920,
            memory_used=42_949_672_960,
            temperature=71,
            power_mw=312_456,
            power_limit_mw=400_000,
            clock_sm_mhz=1410,
            clock_mem_mhz=1593,
            clocks_event_reasons=0x4,
            ecc_corrected=12,
            ecc_uncorrected=1,
        ),
        harness.hot_gpu(),
    ]
    harness.FakeNvml(
        gpus=gpus, driver_version="535.129.03", nvml_version="12.535.129.03", cuda_driver_version=12020
    ).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, node="gpu-node-3")
    text = poller.scrape()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    gpu0 = {"node": "gpu-node-3", "gpu_id": "0", "uuid": gpus[0].uuid, "gpu_name": "NVIDIA A100-SXM4-80GB"}

    def value(metric: catalog.Metric, **extra: str) -> float:
        name = metric.name.removesuffix("_total") if metric.type is catalog.MetricType.COUNTER else metric.name
        matches = [s.value for s in families[name].samples if s.labels == {**gpu0, **extra}]
        assert len(matches) == 1, (metric.name, extra, matches)
        return float(matches[0])

    assert value(catalog.GPU_UTILIZATION_PERCENT) == 97
    assert value(catalog.GPU_MEMORY_UTILIZATION_PERCENT) == 63
    assert value(catalog.GPU_MEMORY_TOTAL_BYTES) == 85_899_345_920
    assert value(catalog.GPU_MEMORY_USED_BYTES) == 42_949_672_960
    assert value(catalog.GPU_TEMPERATURE_CELSIUS) == 71
    assert value(catalog.GPU_POWER_WATTS) == pytest.approx(312.456)  # milliwatts -> watts
    assert value(catalog.GPU_POWER_LIMIT_WATTS) == 400.0
    assert value(catalog.GPU_SM_CLOCK_HERTZ) == 1_410_000_000  # MHz -> Hz
    assert value(catalog.GPU_MEMORY_CLOCK_HERTZ) == 1_593_000_000
    assert value(catalog.GPU_CLOCK_THROTTLE_ACTIVE, reason="sw_power_cap") == 1
    assert value(catalog.GPU_CLOCK_THROTTLE_ACTIVE, reason="hw_thermal_slowdown") == 0
    assert value(catalog.GPU_ECC_ERRORS_TOTAL, ecc_type="corrected") == 12
    assert value(catalog.GPU_ECC_ERRORS_TOTAL, ecc_type="uncorrected") == 1
    assert families[catalog.GPU_ECC_ERRORS_TOTAL.name.removesuffix("_total")].type == "counter"

    hot = {"gpu_id": "1", "uuid": "GPU-00000000-0000-0000-0000-000000000001"}
    assert poller.value(TEMP, **hot) == 90
    assert poller.value(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, reason="hw_thermal_slowdown", **hot) == 1
    assert poller.value(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, reason="sw_thermal_slowdown", **hot) == 1

    info = families[catalog.GPU_DRIVER_INFO.name].samples
    assert [s.labels for s in info] == [
        {
            "node": "gpu-node-3",
            "driver_version": "535.129.03",
            "nvml_version": "12.535.129.03",
            "cuda_driver_version": "12.2",
        }
    ]
    assert poller.value(UP) == 1
    assert poller.value(DEVICES) == 2
    assert 0 < poller.value(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name) < 1
    assert poller.value(FAILURES, reason="query") == 0


def test_energy_is_a_counter_in_joules_that_grows_with_the_power_drawn(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml(gpus=[harness.FakeGpu(energy_mj=7_000_000, power_mw=400_000)]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert f"# TYPE {ENERGY} counter" in poller.scrape()
    first = poller.value(ENERGY)
    assert first is not None and 7_000 <= first < 7_000 + 400 * 5  # millijoules -> joules
    time.sleep(0.5)
    second = poller.value(ENERGY)
    assert second is not None and second - first == pytest.approx(400 * 0.5, rel=0.5)  # 400 W for ~0.5 s


def test_library_missing_keeps_serving_logs_once_and_recovers_when_it_appears(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller, tmp_path: Path
) -> None:
    harness.FakeNvml().write(nvml_config)
    empty = tmp_path / "no-driver"
    empty.mkdir()
    poller = start_poller(empty, nvml_config)
    assert poller.value(UP) == 0
    assert poller.value(DEVICES) == 0
    assert poller.values(TEMP) == []
    # Retries with backoff (1 s, 2 s, ...): wait for a second failed attempt, then count log lines.
    deadline = time.monotonic() + 10
    while (poller.value(FAILURES, reason="init") or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (poller.value(FAILURES, reason="init") or 0) >= 2
    assert poller.log().count("NVML init failed") == 1, poller.log()
    assert poller.process.poll() is None
    assert harness.http_get(poller.host, poller.port, "/healthz")[0] == 200

    shutil.copy(fake_nvml_lib / harness.SONAME, empty / harness.SONAME)  # the driver gets installed
    poller.wait_for(UP, 1, timeout=15)
    assert poller.value(DEVICES) == 1
    assert poller.value(TEMP, gpu_id="0") == 40
    assert "NVML is back" in poller.log()


def test_driver_not_loaded_then_loaded(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml(init_error=harness.NVML_ERROR_DRIVER_NOT_LOADED)
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.value(UP) == 0
    assert "Driver Not Loaded" in poller.log()
    config.init_error = 0
    config.write(nvml_config)
    poller.wait_for(UP, 1)
    assert poller.value(DEVICES) == 1


def test_lost_gpu_drops_its_series_counts_once_keeps_the_others_and_comes_back(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml(gpus=[harness.FakeGpu(temperature=40 + i) for i in range(3)])
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.value(DEVICES) == 3

    config.gpus[1].lost = True
    config.write(nvml_config)
    poller.wait_for(DEVICES, 2)
    assert poller.value(ENUMERATED) == 3
    assert poller.values(TEMP, gpu_id="1") == []
    assert poller.value(TEMP, gpu_id="0") == 40
    assert poller.value(TEMP, gpu_id="2") == 42
    assert poller.value(UP) == 1
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost") == 1
    assert poller.value(ERRORS, gpu_id="0", error_type="gpu_lost") == 0
    assert (poller.value(FAILURES, reason="gpu_lost") or 0) >= 1
    time.sleep(1.5)  # a re-initialisation while it is still lost must not count the loss again
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost") == 1

    config.gpus[1].lost = False
    config.write(nvml_config)
    poller.wait_for(TEMP, 41, timeout=15, gpu_id="1")  # back after NVML re-initialises
    assert poller.value(DEVICES) == 3
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost") == 1
    assert poller.log().count("GPU 1 (GPU-00000000-0000-0000-0000-000000000001) is lost") == 1
    assert "GPU 1 (GPU-00000000-0000-0000-0000-000000000001) answers again" in poller.log()


def test_a_gpu_lost_from_the_first_pass_is_counted_under_its_index(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    """A GPU that fell off the bus before the poller started: NVML enumerates it, never identifies it."""
    config = harness.FakeNvml(gpus=[harness.FakeGpu(temperature=40 + i) for i in range(3)])
    config.gpus[1].lost = True
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.value(UP) == 1
    assert poller.value(ENUMERATED) == 3
    assert poller.value(DEVICES) == 2
    assert poller.values(TEMP, gpu_id="1") == []
    # Counted once, under its index: no UUID or name was ever read (empty labels, which Prometheus drops).
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost", uuid="", gpu_name="") == 1
    assert poller.value(ERRORS, gpu_id="0", error_type="gpu_lost") == 0
    time.sleep(1.5)  # re-initialisations while it is still lost do not count it again
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost") == 1
    assert poller.log().count("GPU 1 (uuid unknown: lost before the poller identified it) is lost") == 1

    config.gpus[1].lost = False
    config.write(nvml_config)
    poller.wait_for(TEMP, 41, timeout=15, gpu_id="1")  # answers again: now identified
    assert poller.value(DEVICES) == 3
    uuid = config.gpus[1].default_uuid(1)
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost", uuid=uuid) == 0
    assert poller.value(ERRORS, gpu_id="1", error_type="gpu_lost", uuid="") == 1  # the loss stays counted


def test_unsupported_fields_are_omitted_and_the_rest_reported(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    not_supported = harness.NVML_ERROR_NOT_SUPPORTED
    consumer = harness.FakeGpu(
        name="NVIDIA GeForce RTX 4090",
        errors={
            "power": not_supported,
            "ecc_corrected": not_supported,
            "ecc_uncorrected": not_supported,
            "clocks_event_reasons": not_supported,
            "supported_events": not_supported,
            "energy": not_supported,
        },
    )
    harness.FakeNvml(gpus=[consumer, harness.FakeGpu()]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    for _ in range(2):  # the second pass skips the cached unsupported fields
        assert poller.values(catalog.GPU_POWER_WATTS.name, gpu_id="0") == []
        assert poller.values(catalog.GPU_ECC_ERRORS_TOTAL.name, gpu_id="0") == []
        assert poller.values(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, gpu_id="0") == []
        assert poller.value(TEMP, gpu_id="0") == 40
        assert poller.value(catalog.GPU_POWER_LIMIT_WATTS.name, gpu_id="0") == 700
        assert poller.value(catalog.GPU_POWER_WATTS.name, gpu_id="1") == 100
        assert len(poller.values(catalog.GPU_ECC_ERRORS_TOTAL.name, gpu_id="1")) == 2
        assert poller.values(ENERGY, gpu_id="0") == []
        assert len(poller.values(ENERGY, gpu_id="1")) == 1
    assert poller.value(UP) == 1
    assert poller.value(FAILURES, reason="query") == 0
    assert poller.value(FAILURES, reason="event") == 0  # no XID events on GPU 0 is not a failure
    assert poller.log().count("power not available") == 1


def test_a_failing_field_is_omitted_for_that_pass_and_counted(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml(gpus=[harness.FakeGpu(errors={"temperature": harness.NVML_ERROR_UNKNOWN})])
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.values(TEMP) == []
    assert poller.value(catalog.GPU_UTILIZATION_PERCENT.name) == 50
    assert (poller.value(FAILURES, reason="query") or 0) >= 1
    config.gpus[0].errors = {}
    config.write(nvml_config)
    poller.wait_for(TEMP, 40)  # not cached as unsupported: back on the next pass


def test_nvml_gone_mid_session_reports_down_and_reinitialises(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml()
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.value(UP) == 1
    not_loaded = harness.NVML_ERROR_DRIVER_NOT_LOADED
    config.init_error = not_loaded
    config.gpus[0].errors = {"utilization": not_loaded}
    config.write(nvml_config)
    poller.wait_for(UP, 0)
    assert poller.values(TEMP) == []
    assert poller.value(ENUMERATED) == 0
    config.init_error = 0
    config.gpus[0].errors = {}
    config.write(nvml_config)
    poller.wait_for(UP, 1, timeout=15)
    assert poller.value(TEMP) == 40


@pytest.fixture(scope="module")
def old_driver_libs(harness: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fake libraries of older drivers: without the 535 name of the clock-reason call, or without it
    and the old name and ECC."""
    base = tmp_path_factory.mktemp("old-drivers")
    return {
        "no_event_reasons": harness.build_fake_nvml(
            base / "no-event-reasons", omit=["nvmlDeviceGetCurrentClocksEventReasons"]
        ),
        "bare": harness.build_fake_nvml(
            base / "bare",
            omit=[
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                "nvmlDeviceGetTotalEccErrors",
                "nvmlSystemGetCudaDriverVersion",
                "nvmlEventSetCreate",
                "nvmlDeviceGetTotalEnergyConsumption",
            ],
        ),
    }


def test_older_driver_falls_back_to_the_throttle_reasons_call(
    harness: ModuleType, old_driver_libs: dict[str, Path], nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml(gpus=[harness.hot_gpu()]).write(nvml_config)
    poller = start_poller(old_driver_libs["no_event_reasons"], nvml_config)
    assert poller.value(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, reason="hw_thermal_slowdown") == 1
    assert poller.value(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, reason="gpu_idle") == 0


def test_functions_missing_from_the_driver_omit_their_fields_only(
    harness: ModuleType, old_driver_libs: dict[str, Path], nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml(gpus=[harness.hot_gpu()]).write(nvml_config)
    poller = start_poller(old_driver_libs["bare"], nvml_config)
    assert poller.value(UP) == 1
    assert poller.values(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name) == []
    assert poller.values(catalog.GPU_ECC_ERRORS_TOTAL.name) == []
    assert poller.values(ENERGY) == []
    assert f"# TYPE {ENERGY} counter" in poller.scrape()  # the family, with no GPU that reports it
    assert poller.value(TEMP) == 90
    assert poller.value(catalog.GPU_SM_CLOCK_HERTZ.name) == 1_980_000_000
    info = [labels for name, labels, _ in poller.samples() if name == catalog.GPU_DRIVER_INFO.name]
    assert info == [
        {"node": poller.node, "driver_version": "550.54.15", "nvml_version": "12.550.54.15", "cuda_driver_version": ""}
    ]
    assert "NVML events unavailable" in poller.log()
    assert poller.value(FAILURES, reason="query") == 0


def test_every_xid_is_counted_by_code_and_repeats_are_visible(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml(gpus=[harness.FakeGpu(), harness.FakeGpu(), harness.FakeGpu(supported_events=0)])
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, args=("--min-interval", "30"))
    # The error counter exists at 0 before the first event, so increase() sees the first XID of any
    # code; per-code children are created by their first occurrence only (XID codes are an open set).
    assert poller.value(ERRORS, gpu_id="0", error_type="xid") == 0
    assert poller.values(XIDS) == []
    assert "watching XID events on 2 GPU(s)" in poller.log()

    config.xids = [(0, 79), (0, 79), (1, 13), (0, 999)]
    config.write(nvml_config)
    # Live counters: visible although the pass is cached for 30 s.
    poller.wait_for(XIDS, 2, gpu_id="0", xid="79")
    poller.wait_for(XIDS, 1, gpu_id="0", xid="999")  # a code never seen before appears with its count
    assert poller.value(XIDS, gpu_id="1", xid="13") == 1
    assert poller.value(ERRORS, gpu_id="0", error_type="xid") == 3  # every XID, whatever its code
    assert poller.value(ERRORS, gpu_id="1", error_type="xid") == 1
    # Only the codes that occurred have series: none on GPU 2 (no XID events) or for other codes.
    assert sorted((s[1]["gpu_id"], s[1]["xid"]) for s in poller.samples() if s[0] == XIDS) == [
        ("0", "79"),
        ("0", "999"),
        ("1", "13"),
    ]

    config.xids.append((0, 79))  # the same XID again: the counter moves (dcgm-exporter's gauge would not)
    config.write(nvml_config)
    poller.wait_for(XIDS, 3, gpu_id="0", xid="79")
    assert poller.value(ERRORS, gpu_id="0", error_type="xid") == 4
    assert poller.value(FAILURES, reason="event") == 0


def test_concurrent_scrapes_share_one_nvml_pass(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    harness.FakeNvml(gpus=[harness.FakeGpu(delay_us=500_000), harness.FakeGpu()]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, env={"FAKE_NVML_TRACE": str(trace)})
    before = sum(line.startswith("util 0 ") for line in trace.read_text().splitlines())  # the start-up pass
    bodies: list[str] = []
    barrier = threading.Barrier(12)

    def scrape() -> None:
        barrier.wait()
        bodies.append(poller.scrape())

    threads = [threading.Thread(target=scrape) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(bodies) == 12
    calls = [line.split() for line in trace.read_text().splitlines()]
    gpu0_calls = [(int(enter), int(leave)) for _, gpu, enter, leave in calls if gpu == "0"]
    passes = len(gpu0_calls) - before
    # 12 scrapes at once: those that arrive while a pass runs share it (a scheduler delay on a busy
    # machine may let a few miss the first pass and share a second or third).
    assert 1 <= passes <= 3, passes
    intervals = sorted(gpu0_calls)
    assert all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(intervals)), intervals


def test_min_interval_serves_the_cached_pass(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml()
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, args=("--min-interval", "5"))
    assert poller.value(TEMP) == 40
    config.gpus[0].temperature = 77
    config.write(nvml_config)
    assert poller.value(TEMP) == 40  # the last pass is younger than 5 s: served again
    poller.wait_for(TEMP, 77, timeout=20)


def test_new_uncorrected_ecc_errors_are_counted(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    config = harness.FakeNvml(gpus=[harness.FakeGpu(ecc_uncorrected=5)])
    config.write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert poller.value(ERRORS, error_type="ecc_uncorrected") == 0  # errors before start are in ecc_errors
    config.gpus[0].ecc_uncorrected = 8
    config.write(nvml_config)
    poller.wait_for(ERRORS, 3, error_type="ecc_uncorrected")
    assert poller.value(catalog.GPU_ECC_ERRORS_TOTAL.name, ecc_type="uncorrected") == 8


def test_sigterm_stops_cleanly_and_healthz_answers(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml().write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config)
    assert harness.http_get(poller.host, poller.port, "/healthz")[:2] == (200, b"ok\n")
    assert harness.http_get(poller.host, poller.port, "/nope")[0] == 404
    status, _, content_type = harness.http_get(poller.host, poller.port, "/metrics")
    assert status == 200 and content_type == "text/plain; version=0.0.4; charset=utf-8"
    started = time.monotonic()
    assert poller.stop() == 0
    assert time.monotonic() - started < 5
    assert "SIGTERM received, stopping" in poller.log()
    assert poller.log().rstrip().endswith("stopped")
