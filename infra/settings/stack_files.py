"""Stack files: `Pulumi.<stack>.yaml` read the way the Pulumi CLI hands config to a program, for
the offline render and the tests (no CLI, no decryption)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra import REPO_ROOT
from infra.settings.loading import load_settings
from infra.settings.reading import DictConfigSource
from infra.settings.typed import PROJECT, SECRET_KEYS, KubernetesTarget, Settings, SettingsError
from infra.stacks import available_stacks as available_stacks


class StackFileError(ValueError):
    pass


# A stack file is a few KiB; these bound what a mistaken (or hostile) one can make the loader do.
MAX_STACK_FILE_BYTES = 1024 * 1024
MAX_EXPANDED_VALUES = 100_000  # scalars, lists and mappings after YAML aliases are expanded


def expanded_size(value: Any, limit: int) -> int:
    """How many values `value` holds once its aliases (shared objects) are expanded, counting up
    to just past `limit` (a YAML "billion laughs" document is small but expands exponentially)."""
    count = 0
    stack = [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def stack_file(stack: str, root: Path = REPO_ROOT) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def placeholder_secret(stack: str, key: str) -> str:
    """What a secret holds in an offline render: it cannot be decrypted, and must not be real."""
    if key.endswith("Url"):
        return f"https://alerts.invalid/{stack}/{key}"
    return f"offline-placeholder-{key}"


@dataclass(frozen=True)
class StackConfig:
    stack: str
    values: Mapping[str, str]  # key without project prefix -> config string (JSON for objects)
    secret_keys: frozenset[str]
    default_kube_context: str | None = None  # `kubernetes:context` (the default provider's), if set

    def source(self) -> DictConfigSource:
        return DictConfigSource(self.stack, self.values, self.secret_keys)

    def pulumi_config(self) -> dict[str, str]:
        return {f"{PROJECT}:{k}": v for k, v in self.values.items()}


def yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """`Pulumi.x.yaml, line 3, column 1: <what is wrong>`: the file and place, not "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else path.name
    problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
    return f"{where} is not valid YAML: {problem or exc}"


def default_provider_conflict(stack: str, target: KubernetesTarget, default_context: str | None) -> str | None:
    """`kubernetes:context` in the stack file must not name another cluster than `kubeContext`."""
    if default_context and target.context and default_context != target.context:
        return (
            f"Pulumi.{stack}.yaml sets kubernetes:context = {default_context!r} but kubeContext = {target.context!r}: "
            "the stack deploys only through its own provider (kubeContext); remove kubernetes:context or make them "
            "the same"
        )
    return None


def read_stack_config(stack: str, root: Path = REPO_ROOT, overrides: Mapping[str, Any] | None = None) -> StackConfig:
    """Read `Pulumi.<stack>.yaml` the way the Pulumi CLI hands config to a program.

    Objects and lists become JSON strings, scalars strings. `secure:` values (encrypted by
    `pulumi config set --secret`) cannot be decrypted offline: they, and secret keys the file
    does not set, get an obviously fake placeholder that is still marked secret.
    """
    path = stack_file(stack, root)
    if not path.is_file():
        raise StackFileError(
            f"unknown stack {stack!r}: no {path.name}; expected one of {', '.join(available_stacks(root))}"
        )
    size = path.stat().st_size
    if size > MAX_STACK_FILE_BYTES:
        raise StackFileError(
            f"{path.name} is {size:,} bytes: expected a stack file of at most {MAX_STACK_FILE_BYTES:,}"
        )
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise StackFileError(yaml_error(path, exc)) from exc
    except UnicodeDecodeError as exc:
        raise StackFileError(f"{path.name} is not UTF-8 text: {exc}") from exc
    if not isinstance(document, Mapping):
        raise StackFileError(f"{path.name}: expected a mapping with a `config` key, got {type(document).__name__}")
    if expanded_size(document, MAX_EXPANDED_VALUES) > MAX_EXPANDED_VALUES:
        raise StackFileError(
            f"{path.name} expands to more than {MAX_EXPANDED_VALUES:,} values: YAML aliases (*name) repeat "
            "content; write the values out or remove the aliases"
        )
    raw = document.get("config") or {}
    if not isinstance(raw, Mapping):
        raise StackFileError(f"{path.name}: `config` must be a mapping of {PROJECT}:<key> to values")
    entries: dict[str, Any] = {}
    default_kube_context = raw.get("kubernetes:context")
    for full_key, value in raw.items():
        namespace, _, key = str(full_key).partition(":")
        if namespace != PROJECT or not key:
            continue  # provider config (kubernetes:..., pulumi:...) is not the program's
        entries[key] = value
    entries.update(overrides or {})

    values: dict[str, str] = {}
    secret_keys: set[str] = set()
    for key, value in entries.items():
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            values[key] = placeholder_secret(stack, key)
            secret_keys.add(key)
        elif isinstance(value, str):
            values[key] = value
        else:
            values[key] = json.dumps(value)
    for key in SECRET_KEYS:
        if key not in values:
            values[key] = placeholder_secret(stack, key)
            secret_keys.add(key)
    return StackConfig(
        stack, values, frozenset(secret_keys), str(default_kube_context) if default_kube_context else None
    )


def validate_stack(config: StackConfig) -> Settings:
    """Settings as the program will see them (placeholders for secrets); raises SettingsError."""
    settings = load_settings(config.source(), lambda key: config.values.get(key))
    conflict = default_provider_conflict(config.stack, settings.kubernetes, config.default_kube_context)
    if conflict:
        raise SettingsError(config.stack, [conflict])
    return settings
