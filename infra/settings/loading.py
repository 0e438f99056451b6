"""`load_settings`: the whole stack config, read and validated before any resource is registered.

It turns the stack's config (`Pulumi.<stack>.yaml`) into a `Settings` object or raises
`SettingsError` listing every problem at once, one line each, naming the key, the value and what
is expected. Credentials (Alertmanager receiver URLs, the registry password) are read only as
Pulumi secrets; a credential given in plaintext, or any URL carrying a password, is an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from infra.settings.reading import ConfigSource, Reader, SecretReader
from infra.settings.sections import CONFIG_FIELDS, SETTINGS, Parsed
from infra.settings.typed import KUBECONFIG_KEY, PROJECT, SECRET_KEYS, Settings, SettingsError
from observability.config import ObservabilityConfig

_CREDENTIAL_KEY = re.compile(r"(password|passwd|secret|token|api[_-]?key|credential|webhook)", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)

# Every top-level key of a stack's config: the keys the registered parsers read.
KNOWN_KEYS = frozenset(key for entry in SETTINGS for key in entry.keys)


def _leaves(path: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(f"{path}.{k}", v)]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(f"{path}[{i}]", v)]
    return [(path, value)]


def check_plaintext_credentials(r: Reader) -> None:
    for key in r.source.keys():  # noqa: SIM118 (a ConfigSource, not a dict)
        if r.source.is_secret(key):
            continue
        text = r.source.get(key) or ""
        if key in (*SECRET_KEYS, KUBECONFIG_KEY) or (_CREDENTIAL_KEY.search(key) and text):
            r.problems.append(
                f"{key} is a credential given in plaintext: remove it from Pulumi.{r.source.stack}.yaml and run "
                f"`pulumi config set --secret {key} <value>`"
            )
            continue
        parsed = r.raw(key)
        for path, leaf in _leaves(key, parsed):
            leaf_key = path.rsplit(".", 1)[-1].split("[", 1)[0]
            if _CREDENTIAL_KEY.search(leaf_key) and leaf not in (None, "", False):
                r.problems.append(
                    f"{path} looks like a credential given in plaintext: keep credentials only in Pulumi secrets "
                    "(`pulumi config set --secret ...`)"
                )
            elif isinstance(leaf, str) and _URL_WITH_PASSWORD.search(leaf):
                r.problems.append(
                    f"{path} holds a URL with a password (user:password@host): drop the credentials from the URL "
                    "and keep them in a Pulumi secret"
                )


# The largest config value read (a stack's biggest, the services list, is about 1 KiB as JSON).
MAX_VALUE_BYTES = 64 * 1024


class _Without:
    """A config source less the keys whose values are too big to read."""

    def __init__(self, source: ConfigSource, dropped: set[str]) -> None:
        self.stack = source.stack
        self._source = source
        self._dropped = dropped

    def get(self, key: str) -> str | None:
        return None if key in self._dropped else self._source.get(key)

    def is_secret(self, key: str) -> bool:
        return self._source.is_secret(key)

    def keys(self) -> list[str]:
        return [k for k in self._source.keys() if k not in self._dropped]  # noqa: SIM118


def load_settings(source: ConfigSource, secret: SecretReader) -> Settings:
    """Read and validate the whole stack config; raise `SettingsError` listing every problem."""
    oversized = {k for k in source.keys() if len(source.get(k) or "") > MAX_VALUE_BYTES}  # noqa: SIM118
    r = Reader(_Without(source, oversized) if oversized else source)
    for key in sorted(oversized):
        r.problems.append(
            f"{key} is {len(source.get(key) or ''):,} characters as JSON: expected at most {MAX_VALUE_BYTES:,} "
            "(is a YAML alias repeating a large value?)"
        )
        r.reported.add(key)
    given = set(r.source.keys())
    for key in sorted(given - KNOWN_KEYS):
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS - given), n=1, cutoff=0.75)
        if close:
            # One problem for one typo: the key it was meant to be is not reported missing too.
            r.problems.append(f"{key} is not a known setting: did you mean {close[0]}?")
            r.reported.add(close[0])
        else:
            r.problems.append(f"{key} is not a known setting: expected one of {', '.join(sorted(KNOWN_KEYS))}")
    check_plaintext_credentials(r)

    parsed = Parsed(secret)
    for entry in SETTINGS:
        result = entry.parse(r, parsed)
        parsed.values.update(zip(entry.into, result if len(entry.into) > 1 else (result,), strict=True))

    if r.problems:
        raise SettingsError(source.stack, r.problems)
    values = parsed.values
    observability = ObservabilityConfig(**{k: v for k, v in values.items() if k in CONFIG_FIELDS})
    return Settings(
        project=PROJECT,
        stack=source.stack,
        observability=observability,
        **{k: v for k, v in values.items() if k not in CONFIG_FIELDS},
        common_labels={
            "app.kubernetes.io/part-of": PROJECT,
            "app.kubernetes.io/managed-by": "pulumi",
            "foxhunt.io/environment": observability.environment,
        },
    )
