"""A stack deployed before a rename updates in place: every resource it had is still there, under
its own URN or as an alias of the resource that replaced its name.

Without the alias, `pulumi up` would create the renamed resource and then delete the old one; both
are the same Kubernetes object (same metadata.name), so the update would end with it deleted (a
ConfigMap of rules or dashboards gone, a service's scrape annotations removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.components import common, grafana
from infra.offline import render
from infra.offline.result import RenderResult

BEFORE = Path(__file__).parent / "data" / "resources-before-rename.txt"


def _previous(stack: str) -> list[str]:
    lines = [line.split(" ", 1) for line in BEFORE.read_text().splitlines() if line and not line.startswith("#")]
    return [urn for s, urn in lines if s == stack]


def _known_as(result: RenderResult) -> set[str]:
    """Every URN a resource of the render answers to: its own and its aliases, without the prefix."""
    prefix = f"urn:pulumi:{result.stack}::{result.run.resources[0].urn.split('::')[1]}::"
    urns = {r.urn for r in result.run.resources} | {a for r in result.run.resources for a in r.aliases}
    return {u.removeprefix(prefix) for u in urns}


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_resource_of_the_previous_release_is_still_known(stack, rendered):
    previous = _previous(stack)
    assert len(previous) > 20, "the recorded resources of the previous release are missing"
    missing = sorted(set(previous) - _known_as(rendered[stack]))
    assert not missing, f"{stack}: `pulumi up` would delete these and create them anew: {missing}"


def test_an_alias_names_the_old_urn_of_a_renamed_child(rendered):
    by_name = {r.name: r for r in rendered["dev"].run.resources}
    patch = by_name["platform-services-api-gateway"]
    assert patch.urn.endswith(
        "ServiceScrapeAnnotations$kubernetes:apps/v1:DeploymentPatch::platform-services-api-gateway"
    )
    assert any(a.endswith("DeploymentPatch::api-gateway-observability") for a in patch.aliases), patch.aliases


def test_a_new_child_without_its_alias_is_caught(monkeypatch):
    """The check above is not vacuous: drop the alias of the dashboards and the old URNs go missing."""

    def without_alias(parent: Any, **kwargs: Any) -> Any:
        kwargs.pop("formerly", None)
        return common.child(parent, **kwargs)

    monkeypatch.setattr(grafana, "child", without_alias)
    result = render.render_stack("dev")
    missing = set(_previous("dev")) - _known_as(result)
    assert {m.rsplit("::", 1)[1] for m in missing} == {
        "dashboard-foxhunt-infra-cockpit",
        "dashboard-foxhunt-traces",
        "dashboard-foxhunt-training-cockpit",
        "dashboard-ml-training-comprehensive",
    }
