"""Offline checks run after every render (schema validation, policies, promtool)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from infra import kube_validate

if TYPE_CHECKING:
    from infra.render import RenderResult

ALL_CHECKS: list[tuple[str, Callable[[RenderResult], list[str]]]] = [
    ("kubernetes-schema", kube_validate.check_render),
]
