"""Every stack rendered at most once per process (under the mock engine): the policy tests' session
fixture reads it, and a process that has just rendered the stacks (the routine-change CI run in a
throwaway copy) hands its results over instead of rendering them again."""

from __future__ import annotations

from infra.offline import render
from infra.offline.result import RenderResult

RESULTS: dict[str, RenderResult] = {}


def rendered(stack: str) -> RenderResult:
    """`render.render_stack(stack)` of this checkout, computed on first use."""
    if stack not in RESULTS:
        RESULTS[stack] = render.render_stack(stack)
    return RESULTS[stack]
