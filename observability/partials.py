"""Partials: recording rules of the shard tier, each one shard's part of a global aggregation.

The names every part of a sharded stack agrees on (`observability.rules.pushdown` writes the
partials, the shards' remote write labels them, the global rules combine them): a partial's name,
and only a partial's, starts with `shard` before its first colon (`shard:<metric>:<operation>`,
`shard_<labels>:<metric>:<operation>`), and the shards' remote write gives each the `shard` label
with the shard's number, so the partials of two shards are two series in the global tier.
"""

from __future__ import annotations

import re

SHARD_LABEL = "shard"
PARTIAL_LEVEL = "shard"
PARTIAL_SERIES_REGEX = f"{PARTIAL_LEVEL}(_[a-zA-Z0-9_]+)?:.+"


def is_partial(name: str) -> bool:
    """Whether `name` is a partial's (`PARTIAL_SERIES_REGEX`, as Prometheus anchors it)."""
    return re.fullmatch(PARTIAL_SERIES_REGEX, name) is not None
