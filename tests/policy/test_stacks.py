"""Every policy over every stack's rendered resources and files: zero mandatory violations. And the
pack's per-stack config (policy/config/<stack>.json) is exactly what the stack settings say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infra import REPO_ROOT
from infra.policy_context import context_from_settings, rendered_objects
from infra.settings import available_stacks
from policy.engine import check_files, check_stack_file, evaluate, mandatory
from policy.pack_config import context_from_config, context_to_config
from policy.rules import ALL_POLICIES

CONFIG_DIR = REPO_ROOT / "policy" / "config"


@pytest.mark.parametrize("stack", available_stacks())
def test_stack_has_no_mandatory_violation(stack, rendered_stacks):
    result = rendered_stacks[stack]
    objects = rendered_objects(result)
    kinds = Counter(o.kind for o in objects)
    assert objects, "the render produced no Kubernetes object to check"
    violations = evaluate(objects, context_from_settings(result.settings))
    report = "\n".join(map(str, violations)) + f"\n(objects checked: {dict(kinds)})"
    assert not mandatory(violations), report


@pytest.mark.parametrize("stack", available_stacks())
def test_stack_files_have_no_mandatory_violation(stack, rendered_stacks):
    violations = check_files(rendered_stacks[stack].files)
    violations += check_stack_file(f"Pulumi.{stack}.yaml", (REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    assert not mandatory(violations), "\n".join(map(str, violations))


@pytest.mark.parametrize("stack", available_stacks())
def test_pack_config_matches_the_stack_settings(stack, rendered_stacks):
    """The CrossGuard pack reads the stack context from policy/config/<stack>.json (written by
    `make generate`); it must say what Pulumi.<stack>.yaml says."""
    ctx = context_from_settings(rendered_stacks[stack].settings)
    expected = context_to_config(ctx)
    path = CONFIG_DIR / f"{stack}.json"
    assert path.is_file(), f"{path.relative_to(REPO_ROOT)} is missing: run `make generate`"
    assert json.loads(path.read_text()) == expected, f"{path.relative_to(REPO_ROOT)} is stale: run `make generate`"
    # Each policy's entry gives back the context fields it needs.
    for policy in ALL_POLICIES:
        entry = expected.get(policy.id)
        back = context_from_config(entry, stack)
        for field in (*policy.needs, *policy.uses):
            assert getattr(back, field) == getattr(ctx, field), (policy.id, field)
