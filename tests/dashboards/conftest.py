"""Fixtures for the dashboard tests: every stack's config and its rendered dashboards.

Stacks come from the Pulumi stack files through the infra settings (what `make render` uses),
plus one variant config that changes everything a dashboard takes from the config.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

import dashboards
from infra.settings import available_stacks, read_stack_config, validate_stack
from observability.config import DatasourceUids, ObservabilityConfig

VARIANT = ObservabilityConfig(
    environment="variant",
    scrape_interval_seconds=30,
    evaluation_interval_seconds=30,
    training_job_service="trainer-job",
    gpu_poller_service="nvml-poller",
    platform_services=("svc-a", "svc-b", "svc-c"),
    datasource_uids=DatasourceUids(prometheus="prom-variant", loki="loki-variant", tempo="tempo-variant"),
)


@cache
def stack_configs() -> dict[str, ObservabilityConfig]:
    configs = {s: validate_stack(read_stack_config(s)).observability_config() for s in available_stacks()}
    configs["variant"] = VARIANT
    return configs


@cache
def rendered() -> dict[tuple[str, str], dict[str, Any]]:
    """(stack, uid) -> the dashboard as it is shipped: `to_json` text parsed back."""
    return {
        (stack, uid): json.loads(dashboards.to_json(dashboard))
        for stack, cfg in stack_configs().items()
        for uid, dashboard in dashboards.build_all(cfg).items()
    }


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "stack_dashboard" in metafunc.fixturenames:
        cases = sorted(rendered())
        metafunc.parametrize("stack_dashboard", cases, ids=[f"{s}-{u}" for s, u in cases])
    if "stack" in metafunc.fixturenames:
        metafunc.parametrize("stack", sorted(stack_configs()))


@pytest.fixture
def dashboard(stack_dashboard: tuple[str, str]) -> dict[str, Any]:
    """A deep copy, so a test may change it."""
    copy: dict[str, Any] = json.loads(json.dumps(rendered()[stack_dashboard]))
    return copy


@pytest.fixture
def cfg(stack: str) -> ObservabilityConfig:
    return stack_configs()[stack]


@pytest.fixture
def variant_dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard built from VARIANT (deep copies)."""
    return {uid: json.loads(json.dumps(d)) for (s, uid), d in rendered().items() if s == "variant"}


@pytest.fixture
def dev_cfg() -> ObservabilityConfig:
    return stack_configs()["dev"]


@pytest.fixture
def stack_dashboards(stack: str) -> dict[str, dict[str, Any]]:
    """uid -> dashboard of one stack (deep copies)."""
    return {uid: json.loads(json.dumps(d)) for (s, uid), d in rendered().items() if s == stack}


@pytest.fixture
def default_dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard for the dev stack (deep copies)."""
    return {uid: json.loads(json.dumps(d)) for (s, uid), d in rendered().items() if s == "dev"}
