"""Fuzzed stack files (Pulumi.<stack>.yaml) and thresholds files: values of every type in every
setting, unknown keys, unicode, huge numbers and strings, YAML anchors and alias bombs, garbage
text. Each is accepted or refused with the stack-file or settings error naming what is wrong: never
another exception, and never a hang (a bomb is refused before it is expanded). The case counts are
in the test names."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from infra import REPO_ROOT
from infra.settings import SettingsError, read_stack_config, validate_stack
from infra.settings.stack_files import StackFileError
from observability.thresholds import THRESHOLDS_FILE, ThresholdsError, parse_thresholds
from tests.fuzz.strategies import values, yaml_bomb

PREFIX = "foxhunt-observability:"
DEV = yaml.safe_load((REPO_ROOT / "Pulumi.dev.yaml").read_text())
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside the document (mapping keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


CONFIG_PATHS = paths(DEV["config"])


def check_loads_or_names_the_problem(root: Path) -> None:
    try:
        validate_stack(read_stack_config("dev", root))
    except StackFileError as err:
        assert "Pulumi.dev.yaml" in str(err)
    except SettingsError as err:
        assert err.problems and all(isinstance(p, str) and p for p in err.problems)
        assert len(str(err)) < 100_000  # a huge value is named, not printed


def write(root: Path, document: Any) -> None:
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")


@settings(FUZZ, max_examples=150)
@given(path=st.sampled_from(CONFIG_PATHS), value=values, action=st.sampled_from(["replace", "delete", "add"]))
def test_150_mutated_settings_load_or_are_refused_by_name(
    tmp_path_factory: pytest.TempPathFactory, path: tuple[Any, ...], value: Any, action: str
) -> None:
    document = copy.deepcopy(DEV)
    parent = document["config"]
    for step in path[:-1]:
        parent = parent[step]
    if action == "replace":
        parent[path[-1]] = value
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[f"unknownKey{len(parent)}"] = value
    else:
        parent.append(value)
    root = tmp_path_factory.mktemp("stack")
    write(root, document)
    check_loads_or_names_the_problem(root)


@settings(FUZZ, max_examples=30)
@given(key=st.text(min_size=1, max_size=20), value=values)
def test_30_unknown_top_level_keys_are_named(tmp_path_factory: pytest.TempPathFactory, key: str, value: Any) -> None:
    document = copy.deepcopy(DEV)
    document["config"][PREFIX + key] = value
    root = tmp_path_factory.mktemp("stack")
    write(root, document)
    check_loads_or_names_the_problem(root)


@settings(FUZZ, max_examples=20)
@given(depth=st.integers(2, 9), width=st.integers(2, 9), key=st.sampled_from(["services", "scrape", "bomb"]))
def test_20_yaml_alias_bombs_are_refused_without_expanding_them(
    tmp_path_factory: pytest.TempPathFactory, depth: int, width: int, key: str
) -> None:
    text = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    text = text.replace(f"  {PREFIX}{key}:", f"  {PREFIX}{key}-was:") + f"  {PREFIX}{key}:\n" + yaml_bomb(depth, width)
    root = tmp_path_factory.mktemp("stack")
    (root / "Pulumi.dev.yaml").write_text(text)
    if width**depth > 100_000:
        with pytest.raises(StackFileError, match="expands to more than"):
            read_stack_config("dev", root)
    else:
        check_loads_or_names_the_problem(root)


@settings(FUZZ, max_examples=100)
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_100_garbage_stack_files_are_refused_by_name(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    root = tmp_path_factory.mktemp("stack")
    (root / "Pulumi.dev.yaml").write_text(text, encoding="utf-8", errors="surrogateescape")
    check_loads_or_names_the_problem(root)


THRESHOLDS = yaml.safe_load(THRESHOLDS_FILE.read_text())


@settings(FUZZ, max_examples=200)
@example(name="gpuMemoryHighRatio", field="value", value=10**400, new_key=None)  # was an OverflowError
@given(
    name=st.sampled_from(sorted(THRESHOLDS)),
    field=st.sampled_from(["value", "unit", "alert", "extra", None]),
    value=values,
    new_key=st.one_of(st.none(), values),
)
def test_200_mutated_thresholds_parse_or_are_refused_by_name(
    name: str, field: str | None, value: Any, new_key: Any
) -> None:
    document = copy.deepcopy(THRESHOLDS)
    if field is None:
        document[name] = value
    else:
        document[name][field] = value
    if new_key is not None:
        with contextlib.suppress(TypeError):  # an unhashable key cannot come out of YAML either
            document[new_key] = value
    try:
        parse_thresholds(document)
    except ThresholdsError as err:
        assert str(err)
