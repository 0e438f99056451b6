"""Every policy over every stack's rendered resources and files: zero mandatory violations. And the
pack's per-stack config (rendered/<stack>/policy/pack-config.json) is what the stack settings say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infra import REPO_ROOT
from infra.offline.policy_context import PACK_CONFIG_PATH, context_from_settings, rendered_objects
from infra.stacks import STACKS
from policy.engine import check_files, check_stack_file, evaluate, mandatory
from policy.pack_config import context_from_config, context_to_config
from policy.rules import ALL_POLICIES


@pytest.mark.parametrize("stack", STACKS)
def test_stack_has_no_mandatory_violation(stack, rendered_stacks):
    result = rendered_stacks[stack]
    objects = rendered_objects(result)
    kinds = Counter(o.kind for o in objects)
    assert objects, "the render produced no Kubernetes object to check"
    violations = evaluate(objects, context_from_settings(result.settings))
    report = "\n".join(map(str, violations)) + f"\n(objects checked: {dict(kinds)})"
    assert not mandatory(violations), report


@pytest.mark.parametrize("stack", STACKS)
def test_stack_files_have_no_mandatory_violation(stack, rendered_stacks):
    violations = check_files(rendered_stacks[stack].files)
    violations += check_stack_file(f"Pulumi.{stack}.yaml", (REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    assert not mandatory(violations), "\n".join(map(str, violations))


@pytest.mark.parametrize("stack", STACKS)
def test_pack_config_is_rendered_from_the_stack_settings(stack, rendered_stacks):
    """The CrossGuard pack reads the stack context from rendered/<stack>/policy/pack-config.json,
    which the render writes from Pulumi.<stack>.yaml: there is no second file to keep in sync."""
    result = rendered_stacks[stack]
    ctx = context_from_settings(result.settings)
    expected = context_to_config(ctx)
    assert json.loads(result.files[PACK_CONFIG_PATH]) == expected
    declared = {s.name for s in result.settings.services}
    assert declared <= set(expected["scrape-annotations"]["services"]), "every declared service reaches the pack"
    # Each policy's entry gives back the context fields it needs.
    for policy in ALL_POLICIES:
        entry = expected.get(policy.id)
        back = context_from_config(entry, stack)
        for field in (*policy.needs, *policy.uses):
            assert getattr(back, field) == getattr(ctx, field), (policy.id, field)


def test_no_committed_pack_config_can_drift():
    assert not (REPO_ROOT / "policy" / "config").exists(), "the pack config is rendered, never committed"
