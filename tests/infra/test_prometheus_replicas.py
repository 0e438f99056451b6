"""What a stack with Prometheus replicas and an Alertmanager cluster renders for each server."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.components.alert_rules import RULE_FILES
from observability.config import ObservabilityConfig
from observability.prometheus_config import alertmanager_cluster, operator_specs, server_configs

PEERS = ("am-0.am:9093", "am-1.am:9093", "am-2.am:9093")
CFG = ObservabilityConfig(
    shards=2, prometheus_replicas=2, cluster="c", alertmanager_peers=PEERS, alertmanager_replicas=3
)
WRITE = "http://global:9090/api/v1/write"


def _configs(cfg: ObservabilityConfig) -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load(text) for name, text in server_configs(cfg, ["training"], WRITE, RULE_FILES).items()}


def test_each_replica_has_its_own_config_with_its_own_replica_label_and_alerts_drop_it() -> None:
    configs = _configs(CFG)
    assert sorted(configs) == [
        "prometheus-global.yml",
        "prometheus-shard-0-replica-0.yml",
        "prometheus-shard-0-replica-1.yml",
        "prometheus-shard-1-replica-0.yml",
        "prometheus-shard-1-replica-1.yml",
    ]
    for shard in (0, 1):
        pair = [configs[f"prometheus-shard-{shard}-replica-{r}.yml"] for r in (0, 1)]
        labels = [c["global"]["external_labels"] for c in pair]
        assert labels == [
            {"cluster": "c", "prometheus_replica": "replica-0"},
            {"cluster": "c", "prometheus_replica": "replica-1"},
        ]
        # Otherwise the same server: the same targets, rules and remote write.
        assert (
            pair[0]["scrape_configs"] == pair[1]["scrape_configs"]
            and pair[0]["remote_write"] == pair[1]["remote_write"]
        )
    for name, config in configs.items():
        alerting = config["alerting"]
        assert alerting["alert_relabel_configs"] == [{"action": "labeldrop", "regex": "prometheus_replica"}], name
        assert alerting["alertmanagers"] == [{"static_configs": [{"targets": list(PEERS)}]}], name
    assert "prometheus_replica" not in configs["prometheus-global.yml"]["global"]["external_labels"]


@pytest.mark.slow
@pytest.mark.slow
def test_one_replica_renders_as_before_and_promtool_accepts_every_config(tmp_path: Path) -> None:
    single = _configs(ObservabilityConfig(shards=2, cluster="c"))
    assert sorted(single) == ["prometheus-global.yml", "prometheus-shard-0.yml", "prometheus-shard-1.yml"]
    assert "alerting" not in single["prometheus-shard-0.yml"]
    unsharded = _configs(ObservabilityConfig(prometheus_replicas=2, alertmanager_peers=PEERS))
    assert sorted(unsharded) == ["prometheus-replica-0.yml", "prometheus-replica-1.yml"]
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed: run `make sysdeps`"
    for rules in (RULE_FILES.whole, RULE_FILES.shard, RULE_FILES.global_tier):
        (tmp_path / rules).write_text("groups: []\n")
    for name, config in _configs(CFG).items():
        # Debian's Prometheus is built without Kubernetes discovery: the rest of each file is checked.
        config.pop("scrape_configs", None)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config))
        proc = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)


def test_the_alertmanager_peers_gossip_with_each_other_and_the_operator_gets_its_replicas() -> None:
    peers = alertmanager_cluster(CFG, "annotations")["peers"]
    assert [p["address"] for p in peers] == list(PEERS)
    assert peers[0]["args"] == ["--cluster.listen-address=0.0.0.0:9094", "--cluster.peer=am-1.am:9094",
                                "--cluster.peer=am-2.am:9094"]  # fmt: skip
    assert alertmanager_cluster(CFG, "operator") == {"alertmanager": {"replicas": 3}}
    specs = operator_specs(CFG, {"release": "x"}, WRITE)
    assert specs["prometheus-shards"]["replicas"] == 2
    assert specs["prometheus-shards"]["replicaExternalLabelName"] == "prometheus_replica"
    assert "replicas" not in specs["prometheus-global"]  # the global tier is one writer
    assert "replicas" not in operator_specs(ObservabilityConfig(), {"release": "x"}, WRITE)["prometheus"]
