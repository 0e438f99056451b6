"""Fixtures of the policy tests: every stack rendered once per session under the mock engine."""

from __future__ import annotations

import pytest

from infra.offline.result import RenderResult
from infra.settings import available_stacks
from tests.rendered_once import rendered


@pytest.fixture(scope="session")
def rendered_stacks() -> dict[str, RenderResult]:
    return {stack: rendered(stack) for stack in available_stacks()}
