"""Rule groups as a Prometheus rules file (YAML), deterministic and readable.

Multi-line expressions are written as YAML literal blocks, so the rendered file shows them as
they are written here. Prometheus 2.42 (Debian) loads it: no `query_offset`, no group `labels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml


class _RulesDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_RulesDumper.add_representer(str, _represent_str)


def dump_groups(groups: Sequence[dict[str, Any]]) -> str:
    """`groups:` document for a rules file (key order as given, no sorting, no line folding)."""
    text: str = yaml.dump(
        {"groups": list(groups)},
        Dumper=_RulesDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=10_000,
    )
    return text
