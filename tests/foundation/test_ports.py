"""The ports the tests hand their servers: below the kernel's ephemeral range (where outgoing
connections and `bind(0)` take theirs), one slice per test process, never the same one twice, and
never one another program holds."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from harness import ports


def test_each_worker_has_its_own_slice_below_the_ephemeral_range():
    low = ports.ephemeral_low()
    slices = [ports.worker_slice(f"gw{index}") for index in range(ports.SLICES)]
    for one, other in itertools.pairwise(slices):
        assert one.stop <= other.start  # in order, none overlapping
    assert slices[0].start == ports.LOWEST and slices[-1].stop <= low
    assert ports.worker_slice("") == slices[-1]  # no xdist: the last slice


def test_picks_in_one_process_never_repeat_or_overlap_and_stay_in_its_slice():
    mine = ports.worker_slice()
    picked: list[int] = []
    for count in (1, 3, 1, 2) * 10:
        base = ports.free_port_range(count)
        picked += range(base, base + count)
    assert len(set(picked)) == len(picked)
    assert all(port in mine for port in picked)


def test_a_port_another_program_holds_is_skipped():
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        start = ports.worker_slice().start
        ports._next[:] = [0]  # the next pick would be the slice's first port
        held.bind(("127.0.0.1", start))
        held.listen()
        assert ports.free_port() != start
    finally:
        held.close()


def test_the_kernels_range_is_read_and_a_span_too_small_is_named(tmp_path: Path):
    table = tmp_path / "ip_local_port_range"
    table.write_text("20000\t60999\n")
    assert ports.ephemeral_low(table) == 20000
    assert ports.ephemeral_low(tmp_path / "missing") == 32768
    with pytest.raises(RuntimeError, match=r"leave 0 per test process from 10000: expected at least 64"):
        ports.worker_slice("gw0", high=10010)
