"""When Prometheus evaluates a rule group within its interval, and rule paths that keep a global
group clear of the shard group whose partials it reads.

Prometheus evaluates a group at a fixed offset within its interval: the xxhash64 of the group's
labels `{file=<rules file path>, name=<group name>}` modulo the interval (`rules/group.go`,
`EvalTimestamp`). A global-tier group that combines partials reads what its shard-tier namesake
recorded at its own offset, one remote-write delivery later: if the global group's offset comes
just after the shard group's (closer than the delivery), it reads the partial of the evaluation
before, where a single server would read the newest. A real global tier lives with that (it is
one evaluation behind at most; the Mimir ruler's evaluation delay, Thanos Ruler's query offset);
the tests and benchmarks compare the sharded topology with one server exactly, so they choose a
rules directory in which every global group evaluates at least `min_gap` seconds after its shard
namesake (`rules_directory`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

_P1, _P2, _P3, _P4, _P5 = (
    11400714785074694791,
    14029467366897019727,
    1609587929392839161,
    9650029242287828579,
    2870177450012600261,
)
_MASK = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _merge(acc: int, value: int) -> int:
    return ((acc ^ _round(0, value)) * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of `data` (the hash Prometheus gives label sets)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed, (seed - _P1) & _MASK]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(acc, lane) for acc, lane in zip(v, lanes, strict=True)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for acc in v:
            h = _merge(h, acc)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, i)
        h = ((_rotl(h ^ _round(0, lane), 27) * _P1) + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        (word,) = struct.unpack_from("<I", data, i)
        h = ((_rotl(h ^ ((word * _P1) & _MASK), 23) * _P2) + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _MASK), 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def group_offset(file: str, name: str, interval_seconds: float) -> float:
    """Seconds into each interval at which Prometheus evaluates group `name` of rules file `file`."""
    key = b"file\xff" + file.encode() + b"\xffname\xff" + name.encode() + b"\xff"
    interval_ns = int(interval_seconds * 1e9)
    return (xxh64(key) % interval_ns) / 1e9


def lag(shard_file: str, global_file: str, group: str, interval_seconds: float) -> float:
    """How long after the shard tier's `group` the global tier's evaluates (0 to the interval)."""
    return (
        group_offset(global_file, group, interval_seconds) - group_offset(shard_file, group, interval_seconds)
    ) % interval_seconds


def rules_directory(
    parent: Path, files: tuple[str, str], groups: Iterable[str], interval_seconds: float, min_gap: float
) -> Path:
    """A new directory under `parent` whose rules files (`files`: the shard tier's, the global
    tier's names) give every group of `groups` a lag of at least `min_gap` seconds and at most
    the interval less `min_gap` (so the shard's next evaluation does not land first either)."""
    names = list(groups)
    for attempt in range(10_000):
        directory = parent / f"rules-{attempt}"
        shard, glob = (str(directory / f) for f in files)
        if all(min_gap <= lag(shard, glob, g, interval_seconds) <= interval_seconds - min_gap for g in names):
            directory.mkdir(parents=True, exist_ok=True)
            return directory
    raise RuntimeError(f"no rules directory under {parent} separates the phases of {names} by {min_gap}s")
