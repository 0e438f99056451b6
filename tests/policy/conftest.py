"""Fixtures of the policy tests: every stack rendered once per session under the mock engine."""

from __future__ import annotations

import pytest

from infra import render
from infra.policy_context import STACKS


@pytest.fixture(scope="session")
def rendered_stacks() -> dict[str, render.RenderResult]:
    return {stack: render.render_stack(stack) for stack in STACKS}
