"""Files the render writes besides the Kubernetes objects (rules, scrape config, datasources,
dashboards, the training Job template), built by the same functions the components use."""

from __future__ import annotations

from infra.settings import Settings


def artifact_files(settings: Settings) -> dict[str, str]:
    """Relative path under rendered/<stack>/ -> file text."""
    return {}
