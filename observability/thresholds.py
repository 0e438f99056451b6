"""Alert thresholds as data: `observability/thresholds.yaml` holds one record per threshold (its
value, unit and the alert it belongs to, or the recording rule for a threshold that judges
without alerting, such as the bottleneck verdict's), and each number only there.

Every generator reads a threshold through `ObservabilityConfig.thresholds`: the alert's expression
(`Threshold.promql`), its summary and description (`Threshold.text`, `Threshold.short`), the
dashboard threshold steps that show it (`Threshold.value`, `Threshold.percent`), and the rule tests'
boundary cases. Changing a value in the YAML file changes all of them; nothing else is edited. A new threshold is
one record there, read by its alert as `cfg.thresholds.<snake_case name>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import yaml

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.yaml")

Unit = Literal["percent", "ratio", "celsius", "seconds", "per_second", "epochs_per_second", "score", "factor", "count"]

# Inclusive lower, inclusive upper bound per unit (a ratio or factor is a fraction, a percent 0-100).
_RANGES: dict[str, tuple[float, float]] = {
    "percent": (0.0, 100.0),
    "ratio": (0.0, 1.0),
    "celsius": (1.0, 150.0),
    "seconds": (0.001, 30 * 86400.0),
    "per_second": (0.0001, 1e6),
    "epochs_per_second": (0.0001, 1e6),
    "score": (0.0, 1e6),
    "factor": (0.0, 1.0),
    "count": (0.0, 1e6),  # a whole number of events (rollbacks, restarts)
}
WHOLE_UNITS = frozenset({"count"})


def _number(value: float) -> str:
    """The shortest faithful spelling of a value: 85, 0.9, 93.5, 0.099 (never 0.9900000000000001)."""
    return f"{round(value, 9):.9g}"


@dataclass(frozen=True)
class Threshold:
    """One record of thresholds.yaml: its name, value and unit, the alert it belongs to, and the
    spellings of the value for PromQL and for people."""

    name: str
    value: float
    unit: Unit
    alert: str
    # The recording rule whose expression compares with it, for a threshold no alert reads ("" otherwise).
    record: str = ""

    @property
    def promql(self) -> str:
        """The number as an alert expression compares with it."""
        return _number(self.value)

    @property
    def percent(self) -> float:
        """The value in percent (ratios and factors), as dashboards in percent units show it."""
        return round(self.value * 100, 9) if self.unit in ("ratio", "factor") else self.value

    @property
    def short(self) -> str:
        """Compact form for descriptions: 90%, 85 °C, 100ms, 5s, 24h, 0.1/s."""
        match self.unit:
            case "percent":
                return f"{_number(self.value)}%"
            case "ratio" | "factor":
                return f"{_number(self.value * 100)}%"
            case "celsius":
                return f"{_number(self.value)} °C"
            case "seconds":
                return _short_duration(self.value)
            case "per_second":
                return f"{_number(self.value)}/s"
            case _:
                return _number(self.value)

    @property
    def text(self) -> str:
        """Words for a summary: 90%, 85 °C, 100 ms, 5 seconds, 24 hours, 0.1 epochs per second."""
        match self.unit:
            case "seconds":
                return _long_duration(self.value)
            case "per_second":
                return "once per second" if self.value == 1 else f"{_number(self.value)} times per second"
            case "count":
                return "once" if self.value == 1 else f"{_number(self.value)} times"
            case "epochs_per_second":
                return f"{_number(self.value)} epochs per second"
            case _:
                return self.short


def _short_duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and not (unit == "m" and seconds < 120):
            return f"{_number(seconds / size)}{unit}"
    return f"{_number(seconds * 1000)}ms"


def _long_duration(seconds: float) -> str:
    for unit, size in (("hours", 3600), ("minutes", 60), ("seconds", 1)):
        if seconds >= size and not (unit == "minutes" and seconds < 120):
            amount = seconds / size
            return f"{_number(amount)} {unit[:-1] if amount == 1 else unit}"
    return f"{_number(seconds * 1000)} ms"


def yaml_key(field_name: str) -> str:
    """The record's name in thresholds.yaml for an attribute: gpu_memory_high_ratio -> gpuMemoryHighRatio."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def attribute_name(key: str) -> str:
    """The attribute code reads for a record of thresholds.yaml: gpuMemoryHighRatio -> gpu_memory_high_ratio."""
    return re.sub(r"(?=[A-Z])", "_", key).lower()


class Thresholds:
    """Every record of thresholds.yaml, read by attribute: `th.gpu_memory_high_ratio` is the record
    `gpuMemoryHighRatio`. A name with no record fails at once, naming the records there are."""

    __slots__ = ("_records",)
    _records: dict[str, Threshold]

    def __init__(self, records: Iterable[Threshold]) -> None:
        object.__setattr__(self, "_records", {attribute_name(r.name): r for r in records})

    def __getattr__(self, name: str) -> Threshold:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._records[name]
        except KeyError:
            known = ", ".join(sorted(self._records))
            raise AttributeError(
                f"no threshold {name} ({yaml_key(name)} in {THRESHOLDS_FILE.name}): expected one of {known}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Thresholds are immutable: build new ones with parse_thresholds or scaled")

    def __iter__(self) -> Iterator[Threshold]:
        return iter(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thresholds) and self._records == other._records

    def __hash__(self) -> int:
        return hash(tuple(self._records.values()))

    def __repr__(self) -> str:
        return f"Thresholds({', '.join(f'{r.name}={r.value:g}' for r in self)})"

    def __reduce__(self) -> tuple[type[Thresholds], tuple[tuple[Threshold, ...]]]:
        return (Thresholds, (tuple(self),))

    def scaled(self, factor: float) -> Thresholds:
        """Every threshold times `factor` (what-if tests); a value that leaves its unit's range is an error."""
        return parse_thresholds(
            {r.name: {**_record_document(r), "value": _scaled(r, factor)} for r in self},
            f"thresholds x {factor:g}",
        )


def _scaled(record: Threshold, factor: float) -> float:
    """`record`'s value times `factor`; a count moves to the next whole number in that direction."""
    value = round(record.value * factor, 6)
    if record.unit not in WHOLE_UNITS or (value.is_integer() and value != record.value) or factor == 1:
        return value
    return float(math.floor(value) if factor < 1 else math.ceil(value))


class ThresholdsError(ValueError):
    """thresholds.yaml is malformed: every problem, one per line, naming the key and the value."""


_RECORD_KEYS = ("value", "unit", "alert", "record")
_RECORDING_RULE = re.compile(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+")


def _record_document(record: Threshold) -> dict[str, Any]:
    owner = {"record": record.record} if record.record else {"alert": record.alert}
    return {"value": record.value, "unit": record.unit, **owner}


def _parse_record(key: str, raw: Any, source: str, problems: list[str]) -> Threshold | None:
    shape = "expected {value: <number>, unit: <unit>, alert: <alert name>}"
    if not isinstance(raw, dict):
        problems.append(f"{source}: {key} = {raw!r}: {shape}")
        return None
    for extra in sorted(set(map(str, raw)) - set(_RECORD_KEYS)):
        problems.append(f"{source}: {key}.{extra} is not a field of a threshold: {shape}")
    unit, alert, value = str(raw.get("unit")), raw.get("alert"), raw.get("value")
    record = raw.get("record")
    ok = True
    if unit not in _RANGES:
        problems.append(f"{source}: {key}.unit = {raw.get('unit')!r}: expected one of {', '.join(_RANGES)}")
        ok = False
    if record is not None:
        if "alert" in raw:
            problems.append(f"{source}: {key} names both an alert and a record: expected the one rule that reads it")
            ok = False
        elif not isinstance(record, str) or not _RECORDING_RULE.fullmatch(record):
            problems.append(
                f"{source}: {key}.record = {record!r}: expected the level:metric:operation name of the recording "
                "rule that compares with it"
            )
            ok = False
        alert = ""
    elif not isinstance(alert, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", alert):
        problems.append(f"{source}: {key}.alert = {alert!r}: expected the name of the alert that compares with it")
        ok = False
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond any float: out of every unit's range
        number = math.nan
    if ok:
        low, high = _RANGES[unit]
        if value is None:
            problems.append(f"{source}: {key}.value is missing: expected a number from {low:g} to {high:g} ({unit})")
            ok = False
        elif not low < number <= high:
            expected = f"expected a number above {low:g} and at most {high:g} ({unit})"
            problems.append(f"{source}: {key} = {value!r}: {expected}")
            ok = False
        elif unit in WHOLE_UNITS and not number.is_integer():
            problems.append(f"{source}: {key} = {value!r}: expected a whole number ({unit})")
            ok = False
    return Threshold(key, number, cast(Unit, unit), str(alert), str(record or "")) if ok else None


def parse_thresholds(document: Any, source: str = THRESHOLDS_FILE.name) -> Thresholds:
    """The records of a thresholds document (name -> {value, unit, alert}); every problem at once."""
    if not isinstance(document, dict) or not document:
        raise ThresholdsError(f"{source}: expected a mapping of threshold name to {{value, unit, alert}}")
    problems: list[str] = []
    records: list[Threshold] = []
    for key, raw in document.items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9]*([A-Z][a-z0-9]+)*", key):
            expected = "expected lowerCamelCase ending in its unit, like gpuMemoryHighRatio"
            problems.append(f"{source}: {key!r} is not a threshold name: {expected}")
            continue
        record = _parse_record(key, raw, source, problems)
        if record is not None:
            records.append(record)
    if problems:
        raise ThresholdsError("\n".join(problems))
    return Thresholds(records)


def load_thresholds(path: Path = THRESHOLDS_FILE) -> Thresholds:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ThresholdsError(f"{path.name} is not valid YAML: {exc}") from exc
    return parse_thresholds(document, path.name)


def dump_thresholds(thresholds: Thresholds) -> dict[str, dict[str, Any]]:
    """The records as a thresholds document (what `parse_thresholds` reads back)."""
    return {r.name: _record_document(r) for r in thresholds}


DEFAULT_THRESHOLDS = load_thresholds()
