"""The replicas of an unsharded pair watch each other: PrometheusReplicaDown from their peers' `up`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.components.alert_rules import RULE_FILES
from infra.settings import read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.prometheus_config import PROMETHEUS_REPLICAS_JOB, server_configs
from observability.rules import health
from tests.rules.ha_cases import PAIR_CFG, pair_cases
from tests.rules.promtool_harness import Suite, run_promtool_tests


def _alerts(cfg: ObservabilityConfig) -> dict[str, str]:
    return {rule.name: rule.expr for rule in health.replica_alerts(cfg)}


def test_only_an_unsharded_replicated_stack_reads_the_peers_up() -> None:
    pair = _alerts(PAIR_CFG)
    assert (
        list(pair) == ["PrometheusReplicaDown"] and f'job="{PROMETHEUS_REPLICAS_JOB}"' in pair["PrometheusReplicaDown"]
    )
    for cfg in (ObservabilityConfig(), ObservabilityConfig(shards=2, prometheus_replicas=2)):
        assert health.REPLICA_HEARTBEAT in _alerts(cfg)["PrometheusReplicaDown"]
    assert health.BOTH_DOWN in health.pair_replica_alert(PAIR_CFG).rationale


def test_stagings_replica_configs_scrape_every_replica_of_the_pair() -> None:
    cfg = validate_stack(read_stack_config("staging")).observability_config()
    peers = [f"prometheus-k8s-{i}.prometheus-operated.monitoring-staging.svc:9090" for i in (0, 1)]
    assert cfg.prometheus_peers == tuple(peers)
    configs = {n: yaml.safe_load(t) for n, t in server_configs(cfg, ["training"], "", RULE_FILES).items()}
    assert sorted(configs) == ["prometheus-replica-0.yml", "prometheus-replica-1.yml"]
    for name, config in configs.items():
        jobs: dict[str, Any] = {job["job_name"]: job for job in config["scrape_configs"]}
        assert jobs[PROMETHEUS_REPLICAS_JOB]["static_configs"] == [{"targets": peers}], name
    dev = validate_stack(read_stack_config("dev")).observability_config()
    assert dev.prometheus_peers == ()
    (single,) = server_configs(dev, ["training"], "", RULE_FILES).values()
    assert PROMETHEUS_REPLICAS_JOB not in single


@pytest.mark.slow
def test_promtool_pair_cases(tmp_path: Path) -> None:
    suite = Suite("alerts-pair", PAIR_CFG, list(pair_cases()))
    result = run_promtool_tests([suite.write(tmp_path)], cwd=tmp_path)
    assert result.returncode == 0, result.output[-20000:]
