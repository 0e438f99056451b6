"""Prometheus replicas: the global tier reads one copy of what the replicas of a shard wrote.

The promtool proof is the pushdown's (`tests/rules/test_pushdown.py`) with every shard run as two
replicas: each input series comes once per replica, labelled with the replica label, the shard
tier keeps both `shard` and the replica label in every aggregation and join (two replicas of two
shards, as four servers compute them), and the global tier as rendered for a replicated stack
(deduplicated) reads the partials of all four. Every global record must equal one server's over one
copy of the fleet: with both replicas' partials present, with one replica of a shard missing (it
died), and with both replicas of a shard missing (the shard is gone: then one server over the other
shard's targets is the reference).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import promql_parser as pp
import pytest

from dashboards import build_all
from dashboards.replicas import ReplicaQueryError, with_replica_dedup
from observability.config import ObservabilityConfig
from observability.partials import SHARD_LABEL
from observability.promql.replicas import deduplicate, freshest, replica_problems
from observability.rules import ReplicaError, Tier, tier_rule_groups
from tests.rules.test_pushdown import _input_series, _proof_file, per_shard

CFG = ObservabilityConfig(shards=2, prometheus_replicas=2)
LABEL = CFG.replica_label
REPLICAS = ("replica-0", "replica-1")


def test_a_selector_reads_the_freshest_copy_and_a_range_function_the_greatest() -> None:
    out = deduplicate('sum by (job_id) (rate(x_total[5m])) / on (job_id) y{a="1"}', LABEL)
    assert str(pp.parse(out)) == str(
        pp.parse(
            f"sum by (job_id) (max without ({LABEL}) (rate(x_total[5m]))) / on (job_id) " + freshest('y{a="1"}', LABEL)
        )
    )
    # absent() reads every copy (a series is absent when no replica wrote it); timestamp() is of the samples.
    assert deduplicate("absent(z)", LABEL) == str(pp.parse("absent(z)"))
    assert str(pp.parse(deduplicate("timestamp(z)", LABEL))) == str(pp.parse(f"max without ({LABEL}) (timestamp(z))"))
    # Inside a subquery the selector is deduplicated, not the subquery.
    assert str(pp.parse(deduplicate("max_over_time(z[5m:1m])", LABEL))) == str(
        pp.parse(f"max_over_time({freshest('z', LABEL)}[5m:1m])")
    )
    # An expression naming the replica label reads the copies on purpose.
    own = f"count by (shard) (max by (shard, {LABEL}) (z))"
    assert deduplicate(own, LABEL) == own


def test_what_the_deduplication_cannot_keep_is_reported_with_how_to_write_it() -> None:
    (problem,) = replica_problems('count by (__name__) ({__name__=~"a|b"})', LABEL)
    assert "__name__" in problem and "select each metric by name" in problem
    assert replica_problems("sum(rate(a[5m]))", LABEL) == []
    groups = [{"name": "someone-elses.rules", "interval": "15s",
               "rules": [{"record": "fleet:names:count", "expr": "count by (__name__) (ml_training_job_gpu_info)"}]}]  # fmt: skip
    with pytest.raises(ReplicaError, match=r"someone-elses.rules/fleet:names:count: it matches or groups on __name__"):
        tier_rule_groups(CFG, groups)
    # One writer per series: nothing to deduplicate, nothing refused.
    assert tier_rule_groups(dataclasses.replace(CFG, prometheus_replicas=1), groups)[Tier.GLOBAL]


def test_only_a_replicated_sharded_stack_deduplicates() -> None:
    plain = tier_rule_groups(ObservabilityConfig(shards=2))[Tier.GLOBAL]
    assert f"max without ({LABEL})" not in str(plain)
    replicated = tier_rule_groups(CFG)[Tier.GLOBAL]
    assert f"max without ({LABEL})" in str(replicated)
    # The shards' rules are each replica's own: unchanged.
    assert tier_rule_groups(CFG)[Tier.SHARD] == tier_rule_groups(ObservabilityConfig(shards=2))[Tier.SHARD]
    assert build_all(ObservabilityConfig(prometheus_replicas=2)) == build_all(ObservabilityConfig())


def test_dashboards_read_one_copy_and_never_show_the_replica_label() -> None:
    dashboards = build_all(CFG)
    plain = build_all(ObservabilityConfig(shards=2))
    rewritten = 0
    for uid, dashboard in dashboards.items():
        for panel in [p for p in dashboard["panels"] for p in (p, *p.get("panels", []))]:
            for target in panel.get("targets", []):
                assert f"{{{{{LABEL}}}}}" not in str(target.get("legendFormat", ""))
                rewritten += f"max without ({LABEL})" in str(target.get("expr", ""))
        assert dashboard.keys() == plain[uid].keys()
    assert rewritten > 100, rewritten
    broken = {"uid": "x", "panels": [{"title": "p", "datasource": {"type": "prometheus", "uid": "prometheus"},
                                      "targets": [{"expr": "sum by (prometheus_replica) (up)",
                                                   "legendFormat": "{{prometheus_replica}}"}]}]}  # fmt: skip
    with pytest.raises(ReplicaQueryError, match="the legend names prometheus_replica"):
        with_replica_dedup(broken, CFG)


# --- promtool: two replicas of each shard, one, or none -------------------------------------------


def per_replica(expr: str) -> str:
    """`per_shard`, keeping the replica label as well: each replica's own results."""
    text = per_shard(expr)
    text = re.sub(rf"\b(by|on) \({SHARD_LABEL}\b", rf"\1 ({SHARD_LABEL}, {LABEL}", text)
    return pp.parse(text).prettify()


# Replica-0's copy, or a series no shard wrote (Tempo's span metrics: no replica label).
ONE_COPY = f'{LABEL}=~"{REPLICAS[0]}|"'


def _one_copy(expr: str) -> str:
    """`expr` reading replica-0's copy of every scraped series only (what one server scrapes); the
    records (a `:` in their names) are the reference's own."""

    def matcher(node: pp.Expr) -> pp.Expr | None:
        if not isinstance(node, pp.VectorSelector) or ":" in (node.name or ""):
            return None
        text = str(node)
        name = node.name or ""
        rest = text[len(name) :]
        if rest.startswith("{"):
            inner, _, after = rest[1:].partition("}")
            joined = f"{inner}, {ONE_COPY}" if inner.strip() else ONE_COPY
            return pp.parse(f"{name}{{{joined}}}{after}")
        return pp.parse(f"{name}{{{ONE_COPY}}}{rest}")

    return str(pp.transform(pp.parse(expr), post_visit=matcher))


def _replicated(missing: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
    """The fleet's series once per replica, without the replicas `missing` names per shard."""
    out = []
    for item in _input_series():
        shard = re.search(rf'{SHARD_LABEL}="(\d+)"', item["series"])
        for replica in REPLICAS:
            if shard is None:  # not scraped by a shard (Tempo's span metrics reach the global tier directly)
                if replica == REPLICAS[0]:
                    out.append(item)
                continue
            if replica in missing.get(shard.group(1), ()):
                continue
            series = item["series"][:-1] + f',{LABEL}="{replica}"' + "}"
            out.append({**item, "series": series})
    return out


SCENARIOS = {
    "both-replicas": {},
    "one-replica-of-a-shard-missing": {"0": (REPLICAS[1],)},
    "both-replicas-of-a-shard-missing": {"0": REPLICAS},
}


@pytest.mark.slow
@pytest.mark.parametrize("missing", SCENARIOS.values(), ids=SCENARIOS.keys())
@pytest.mark.slow
def test_the_replicas_partials_combine_once_into_the_single_server_value(
    tmp_path: Path, missing: dict[str, tuple[str, ...]]
) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Prometheus 2.42) is needed: run `make sysdeps`"
    test_file, checked = _proof_file(
        tmp_path,
        CFG,
        inputs=_replicated(missing),
        shard_rewrite=per_replica,
        reference_rewrite=_one_copy,
        require_answers=not any(len(gone) == len(REPLICAS) for gone in missing.values()),
    )
    assert len(checked) > 40, len(checked)
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=300)
    failures = re.findall(r"expr: \"(.*?)\", time:", proc.stdout + proc.stderr)
    assert proc.returncode == 0, (
        f"{len(failures)} checks failed:\n"
        + "\n".join(f[:600] for f in failures[:10])
        + (proc.stdout[-3000:] if not failures else "")
    )
