"""What the program ships is generated once per config: the rule groups are built once, and every
rules file (whole, shard tier, global tier) is written from them, equal to what each generator
writes on its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from infra import generated_content
from observability import rules
from observability.config import ObservabilityConfig


def test_the_rule_groups_are_built_once_per_config_and_every_file_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = replace(ObservabilityConfig(), environment="generated-once", shards=2, cluster="c1", clusters=("c1",))
    built = rules.rule_groups
    calls: list[ObservabilityConfig] = []

    def counting(config: ObservabilityConfig) -> list[dict[str, Any]]:
        calls.append(config)
        return built(config)

    monkeypatch.setattr(rules, "rule_groups", counting)
    out = generated_content.generated(cfg)
    assert calls == [cfg]
    monkeypatch.undo()
    assert out.rules_yaml == rules.rules_file_yaml(cfg)
    assert dict(out.tier_yaml) == rules.tier_rules_yaml(cfg)
    assert list(out.rule_groups) == rules.rule_groups(cfg)
