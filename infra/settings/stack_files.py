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
from infra.settings.model import PROJECT, SECRET_KEYS, Settings
from infra.settings.reading import DictConfigSource


class StackFileError(ValueError):
    pass


def available_stacks(root: Path = REPO_ROOT) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


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

    def source(self) -> DictConfigSource:
        return DictConfigSource(self.stack, self.values, self.secret_keys)

    def pulumi_config(self) -> dict[str, str]:
        return {f"{PROJECT}:{k}": v for k, v in self.values.items()}


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
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise StackFileError(f"{path.name} is not valid YAML: {exc}") from exc
    raw = document.get("config") or {}
    if not isinstance(raw, Mapping):
        raise StackFileError(f"{path.name}: `config` must be a mapping of {PROJECT}:<key> to values")
    entries: dict[str, Any] = {}
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
    return StackConfig(stack, values, frozenset(secret_keys))


def validate_stack(config: StackConfig) -> Settings:
    """Settings as the program will see them (placeholders for secrets); raises SettingsError."""
    return load_settings(config.source(), lambda key: config.values.get(key))
