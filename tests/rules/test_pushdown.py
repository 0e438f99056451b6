"""Partial aggregation pushed down: which aggregations compose, how they are combined, and promtool
proof that the partials of two shards combine into what one server computes.

The promtool proof runs every rule of both tiers over a small fleet (6 GPU nodes, 3 training jobs,
one of them on two nodes that two shards scrape) in one `promtool test rules` file: the shard tier
once per shard (each series carries the `shard` its node's `hashmod` gives; every aggregation and
join of the shard tier also keeps `shard`, so no result mixes two shards, exactly as two servers
would compute them, and the partials carry `shard` as the shards' remote write labels them), the
global tier as rendered over those partials, and the single-server rules (`rules.yaml`, records
renamed `ref_...`) over all the series. For every aggregation the global tier combines, and for
every record of the global tier, the combined value equals the single-server value.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bench.fleet.data import FleetShape
from bench.fleet.live import NO_JOB, targets
from bench.fleet.series import job_id, node_name
from bench.fleet.sharded_topology import hashmod
from bench.fleet.values import Patterns
from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.partials import PARTIAL_SERIES_REGEX, SHARD_LABEL, is_partial
from observability.rules import Tier, rule_groups, tier_rule_groups
from observability.rules.distribution import integer_range_regex
from observability.rules.pushdown import _grid, composability_problems, push_down, rewrites
from observability.rules.render import dump_groups
from observability.rules.tiers import rule_name, split_groups
from observability.scrape_config import SHARD_KEY

CFG = ObservabilityConfig()
GPU = catalog.GPU_UTILIZATION_PERCENT.name
POWER = catalog.GPU_POWER_WATTS.name


def _group(*rules: dict[str, str], name: str = "g") -> dict[str, Any]:
    return {"name": name, "interval": "15s", "rules": list(rules)}


def _pushed(*rules: dict[str, str]) -> dict[Tier, list[dict[str, Any]]]:
    groups = [_group(*rules)]
    return push_down(split_groups(groups), groups)


def _canonical(expr: str) -> str:
    return str(pp.parse(expr))


@pytest.mark.parametrize(
    ("expr", "partial", "combined"),
    [
        (f"sum({POWER})", f"sum({POWER})", "sum(shard:p:x)"),
        (f"count by (gpu_name) ({GPU})", f"count by (gpu_name) ({GPU})", "sum by (gpu_name) (shard_gpu_name:p:x)"),
        (f"min({GPU})", f"min({GPU})", "min(shard:p:x)"),
        (
            f"max without (node, gpu_id, uuid, instance, pod) ({GPU})",
            f"max without (node, gpu_id, uuid, instance, pod) ({GPU})",
            "max without (shard) (shard_without_node_gpu_id_uuid_instance_pod:p:x)",
        ),
        (f"topk(5, {GPU})", f"topk(5, {GPU})", "topk(5, max without (shard) (shard:p:x))"),
        (
            f"bottomk by (gpu_name) (3, {GPU})",
            f"bottomk by (gpu_name) (3, {GPU})",
            "bottomk by (gpu_name) (3, max without (shard) (shard_gpu_name:p:x))",
        ),
        (f'count_values("v", {GPU})', f'count_values("v", {GPU})', "sum by (v) (shard:p:x)"),
        (f"group by (gpu_name) ({GPU})", f"group by (gpu_name) ({GPU})", "group by (gpu_name) (shard_gpu_name:p:x)"),
    ],
)
def test_each_composable_aggregation_is_recorded_per_shard_and_combined(expr: str, partial: str, combined: str) -> None:
    tiers = _pushed({"record": "p:x", "expr": expr})
    (shard_rule,) = tiers[Tier.SHARD][0]["rules"]
    (global_rule,) = tiers[Tier.GLOBAL][0]["rules"]
    assert is_partial(shard_rule["record"])
    assert _canonical(shard_rule["expr"]) == _canonical(partial)
    assert _canonical(global_rule["expr"]) == _canonical(combined.replace("p:x", shard_rule["record"].split(":", 1)[1]))


def test_an_average_is_a_sum_over_a_count_and_a_ratio_of_sums_composes_term_by_term() -> None:
    tiers = _pushed(
        {"record": "job:gpu:avg", "expr": f"avg by (gpu_name) ({GPU})"},
        {"record": "fleet:power:ratio", "expr": f"sum({POWER}) / sum({catalog.GPU_POWER_LIMIT_WATTS.name})"},
    )
    partials = {r["record"]: _canonical(r["expr"]) for r in tiers[Tier.SHARD][0]["rules"]}
    assert partials == {
        "shard_job:gpu:avg_sum": _canonical(f"sum by (gpu_name) ({GPU})"),
        "shard_job:gpu:avg_count": _canonical(f"count by (gpu_name) ({GPU})"),
        f"shard:{POWER}:sum": _canonical(f"sum({POWER})"),
        f"shard:{catalog.GPU_POWER_LIMIT_WATTS.name}:sum": _canonical(f"sum({catalog.GPU_POWER_LIMIT_WATTS.name})"),
    }
    avg, ratio = tiers[Tier.GLOBAL][0]["rules"]
    assert _canonical(avg["expr"]) == _canonical(
        "(sum by (gpu_name) (shard_job:gpu:avg_sum) / sum by (gpu_name) (shard_job:gpu:avg_count))"
    )
    assert _canonical(ratio["expr"]) == _canonical(
        f"sum(shard:{POWER}:sum) / sum(shard:{catalog.GPU_POWER_LIMIT_WATTS.name}:sum)"
    )


def test_a_job_view_joined_on_uuid_stays_on_the_shards_and_its_job_aggregate_is_combined() -> None:
    held = f"max by (node, gpu_id, uuid) ({GPU}) * on (uuid) group_left (job_id) max by (uuid, job_id) (ml_training_job_gpu_info)"
    tiers = _pushed(
        {"record": "job_gpu:gpu:held", "expr": held},
        {"record": "job:gpu:max", "expr": "max by (job_id) (job_gpu:gpu:held)"},
    )
    assert [r["record"] for r in tiers[Tier.SHARD][0]["rules"]] == ["job_gpu:gpu:held", "shard_job:gpu:max"]
    assert _canonical(tiers[Tier.GLOBAL][0]["rules"][0]["expr"]) == _canonical("max by (job_id) (shard_job:gpu:max)")


def test_the_same_aggregation_in_two_rules_is_one_partial() -> None:
    tiers = _pushed(
        {"alert": "FleetHot", "expr": f"sum({POWER}) > 1000"},
        {"alert": "FleetCold", "expr": f"sum({POWER}) < 10"},
    )
    assert len(tiers[Tier.SHARD][0]["rules"]) == 1


def test_every_aggregation_of_the_global_rules_over_per_gpu_series_composes() -> None:
    for config in (CFG, ObservabilityConfig(shards=4, cluster="eu-1", clusters=("eu-1",))):
        assert composability_problems(tier_rule_groups(config), rule_groups(config)) == []


def test_partial_names_are_unique_and_nothing_else_is_named_like_one() -> None:
    tiers = tier_rule_groups(CFG)
    partials = [r["record"] for g in tiers[Tier.SHARD] for r in g["rules"] if is_partial(r.get("record", ""))]
    assert len(partials) == len(set(partials)) > 40
    others = [rule_name(r) for g in rule_groups(CFG) for r in g["rules"]]
    assert not [n for n in others if re.fullmatch(PARTIAL_SERIES_REGEX, n)]
    assert re.fullmatch(PARTIAL_SERIES_REGEX, "shard:x:sum") and re.fullmatch(PARTIAL_SERIES_REGEX, "shard_a_b:x:y")
    assert not re.fullmatch(PARTIAL_SERIES_REGEX, "shards:x:y")


@pytest.mark.parametrize(
    ("expr", "told"),
    [
        (f"quantile(0.9, {POWER})", "quantile() does not compose across shards; a fleet-wide quantile over"),
        (f"quantile by (gpu_name) (0.5, {GPU})", "give the metric's unit a grid in distribution.GRIDS_BY_UNIT"),
        (f"stddev({POWER})", "record sum(x), sum(x * x) and count(x)"),
        (f"{POWER} > scalar(avg({POWER}))", "aggregate the series before anything combines them across shards"),
        (f"max_over_time(sum({POWER})[10m:1m])", "an aggregation inside a subquery is not pushed down"),
        (f"limitk(3, {GPU})", "use topk or bottomk"),
    ],
)
def test_a_new_fleet_recording_that_does_not_compose_fails_and_says_how_to_write_it(expr: str, told: str) -> None:
    groups = [*rule_groups(CFG), _group({"record": "fleet:new:thing", "expr": expr}, name="someone-elses.rules")]
    problems = composability_problems(push_down(split_groups(groups), groups), groups)
    assert len(problems) == 1, problems
    assert problems[0].startswith("someone-elses.rules/fleet:new:thing reads ") and told in problems[0], problems[0]
    assert "would read the whole fleet every evaluation" in problems[0]


@given(st.integers(min_value=0, max_value=5000))
def test_the_value_histograms_bucket_regex_matches_exactly_the_lower_buckets(top: int) -> None:
    pattern = re.compile(integer_range_regex(top))
    for value in {0, 1, 9, 10, 11, 99, 100, 101, top - 1, top, top + 1, top * 10, 5001}:
        if value >= 0:
            assert bool(pattern.fullmatch(str(value))) is (value <= top), (top, value)


# --- promtool: the partials of two shards give the single-server value ---------------------------

CATALOG_SERIES = frozenset(n for m in catalog.ALL_METRICS for n in m.series_names)

INTERVAL = 15
SAMPLES = 25  # 6 minutes: every 5-minute rate window of the rules is full
SHARDS = 2
SPANNING_JOB = 1
SPANNING_NODE = next(
    n for n in range(3, 6) if hashmod(node_name(n), SHARDS) != hashmod(node_name(SPANNING_JOB), SHARDS)
)
SHAPE = FleetShape(nodes=6, gpus_per_node=2, training_jobs=3, interval_seconds=INTERVAL,
                   spanning=((SPANNING_JOB, SPANNING_NODE),))  # fmt: skip
_AGGREGATIONS = "sum|count|min|max|avg|group|topk|bottomk|count_values|quantile|stddev|stdvar"


def per_shard(expr: str) -> str:
    """`expr` with every aggregation and `on` join keeping `shard`: evaluated over the series of
    every shard at once, it gives each shard's own results, labelled with its shard."""
    text = str(pp.parse(expr))
    text = re.sub(rf"\b({_AGGREGATIONS}) by \(\)", r"\1 by (shard)", text)
    text = re.sub(rf"\b({_AGGREGATIONS}) by \(", r"\1 by (shard, ", text)
    text = re.sub(rf"\b({_AGGREGATIONS})\(", r"\1 by (shard) (", text)
    text = re.sub(r"\bon \(\)", "on (shard)", text)
    text = re.sub(r"\bon \(", "on (shard, ", text)
    return pp.parse(text).prettify()


def _renamer(names: set[str]) -> re.Pattern[str]:
    return re.compile(
        r"(?<![\w:])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w:])"
    )


def _input_series() -> list[dict[str, str]]:
    fleet = targets(CFG, SHAPE, Patterns(SAMPLES, INTERVAL, int(time.time()) - SAMPLES * INTERVAL))
    out: list[dict[str, str]] = []
    out_extra: list[dict[str, str]] = []
    for target in fleet:
        scraped = target.labels.get("job", NO_JOB) != NO_JOB
        shard = str(hashmod(target.labels[SHARD_KEY], SHARDS))
        extra = f',{SHARD_LABEL}="{shard}"' if scraped else ""
        for prefix, values in target.lines:
            out.append({"series": prefix.strip()[:-1] + extra + "}", "values": " ".join(values)})
        if scraped and target.labels.get("service") == CFG.gpu_poller_service and not out_extra:
            # An XID and a feature engineering error (series that only exist once one happened).
            gpu = next(p for p, _ in target.lines if p.startswith(catalog.GPU_UTILIZATION_PERCENT.name + "{"))
            labels = gpu.strip()[len(catalog.GPU_UTILIZATION_PERCENT.name) + 1 : -1]
            out_extra.append({"series": f'{catalog.GPU_XID_ERRORS_TOTAL.name}{{{labels},xid="79"{extra}}}',
                              "values": f"0+1x{SAMPLES - 1}"})  # fmt: skip
            out_extra.append({"series": f'{catalog.FEATURE_ENGINEERING_ERRORS_TOTAL.name}{{namespace="training",'
                              f'model_type="dqn",error_type="schema",pod="x",instance="x:1"{extra}}}',
                              "values": f"0+2x{SAMPLES - 1}"})  # fmt: skip
        if scraped:
            own = ",".join(f'{k}="{v}"' for k, v in sorted(target.labels.items()) if not k.startswith("__"))
            out.append({"series": f"{catalog.UP.name}{{{own}{extra}}}", "values": " ".join(["1"] * SAMPLES)})
    series = _input_bound(_on_unknown_model(out + out_extra, job_id(UNKNOWN_MODEL_JOB)), job_id(INPUT_BOUND_JOB))
    return _on_shared_gpu(series, job_id(SHARING_JOB))


# A second job holding one GPU of this job at once (time-sliced): the GPU is shared.
SHARING_JOB = 2


def _on_shared_gpu(series: list[dict[str, str]], job: str) -> list[dict[str, str]]:
    """`series` with one more job holding the first GPU `job` holds, from the same pod target."""
    info = catalog.TRAINING_JOB_GPU_INFO.name + "{"
    first = next(s for s in series if s["series"].startswith(info) and f'job_id="{job}"' in s["series"])
    return [*series, {**first, "series": first["series"].replace(f'job_id="{job}"', 'job_id="notebook-shared"')}]


# A job computing on GPUs whose model the peak-FLOPs table does not know (it has no MFU, and the
# model is listed), and a job waiting for data as long as it runs (input-bound: a bottleneck
# verdict with its share); the second spans both shards.
UNKNOWN_MODEL_JOB = 0
UNKNOWN_MODEL = "NVIDIA Future Accelerator 1"
INPUT_BOUND_JOB = SPANNING_JOB


def _labels(series: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', series))


def _on_unknown_model(series: list[dict[str, str]], job: str) -> list[dict[str, str]]:
    """`series` with the GPUs `job` holds (its `ml_training_job_gpu_info` UUIDs) of a model the
    peak-FLOPs table does not know."""
    info = catalog.TRAINING_JOB_GPU_INFO.name + "{"
    held = {
        _labels(s["series"])["uuid"]
        for s in series
        if s["series"].startswith(info) and f'job_id="{job}"' in s["series"]
    }
    assert held and UNKNOWN_MODEL not in CFG.peak_flops.names, (held, UNKNOWN_MODEL)
    out = []
    for s in series:
        labels = _labels(s["series"])
        if labels.get("uuid") in held and "gpu_name" in labels:
            s = {**s, "series": s["series"].replace(f'gpu_name="{labels["gpu_name"]}"', f'gpu_name="{UNKNOWN_MODEL}"')}
        out.append(s)
    return out


def _input_bound(series: list[dict[str, str]], job: str) -> list[dict[str, str]]:
    """`series` with `job`'s ranks waiting for data a second per second (on top of their other phases)."""
    phases = catalog.TRAINING_PHASE_SECONDS_TOTAL.name + "{"
    out, changed = [], 0
    for s in series:
        labels = _labels(s["series"])
        if s["series"].startswith(phases) and labels.get("job_id") == job and labels.get("phase") == "data_wait":
            first = float(s["values"].split()[0])
            s = {**s, "values": " ".join(f"{first + INTERVAL * i:g}" for i in range(SAMPLES))}
            changed += 1
        out.append(s)
    assert changed, f"{job} has no data_wait phase to lengthen"
    return out


def _proof_file(
    tmp_path: Path,
    cfg: ObservabilityConfig = CFG,
    inputs: list[dict[str, str]] | None = None,
    shard_rewrite: Callable[[str], str] | None = None,
    reference_rewrite: Callable[[str], str] = lambda expr: expr,
    require_answers: bool = True,
) -> tuple[Path, list[str]]:
    """The promtool file of the proof. `cfg`'s tiers (replicated: the global tier deduplicates),
    over `inputs` (default: the fleet, one copy), the shard tier rewritten by `shard_rewrite`
    (default: `per_shard`), the reference's expressions by `reference_rewrite`."""
    groups = rule_groups(cfg)
    tiers = tier_rule_groups(cfg)
    records = {str(r["record"]) for g in groups for r in g["rules"] if "record" in r}
    renamer = _renamer(records)
    rewrite_shard = shard_rewrite or per_shard
    series_in = _input_series() if inputs is None else inputs

    def ref(text: str) -> str:
        return renamer.sub(lambda m: f"ref_{m.group(1)}", text)

    shard_groups = [
        {**g, "name": f"shard/{g['name']}", "rules": [{**r, "expr": rewrite_shard(r["expr"])} for r in g["rules"]]}
        for g in tiers[Tier.SHARD]
    ]
    global_groups = [{**g, "name": f"global/{g['name']}"} for g in tiers[Tier.GLOBAL]]
    reference = [
        {**g, "name": f"reference/{g['name']}",
         "rules": [{"record": ref(r["record"]), "expr": ref(reference_rewrite(r["expr"]))} for r in g["rules"]
                   if "record" in r]}
        for g in groups
    ]  # fmt: skip
    rules_path = tmp_path / "rules.yaml"
    ordered = [*shard_groups, *global_groups, *[g for g in reference if g["rules"]]]
    rules_path.write_text(dump_groups(ordered))
    # (what, combined expression, single-server expression, how far they may differ: a fleet quantile
    # from the shards' value histograms lies in the bucket of the value at its rank, where the exact
    # one interpolates between two neighbouring values; in a fleet of a dozen GPUs those can be a
    # bucket apart, so two buckets)
    checks: list[tuple[str, str, str, float]] = []
    # With replicas the partials are read deduplicated: only the global records are compared.
    combined_pairs = {} if cfg.replicated else rewrites(split_groups(groups), groups)
    originals = {str(r["record"]): str(r["expr"]) for g in groups for r in g["rules"] if "record" in r}
    for name, rewritten in combined_pairs.items():
        for original, combined in rewritten.combined:
            checks.append((f"{name}: {original}", combined, ref(original), _bucket(original)))
    for group in tiers[Tier.GLOBAL]:
        for rule in group["rules"]:
            if "record" in rule:
                record = str(rule["record"])
                checks.append((f"record {record}", record, ref(record), _bucket(originals[record])))
    tests = []
    at = f"{(SAMPLES - 1) * INTERVAL}s"
    fed = {str(i["series"]).split("{", 1)[0] for i in series_in}
    for what, combined, single, bucket in checks:
        drop = f"{SHARD_LABEL}, {cfg.replica_label}"
        c, r = f"max without ({drop}) ({combined})", f"max without ({drop}) ({single})"
        differs = f"(abs({c} - {r}) > 1e-9 * abs({r}) + {bucket or 1e-9}) or ({c} unless {r}) or ({r} unless {c})"
        if cfg.replicated and re.search(r":(top|bottom)\d+", what):
            # Which of equal values a top-k picks depends on the series it is given: with replicas
            # (and a shard gone) the picks are compared as values only.
            parts = [
                f"(abs({a}({c}) - {a}({r})) > 1e-9 * abs({a}({r})) + 1e-9)" for a in ("sum", "min", "max", "count")
            ]
            differs = " or ".join(parts) + f" or (count({c}) unless count({r})) or (count({r}) unless count({c}))"
        tests.append({"expr": differs, "eval_time": at, "exp_samples": []})
        # Each check has an answer, unless it reads only series this fleet does not have (a rule
        # over metrics the synthetic fleet does not produce yet; the equality above still holds).
        read = _raw_inputs(what.split(": ", 1)[-1].removeprefix("record "), originals) & CATALOG_SERIES
        if read <= fed and require_answers:
            tests.append({"expr": f"vector(1) unless on () count({r})", "eval_time": at, "exp_samples": []})
    test_file = tmp_path / "proof.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules_path)],
                "evaluation_interval": f"{INTERVAL}s",
                # The shards first: the global tier reads the partials of the same evaluation.
                "group_eval_order": [g["name"] for g in ordered],
                "tests": [{"interval": f"{INTERVAL}s", "input_series": series_in, "promql_expr_test": tests}],
            },
            sort_keys=False,
            width=100_000,
        )
    )
    return test_file, [what for what, _, _, _ in checks]


def _raw_inputs(expr: str, originals: dict[str, str], seen: frozenset[str] = frozenset()) -> set[str]:
    """The scraped series `expr` (a record's name or an expression) reads, through the records."""
    if expr in originals:
        expr = originals[expr]
    out: set[str] = set()
    for name in set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)):
        if name in originals and name not in seen:
            out |= _raw_inputs(originals[name], originals, seen | {name})
        else:
            out.add(name)
    return out


def _bucket(expr: str) -> float:
    """The bucket width of the value grid a fleet-wide `quantile()` in `expr` is estimated on (0: none)."""
    for node in _nodes(pp.parse(expr)):
        grid = _grid(node) if isinstance(node, pp.AggregateExpr) and str(node.op) == "quantile" else None
        if grid is not None:
            return 2 * grid.width
    return 0.0


def _nodes(node: Any) -> list[Any]:
    out = [node]
    for attr in ("expr", "lhs", "rhs", "param"):
        child = getattr(node, attr, None)
        if isinstance(child, pp.Expr):
            out += _nodes(child)
    for arg in getattr(node, "args", None) or []:
        if isinstance(arg, pp.Expr):
            out += _nodes(arg)
    return out


@pytest.mark.slow
def test_the_partials_of_two_shards_combine_into_the_single_server_value(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Prometheus 2.42) is needed: run `make sysdeps`"
    test_file, checked = _proof_file(tmp_path)
    assert len(checked) > 80, len(checked)
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=300)
    failures = re.findall(r"expr: \"(.*?)\", time:", proc.stdout + proc.stderr)
    assert proc.returncode == 0, (
        f"{len(failures)} checks failed:\n"
        + "\n".join(f[:400] for f in failures[:20])
        + (proc.stdout[-3000:] if not failures else "")
    )
