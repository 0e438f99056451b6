"""MIG devices through nvidia-ml-py's real ctypes path into the fake libnvidia-ml.so.1: every MIG
device a GPU of its own (UUID, profile, parent, memory, GPM per instance), a reconfiguration that
leaves no stale series and raises no hardware error, and the faults the poller already survives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from foxhunt_trainer.contract import catalog

pytestmark = pytest.mark.slow  # starts poller processes serving HTTP

StartPoller = Callable[..., Any]
NODE = "mig-node"
PARENT = "GPU-00000000-0000-0000-0000-00000000a100"
MIGS = {
    1: ("MIG-11111111-1111-1111-1111-111111111111", "1g.10gb", 9),
    2: ("MIG-22222222-2222-2222-2222-222222222222", "1g.10gb", 10),
    3: ("MIG-33333333-3333-3333-3333-333333333333", "3g.40gb", 2),
}
INFO = catalog.GPU_MIG_DEVICE_INFO.name
SHARE = catalog.GPU_MIG_SM_SHARE_RATIO.name
USED = catalog.GPU_MEMORY_USED_BYTES.name
TOTAL = catalog.GPU_MEMORY_TOTAL_BYTES.name
SM = catalog.GPU_SM_ACTIVE_PERCENT.name
ERRORS = catalog.GPU_ERRORS_TOTAL.name
FAILURES = catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name


def mig_gpu(harness: ModuleType, slots: dict[int, tuple[str, str, int]], **settings: Any) -> Any:
    """GPU 0 in MIG mode holding `slots`; each instance's memory in use is 1 GiB per GPU instance id."""
    migs = {
        slot: harness.mig(
            uuid,
            profile,
            instance,
            memory_used=instance * 2**30,
            gpm=harness.DEFAULT_GPM_RATES | {"sm_util": 10.0 * instance},
        )
        for slot, (uuid, profile, instance) in slots.items()
    }
    values: dict[str, Any] = {"uuid": PARENT, "mig_mode": True, "migs": migs, "errors": {"utilization": 3}}
    values.update(settings)
    return harness.FakeGpu(**values)


def mig_series(poller: Any) -> dict[str, dict[str, str]]:
    """uuid -> labels of each ml_gpu_mig_device_info series."""
    return {labels["uuid"]: labels for name, labels, _ in poller.samples() if name == INFO}


def test_three_mig_devices_of_two_profiles_each_a_gpu_of_its_own(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml(gpus=[mig_gpu(harness, MIGS), harness.FakeGpu()]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, node=NODE)
    poller.scrape()  # the GPM baseline
    info = mig_series(poller)
    assert set(info) == {uuid for uuid, _, _ in MIGS.values()}
    for slot, (uuid, profile, instance) in MIGS.items():
        labels = {"node": NODE, "gpu_id": f"0/{slot}", "uuid": uuid, "gpu_name": "NVIDIA H100 80GB HBM3"}
        assert info[uuid] == {**labels, "parent_gpu_id": "0", "parent_uuid": PARENT, "profile": profile}
        assert poller.value(USED, **labels) == instance * 2**30
        assert poller.value(TOTAL, **labels) == harness.MIG_PROFILES[profile][3]
        assert poller.value(SHARE, **labels) == pytest.approx(harness.MIG_PROFILES[profile][0] / 7)
        # GPM per instance (nvmlGpmMigSampleGet with its GPU instance id): its own SM activity
        assert poller.value(SM, **labels) == pytest.approx(10.0 * instance, abs=0.5)
        # device-level readings are the parent's, not the instance's
        assert poller.value(catalog.GPU_TEMPERATURE_CELSIUS.name, uuid=uuid) is None
        assert poller.value(catalog.GPU_POWER_WATTS.name, uuid=uuid) is None
        assert poller.value(ERRORS, uuid=uuid, error_type="gpu_lost") is None
    # the parent keeps its device-level fields (and answers NOT_SUPPORTED for utilization in MIG mode)
    assert poller.value(catalog.GPU_TEMPERATURE_CELSIUS.name, uuid=PARENT, gpu_id="0") == 40
    assert poller.value(catalog.GPU_POWER_WATTS.name, uuid=PARENT) == 100.0
    assert poller.value(catalog.GPU_UTILIZATION_PERCENT.name, uuid=PARENT) is None
    assert poller.value(INFO, uuid=PARENT) is None
    # MIG devices are not GPUs NVML enumerates: GPUsNotAnswering compares whole GPUs
    assert poller.value(catalog.GPU_POLLER_DEVICES.name) == 2
    assert poller.value(catalog.GPU_POLLER_DEVICES_ENUMERATED.name) == 2


def test_a_reconfiguration_leaves_no_stale_series_and_no_hardware_error(
    harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller
) -> None:
    harness.FakeNvml(gpus=[mig_gpu(harness, MIGS)]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, node=NODE)
    assert len(mig_series(poller)) == 3
    # instances 1 and 3 destroyed; a 2g.20gb created in slot 5, and a new 1g.10gb in slot 1
    after = {
        1: ("MIG-44444444-4444-4444-4444-444444444444", "1g.10gb", 11),
        2: MIGS[2],
        5: ("MIG-55555555-5555-5555-5555-555555555555", "2g.20gb", 5),
    }
    harness.FakeNvml(gpus=[mig_gpu(harness, after)]).write(nvml_config)
    poller.scrape()
    info = mig_series(poller)
    assert set(info) == {uuid for uuid, _, _ in after.values()}
    assert info[after[5][0]]["profile"] == "2g.20gb" and info[after[5][0]]["gpu_id"] == "0/5"
    text = poller.scrape()
    for gone, _, _ in (MIGS[1], MIGS[3]):
        assert gone not in text  # no series of a destroyed instance, of any family
    assert poller.value(USED, uuid=after[5][0]) == 5 * 2**30
    for error_type in ("gpu_lost", "xid", "ecc_uncorrected"):
        assert poller.value(ERRORS, uuid=PARENT, error_type=error_type) == 0
    for reason in ("gpu_lost", "query", "init"):
        assert poller.value(FAILURES, reason=reason) == 0
    # every instance destroyed (MIG mode still on): only the parent remains
    harness.FakeNvml(gpus=[mig_gpu(harness, {})]).write(nvml_config)
    poller.scrape()
    assert mig_series(poller) == {}
    assert "MIG-" not in poller.scrape()
    assert poller.value(catalog.GPU_TEMPERATURE_CELSIUS.name, uuid=PARENT) == 40


def test_mig_faults(harness: ModuleType, fake_nvml_lib: Path, nvml_config: Path, start_poller: StartPoller) -> None:
    faulty = mig_gpu(harness, MIGS)
    faulty.migs[1].errors = {"memory": 999}  # a failing field: omitted from the pass, counted as query
    faulty.migs[2].errors = {"gpm_sample": 3}  # GPM not supported on this instance: its GPM omitted
    harness.FakeNvml(gpus=[faulty]).write(nvml_config)
    poller = start_poller(fake_nvml_lib, nvml_config, node=NODE)
    poller.scrape()
    one, two, three = (uuid for uuid, _, _ in MIGS.values())
    assert poller.value(USED, uuid=one) is None and poller.value(TOTAL, uuid=one) is None
    assert (poller.value(FAILURES, reason="query") or 0) >= 1
    assert poller.value(SM, uuid=two) is None and poller.value(USED, uuid=two) == 10 * 2**30
    assert poller.value(SM, uuid=three) == pytest.approx(20.0, abs=0.5)
    assert len(mig_series(poller)) == 3

    # the parent lost: counted once under the parent, its MIG devices' series go, none counted lost
    faulty.lost = True
    harness.FakeNvml(gpus=[faulty]).write(nvml_config)
    poller.wait_for(ERRORS, 1.0, uuid=PARENT, error_type="gpu_lost")
    assert mig_series(poller) == {}
    assert "MIG-" not in poller.scrape()
    # back: the instances come back with it
    faulty.lost = False
    harness.FakeNvml(gpus=[faulty]).write(nvml_config)
    poller.wait_for(catalog.GPU_TEMPERATURE_CELSIUS.name, 40.0, timeout=20.0, uuid=PARENT)
    assert len(mig_series(poller)) == 3
    assert poller.value(ERRORS, uuid=PARENT, error_type="gpu_lost") == 1

    # NVML gone mid-session, seen first on a MIG device: down, then back with the MIG devices
    not_loaded = harness.NVML_ERROR_DRIVER_NOT_LOADED
    faulty.migs[3].errors = {"memory": not_loaded}
    harness.FakeNvml(gpus=[faulty], init_error=not_loaded).write(nvml_config)
    poller.wait_for(catalog.GPU_POLLER_NVML_UP.name, 0.0)
    assert mig_series(poller) == {}
    faulty.migs[3].errors = {}
    harness.FakeNvml(gpus=[faulty]).write(nvml_config)
    poller.wait_for(catalog.GPU_POLLER_NVML_UP.name, 1.0, timeout=20.0)
    assert len(mig_series(poller)) == 3
    assert poller.value(USED, uuid=three) == 2 * 2**30


@pytest.mark.parametrize(
    ("omit", "expect_migs", "expect_gpm"),
    [
        (("nvmlDeviceGetMigMode",), False, False),  # a driver without MIG: the whole GPU only
        (("nvmlGpmMigSampleGet",), True, False),  # no per-instance GPM: memory and identity still read
        (("nvmlDeviceGetAttributes_v2",), True, True),  # the share from the profile's compute slices
    ],
)
def test_older_drivers(
    harness: ModuleType,
    tmp_path: Path,
    nvml_config: Path,
    start_poller: StartPoller,
    omit: tuple[str, ...],
    expect_migs: bool,
    expect_gpm: bool,
) -> None:
    lib = harness.build_fake_nvml(tmp_path / "lib", omit=omit)
    harness.FakeNvml(gpus=[mig_gpu(harness, MIGS)]).write(nvml_config)
    poller = start_poller(lib, nvml_config, node=NODE)
    poller.scrape()
    info = mig_series(poller)
    assert bool(info) is expect_migs
    three = MIGS[3][0]
    if expect_migs:
        assert poller.value(SHARE, uuid=three) == pytest.approx(3 / 7)
        assert poller.value(USED, uuid=three) == 2 * 2**30
        assert (poller.value(SM, uuid=three) is not None) is expect_gpm
    assert poller.value(catalog.GPU_TEMPERATURE_CELSIUS.name, uuid=PARENT) == 40
