"""Reading raw stack config: where it comes from (Pulumi's runtime config, or a plain dict offline)
and a `Reader` that checks one value at a time, recording a problem (key, value, what is expected)
and returning a fallback so that every problem of a stack is found in one pass."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import pulumi
from pulumi.runtime import config as runtime_config

from infra.settings.typed import PROJECT, SecretValue
from policy.manifests import as_int

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_EXPECTED = "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)"
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

SecretReader = Callable[[str], SecretValue]
T = TypeVar("T")


class ConfigSource(Protocol):
    """Raw stack config: `get` returns the config string (JSON for objects) or None."""

    stack: str

    def get(self, key: str) -> str | None: ...

    def is_secret(self, key: str) -> bool: ...

    def keys(self) -> Sequence[str]: ...


@dataclass
class DictConfigSource:
    """Config as `{key: string}` without the project prefix, plus the set of secret keys."""

    stack: str
    values: Mapping[str, str]
    secret_keys: frozenset[str] = frozenset()

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def is_secret(self, key: str) -> bool:
        return key in self.secret_keys

    def keys(self) -> Sequence[str]:
        return sorted(self.values)


def pulumi_config_source() -> ConfigSource:
    """The running Pulumi program's config (real engine or mock engine)."""
    prefix = f"{PROJECT}:"
    env = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    values = {k[len(prefix) :]: str(v) for k, v in env.items() if k.startswith(prefix)}
    secret_keys = frozenset(k for k in values if runtime_config.is_config_secret(prefix + k))
    return DictConfigSource(pulumi.get_stack(), values, secret_keys)


def pulumi_secret_reader() -> SecretReader:
    config = pulumi.Config(PROJECT)

    def read(key: str) -> SecretValue:
        return config.get_secret(key)

    return read


class Reader:
    """Collects problems while reading; each check records a message and returns a fallback."""

    def __init__(self, source: ConfigSource) -> None:
        self.source = source
        self.problems: list[str] = []
        # Top-level keys already reported (missing or misspelled): nothing under them is reported
        # again, so one mistake is one problem.
        self.reported: set[str] = set()

    def problem(self, key: str, value: object, expected: str) -> None:
        if re.split(r"[.\[]", key, maxsplit=1)[0] in self.reported:
            return
        shown = json.dumps(value) if not isinstance(value, str) else repr(value)
        if len(shown) > 200:  # a huge or repeated value: its start says enough
            shown = shown[:200] + f"… ({len(shown):,} characters)"
        self.problems.append(f"{key} = {shown}: expected {expected}")

    def model_type(self, key: str, value: Any) -> str:
        """A model family label (dqn, ppo, tft, mamba, none, ...): any DNS label is accepted, since a
        new family must not need a code change; it travels in OTEL_RESOURCE_ATTRIBUTES, a metric
        label and a Job's generateName, where ',', '=' or upper case would break them."""
        if not isinstance(value, str) or len(value) > 40 or not DNS_LABEL.match(value):
            self.problem(key, value, "a model type such as dqn, ppo, tft, mamba or none (lower-case letters, digits "
                         "and '-', at most 40 characters)")  # fmt: skip
            return "none"
        return value

    def raw(self, key: str) -> Any:
        text = self.source.get(key)
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def required(self, key: str) -> Any:
        value = self.raw(key)
        if value is None and key not in self.reported:
            self.problems.append(f"{key} is missing: set it in Pulumi.{self.source.stack}.yaml")
            self.reported.add(key)
        return value

    # --- typed accessors over a parsed value -----------------------------------------------
    def string(self, key: str, value: Any, pattern: re.Pattern[str] | None = None, expected: str = "") -> str:
        if not isinstance(value, str) or not value:
            self.problem(key, value, expected or "a non-empty string")
            return ""
        if pattern is not None and not pattern.match(value):
            self.problem(key, value, expected)
            return ""
        return value

    def dns_name(self, key: str, value: Any) -> str:
        ok = isinstance(value, str) and len(value) <= 63 and bool(DNS_LABEL.match(value))
        if not ok:
            self.problem(key, value, DNS_LABEL_EXPECTED)
            return ""
        return str(value)

    def integer(self, key: str, value: Any, low: int, high: int) -> int:
        number = as_int(value)
        if isinstance(value, str) and number is not None:
            self.problem(key, value, f"a whole number from {low} to {high} written without quotes")
            return low
        if number is None or not low <= number <= high:
            self.problem(key, value, f"a whole number from {low} to {high}")
            return low
        return number

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            self.problem(key, value, "true or false")
            return False
        return value

    def number(self, key: str, value: Any, low_exclusive: float, high: float) -> float:
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not low_exclusive < number <= high:
            self.problem(key, value, f"a number above {low_exclusive:g} and at most {high:g}")
            return high
        return number

    def url(self, key: str, value: Any, schemes: tuple[str, ...] = ("http", "https")) -> str:
        text = value if isinstance(value, str) else ""
        parts = urlsplit(text)
        port_ok = True
        try:
            _ = parts.port
        except ValueError:
            port_ok = False
        if parts.scheme not in schemes or not parts.hostname or not port_ok:
            self.problem(key, value, f"a URL with scheme {' or '.join(schemes)}, a host and an optional port")
            return ""
        if parts.password is not None:
            self.problem(key, "<redacted>", "no credentials in a URL: put them in a Pulumi secret")
            return ""
        return text

    def choice(self, key: str, value: Any, choices: Sequence[T]) -> T:
        if value not in choices:
            self.problem(key, value, "one of " + ", ".join(repr(c) for c in choices))
            return choices[0]
        return value  # type: ignore[no-any-return]

    def mapping(self, key: str, value: Any, allowed: set[str] | None = None) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(key, value, "an object (YAML mapping)")
            return {}
        if allowed is not None:
            for extra in sorted(set(value) - allowed):
                self.problems.append(
                    f"{key}.{extra} is not a known setting: expected only {', '.join(sorted(allowed))}"
                )
        return value

    def label_map(self, key: str, value: Any) -> Mapping[str, str]:
        labels = self.mapping(key, value)
        out: dict[str, str] = {}
        for k, v in labels.items():
            if not _LABEL_KEY.match(str(k)) or not isinstance(v, str):
                self.problem(f"{key}.{k}", v, "a Kubernetes label key with a string value")
                continue
            out[str(k)] = v
        return dict(sorted(out.items()))

    def quantity(self, key: str, value: Any) -> str:
        if not isinstance(value, str | int) or not _QUANTITY.match(str(value)):
            self.problem(key, value, "a Kubernetes quantity such as 100m, 0.5, 64Mi or 1Gi")
            return "0"
        return str(value)
