"""The NVML field table is the one source: each row is declared on its `GpuSample` attribute, and
the ctypes structure, the struct layout, each call's positions, the sample constructor and the
exported series all follow from the rows."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest

from foxhunt_trainer.contract import catalog
from poller import exported_metrics, nvml_calls
from poller.nvml_calls import FIELDS, READING_COUNT, READINGS_LAYOUT, Readings, sample_from
from poller.nvml_fields import MEMORY, U64, NvmlField, check_fields, nvml, table_of
from poller.samples import GPM_FIELDS, NVML_FIELDS, GpuSample, unidentified_gpu


def test_the_structure_and_the_layout_have_one_member_per_row_in_row_order() -> None:
    assert READING_COUNT == len(NVML_FIELDS) == len(Readings._fields_)
    assert READINGS_LAYOUT.size == ctypes.sizeof(Readings)
    members = [(str(member[0]), member[1]) for member in Readings._fields_]
    offsets = [getattr(Readings, name).offset for name, _ in members]
    assert offsets == sorted(offsets)
    for (_, ctype), field in zip(members, NVML_FIELDS, strict=True):
        assert ctype is field.ctype
    # one struct unpack reads every member where the calls wrote it
    readings = Readings()
    for i, (name, _) in enumerate(members):
        setattr(readings, name, 1000 + i)
    assert READINGS_LAYOUT.unpack_from(readings) == tuple(1000 + i for i in range(READING_COUNT))


def test_every_call_fills_its_rows_once_and_a_row_in_the_middle_renumbers_the_rest() -> None:
    assert sorted(p for call in FIELDS for p in call.positions) == list(range(READING_COUNT))
    for call in FIELDS:
        assert {NVML_FIELDS[p].call for p in call.positions} == {call.name}
    fan = NvmlField(
        "fan", ("nvmlDeviceGetFanSpeed",), (), ctypes.c_uint, "fan_percent", catalog.GPU_UTILIZATION_PERCENT
    )
    inserted = (*NVML_FIELDS[:5], fan, *NVML_FIELDS[5:])
    calls = {c.name: c.positions for c in nvml_calls.calls_of(inserted)}
    assert calls["fan"] == (5,)
    assert calls["temperature"] == (6,) and calls["energy"] == (len(inserted) - 1,)


def test_the_sample_takes_each_reading_in_the_catalogs_unit() -> None:
    readings = [10 + i for i in range(READING_COUNT)]
    by_attribute = {f.attribute: (i, f) for i, f in enumerate(NVML_FIELDS) if f.attribute}
    sample = sample_from(unidentified_gpu(3), readings, (None,) * len(GPM_FIELDS))
    for attribute, (i, field) in by_attribute.items():
        raw = readings[i]
        scale = field.scale
        expected = raw * scale.multiply if scale.multiply != 1 else raw / scale.divide if scale.divide != 1 else raw
        assert getattr(sample, attribute) == expected, attribute
    assert sample.power_watts == readings[by_attribute["power_watts"][0]] / 1000.0
    blank = sample_from(unidentified_gpu(0), [None] * READING_COUNT, (None,) * len(GPM_FIELDS))
    assert all(getattr(blank, a) is None for a in by_attribute)


def test_every_read_attribute_is_exported_once() -> None:
    exported = [a for _, a in (*exported_metrics.GPU_GAUGES, *exported_metrics.GPU_COUNTERS)]
    exported += [a for _, a in exported_metrics.ECC_TYPES]
    read = [f.attribute for f in NVML_FIELDS if f.attribute and f.metric is not catalog.GPU_CLOCK_THROTTLE_ACTIVE]
    assert sorted(set(read)) == sorted(a for a in exported if a not in GPM_FIELDS)
    assert len(exported) == len(set(exported))


def test_a_bad_row_is_refused_naming_it() -> None:
    bad = NvmlField("memory", ("nvmlDeviceGetMemoryInfo",), (), ctypes.c_double, "x", None)
    with pytest.raises(ImportError, match=rf"row {len(NVML_FIELDS)} \(memory\): C type must be.*attribute needs its "
                       r"catalog metric.*rows of call memory must sit together"):  # fmt: skip
        check_fields((*NVML_FIELDS, bad))


def test_the_sample_has_no_nvml_attribute_without_a_row() -> None:
    names = [f.name for f in dataclasses.fields(GpuSample)]
    nvml_part = names[1 : names.index(GPM_FIELDS[0])]
    assert set(nvml_part) == {f.attribute for f in NVML_FIELDS if f.attribute}


def test_the_rows_are_read_from_the_attributes_in_each_calls_buffer_order() -> None:
    # the memory call's buffer (nvmlMemory_t: total, free, used) whatever order the attributes are in
    memory = [(f.attribute, f.metric) for f in NVML_FIELDS if f.call == "memory"]
    assert memory == [
        ("memory_total_bytes", catalog.GPU_MEMORY_TOTAL_BYTES),
        (None, None),  # free: read by the call, exported by nobody
        ("memory_used_bytes", catalog.GPU_MEMORY_USED_BYTES),
    ]
    calls = [f.call for f in NVML_FIELDS]
    assert calls[:5] == ["utilization", "utilization", "memory", "memory", "memory"]

    @dataclasses.dataclass
    class Sample:
        used: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_USED_BYTES, member=(2, 3))
        energy: int | None = nvml(
            "energy", ("nvmlDeviceGetTotalEnergyConsumption",), (), U64, catalog.GPU_ENERGY_JOULES_TOTAL
        )
        total: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_TOTAL_BYTES, member=(0, 3))
        plain: int = 0  # no row

    table = table_of(Sample)
    assert [(f.call, f.attribute) for f in table] == [
        ("memory", "total"),
        ("memory", None),
        ("memory", "used"),
        ("energy", "energy"),
    ]
    assert Sample().used is None  # the row's default: a reading NVML did not give


def test_a_bad_declaration_is_refused_naming_the_attribute() -> None:
    @dataclasses.dataclass
    class Sample:
        total: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_TOTAL_BYTES, member=(0, 3))
        also_total: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_USED_BYTES, member=(0, 3))
        beyond: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_USED_BYTES, member=(3, 3))
        other_size: int | None = nvml("memory", MEMORY, (), U64, catalog.GPU_MEMORY_USED_BYTES, member=(1, 2))

    with pytest.raises(ImportError) as err:
        table_of(Sample)
    text = str(err.value)
    assert "also_total: member 0 of call memory is read twice" in text
    assert "beyond: member 3 of 3 does not fit call memory of 3 members" in text
    assert "other_size: member 1 of 2 does not fit call memory of 3 members" in text
