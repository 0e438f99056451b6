"""The fleet benchmark's parts, small: synthesized series match the real producers, the OpenMetrics
file backfills with promtool and answers queries, recording rules are ordered, the report renders."""

from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterable

import pytest

from bench import write_section
from bench.fleet.baseline import GROUP as PREVIOUS_GROUP
from bench.fleet.baseline import previous_gpu_group
from bench.fleet.data import BLOCK_SECONDS, FleetShape, all_series, backfill, data_end, timestamps, write_openmetrics
from bench.fleet.live import (
    BASELINE_GROUP,
    FleetExporter,
    GroupEvaluations,
    baseline_group,
    collect_group_evaluations,
    gpu_alert_group_alone,
    gpu_alert_inputs,
    group_timings,
    part_costs,
    targets,
)
from bench.fleet.query_timing import (
    GroupTiming,
    PanelTiming,
    Timing,
    first_label_values,
    recording_levels,
    run_query,
    time_call,
    time_panel,
)
from bench.fleet.report import BEGIN, END, GROUPS_BEGIN, GROUPS_END, ScaleResult, render, render_rule_groups
from bench.fleet.run import PROMETHEUS_ARGS
from bench.fleet.series import (
    MODEL_TYPES,
    HistogramSpec,
    SeriesSpec,
    gpu_uuid,
    job_id,
    poller_series,
    training_job_series,
)
from bench.fleet.values import Patterns
from dashboards import build_all
from dashboards.queries import PanelQuery
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Producer
from harness.prometheus import PrometheusApi, PrometheusServer, config_yaml
from observability.config import ObservabilityConfig
from observability.rules import gpu, jobs, rule_groups
from observability.rules.render import dump_groups

from .conftest import load_harness

CFG = ObservabilityConfig()
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service"}
# Label values that identify a node or GPU, or depend on the driver: compared by name only.
IDENTITY = {"node", "uuid", "gpu_name", "driver_version", "nvml_version", "cuda_driver_version"}


def shape_of(labels: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, "*" if k in IDENTITY else v) for k, v in labels if k not in TARGET_LABELS))


@pytest.mark.slow
def test_synthesized_poller_series_are_exactly_what_the_real_poller_exports(tmp_path):
    harness = load_harness()
    lib = harness.build_fake_nvml(tmp_path / "lib")
    config = tmp_path / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(8)]).write(config)
    with harness.PollerProcess(lib, config, tmp_path, node="n1") as poller:
        real = Counter((name, shape_of(labels.items())) for name, labels, _ in poller.samples())
    synthesized = Counter((s.name, shape_of(s.labels)) for s in poller_series(CFG, 0, 8) if s.name != catalog.UP.name)
    assert synthesized == real


def test_synthesized_training_job_series_cover_every_training_metric_a_running_job_exposes():
    plain, histograms = training_job_series(CFG, 3, (gpu_uuid(3, 0), gpu_uuid(3, 1)))
    names = {s.name for s in plain} | {h.metric.name for h in histograms}
    # Reinforcement-learning and search series come from the jobs of the model types that have them.
    for index in range(len(MODEL_TYPES)):
        more, _ = training_job_series(CFG, index)
        names |= {s.name for s in more}
    held = [dict(s.labels)["uuid"] for s in plain if s.name == catalog.TRAINING_JOB_GPU_INFO.name]
    assert held == [gpu_uuid(3, 0), gpu_uuid(3, 1)]
    # Feature-engineering errors appear at the first one; the end time when the job finishes.
    not_yet = {catalog.FEATURE_ENGINEERING_ERRORS_TOTAL.name, catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS.name}
    assert names == {m.name for m in catalog.by_producer(Producer.TRAINING_JOB)} - not_yet | {catalog.UP.name}
    for spec in plain:
        labels = dict(spec.labels)
        assert labels["service"] == CFG.training_job_service
        assert set(labels) - TARGET_LABELS <= set(catalog.by_name(spec.name).labels)


def test_every_series_is_unique_and_has_a_value_pattern(tmp_path):
    shape = FleetShape(nodes=2, training_jobs=2)
    seen = set()
    for spec in all_series(CFG, shape):
        key = (spec.name if isinstance(spec, SeriesSpec) else spec.metric.name, spec.labels)
        assert key not in seen, key
        seen.add(key)
    # Writing exercises every pattern.
    write_openmetrics(tmp_path / "all.om", CFG, shape, data_end(0, shape) + BLOCK_SECONDS * 1000)


def test_the_hour_lies_inside_one_block_window_and_ends_before_now():
    shape = FleetShape(nodes=1)
    for now in (1_700_000_000, 1_700_003_599, 1_700_007_199.5):
        stamps = timestamps(shape, data_end(now, shape))
        assert len(stamps) == 240
        assert stamps[-1] < now
        assert stamps[0] // BLOCK_SECONDS == stamps[-1] // BLOCK_SECONDS
        assert {b - a for a, b in itertools.pairwise(stamps)} == {15}


def test_the_openmetrics_text_is_what_promtool_wants(tmp_path):
    shape = FleetShape(nodes=1, training_jobs=1)
    end = data_end(1_700_000_000, shape)
    stats = write_openmetrics(tmp_path / "part.om", CFG, shape, end, part=1, parts=2)
    text = (tmp_path / "part.om").read_text()
    assert text.endswith("\n# EOF\n")
    lines = text.splitlines()[:-1]
    assert len(lines) == stats.samples == stats.series * 120
    stamps = {int(line.rsplit(" ", 1)[1]) for line in lines}
    assert stamps == set(timestamps(shape, end)[120:])  # seconds, the second half of the hour
    assert all(re.fullmatch(r"[a-z_:]+\{[^}]*\} \S+ \d+", line) for line in lines[:5000])


@pytest.mark.slow
def test_backfilled_fleet_answers_queries(tmp_path):
    shape = FleetShape(nodes=3, gpus_per_node=2, training_jobs=2)
    end = data_end(1_700_000_000, shape)
    stats = backfill(tmp_path / "work", tmp_path / "data", CFG, shape, end)
    assert stats.samples == stats.series * 240
    with PrometheusServer(
        tmp_path / "prometheus", config_yaml([], []), data_dir=tmp_path / "data", extra_args=PROMETHEUS_ARGS
    ) as prometheus:
        api = prometheus.api
        assert len(api.query(catalog.GPU_UTILIZATION_PERCENT.name, end)) == 6
        up = api.query(f"count by (service) ({catalog.UP.name})", end)
        assert {s["metric"]["service"]: s["value"][1] for s in up} == {
            CFG.gpu_poller_service: "3",
            CFG.training_job_service: "2",
            CFG.training_service: "1",
        }
        points = api.query_range(catalog.GPU_TEMPERATURE_CELSIUS.name, end - 3600, end, "15s")
        assert {len(s["values"]) for s in points} == {240}
        rate = api.query(f"sum(rate({catalog.TRAINING_DATA_BATCHES_TOTAL.name}[5m]))", end)
        assert 2 * 5 < float(rate[0]["value"][1]) < 2 * 15  # two jobs at about 10 batches/s

        panel = PanelQuery(
            "uid", 1, "t", "A", "prometheus", "prometheus", catalog.GPU_TEMPERATURE_CELSIUS.name, "15s", "1h"
        )
        timed = time_panel(api, panel, end, repeat=2)
        assert (timed.instant.series, timed.range.series, timed.range.runs) == (6, 6, 2)
        assert 0 < timed.range.median_ms <= timed.range.p95_ms
        broken = time_call(lambda: run_query(api, "/api/v1/query", {"query": "sum(", "time": str(end)}), 2)
        assert broken.error.startswith("HTTP 400") and broken.runs == 0


def test_recording_rules_are_backfilled_in_dependency_order():
    levels = recording_levels(rule_groups(CFG))
    by_level = [{r["record"] for g in level for r in g["rules"]} for level in levels]
    all_recorded = {r["record"] for g in rule_groups(CFG) for r in g["rules"] if "record" in r}
    assert set().union(*by_level) == all_recorded
    for n in range(len(by_level)):
        for group in levels[n]:
            for rule in group["rules"]:
                found = re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["expr"])
                # (a rule reading its own last value, as the per-job first-seen latches do, is no dependency)
                used = {t for t in found if t in all_recorded and t != rule["record"]}
                assert used <= set().union(set(), *by_level[:n]), rule["record"]
    assert "service:traces_spanmetrics_calls_errors:ratio_rate5m" in by_level[1]


def test_recording_levels_refuse_a_cycle():
    groups = [{"name": "g", "rules": [{"record": "a:x", "expr": "b:x"}, {"record": "b:x", "expr": "a:x + 1"}]}]
    with pytest.raises(ValueError, match="cycle"):
        recording_levels(groups)


def fake_result(nodes: int, panel_ms: float, group_ms: float) -> ScaleResult:
    query = PanelQuery("uid", 1, "GPU utilisation", "A", "prometheus", "prometheus", 'x{a="b|c"}', "15s", "1h")
    panel = PanelTiming(query, query.expr, Timing(1.0, 2.0, 5), Timing(panel_ms, panel_ms * 2, nodes * 8))
    group = GroupTiming("ml_gpu.recording", 2, Timing(group_ms, group_ms, nodes), "node_gpu:x:max", group_ms / 2)
    stats = type(
        "S",
        (),
        {
            "series": nodes * 300,
            "samples": nodes * 72000,
            "bytes": nodes * 10**7,
            "generate_seconds": 1.0,
            "promtool_seconds": 2.0,
            "wall_seconds": 3.0,
        },
    )()
    return ScaleResult(FleetShape(nodes), stats, 4.0, 60.0, [panel], [group])


def test_the_report_flags_missed_goals_and_wide_panels_and_shows_growth(tmp_path):
    section = render([fake_result(100, 30.0, 5.0), fake_result(1000, 400.0, 80.0)], "make bench", "2 cores")
    assert section.startswith(BEGIN) and section.rstrip().endswith(END)
    assert "**misses goal**" in section
    assert "**8000 series**" in section
    assert "13.3x" in section  # 400 / 30
    assert 'x{a="b\\|c"}' in section  # pipes escaped inside the table
    failed = fake_result(1000, 1.0, 1.0)
    failed.panels[0] = PanelTiming(
        failed.panels[0].query, "x", Timing.failed("TimeoutError: timed out"), Timing.failed("TimeoutError: timed out")
    )
    broken = render([fake_result(100, 30.0, 5.0), failed], "make bench", "2 cores")
    assert "**timeout**" in broken and "**fails**: TimeoutError" in broken and "0 of 1 panel queries" in broken
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    write_section(section, BEGIN, END, path)
    write_section(section.replace("make bench", "make bench again"), BEGIN, END, path)
    text = path.read_text()
    assert text.count(BEGIN) == 1 and "kept" in text and "make bench again" in text


def test_histogram_specs_use_catalog_histograms():
    _, histograms = training_job_series(CFG, 0)
    assert histograms and all(isinstance(h, HistogramSpec) and h.metric.buckets for h in histograms)


@pytest.mark.slow
def test_prometheus_scrapes_the_live_fleet_and_times_every_rule_group_in_engine(tmp_path):
    shape = FleetShape(nodes=2, gpus_per_node=2, training_jobs=2)
    fleet = targets(CFG, shape, Patterns(40, 1, 1_700_000_000))
    expected: Counter[str] = Counter()
    for spec in all_series(CFG, shape):
        if isinstance(spec, SeriesSpec):
            if spec.name != catalog.UP.name:
                expected[spec.name] += 1
        else:
            expected[spec.metric.count] += 1
    groups = [*rule_groups(CFG), baseline_group(CFG)]
    with FleetExporter(fleet, 1) as exporter:
        config = config_yaml(exporter.scrape_configs(), ["rules.yml"], scrape_interval="1s", evaluation_interval="1s")
        with PrometheusServer(tmp_path / "p", config, {"rules.yml": dump_groups(groups)}) as prometheus:
            api = prometheus.api
            exporter.wait_scraped(api, timeout=30)
            time.sleep(3)
            # Every series the backfill writes, scraped with the same label sets.
            for name, count in expected.items():
                assert len(api.query(f'{{__name__="{name}"}}')) == count, name
            poller_up = api.query(f'{catalog.UP.name}{{service="{CFG.gpu_poller_service}"}}')
            assert {s["metric"]["pod"] for s in poller_up} == {"gpu-poller-0000", "gpu-poller-0001"}
            node = api.query(f'{catalog.GPU_UTILIZATION_PERCENT.name}{{gpu_id="1", node="gpu-node-0001"}}')
            assert node[0]["metric"]["instance"] == "10.0.0.2:9400"  # the target's labels, not the exporter's
            # Grafana's first choice for variables without "All".
            dashboards = build_all(CFG)
            assert first_label_values(dashboards["foxhunt-training-cockpit"], api)["node"] == "gpu-node-0000"
            jobs = first_label_values(dashboards["ml-training-comprehensive"], api)
            assert jobs["job_id"] == min(job_id(i) for i in range(2))
            names = [str(g["name"]) for g in groups]
            evaluations = collect_group_evaluations(api, names, 3, timeout=60, poll_seconds=0.5)
            timed = group_timings(api, evaluations, groups)
    assert [g.name for g in timed] == names
    for group, timing in zip(groups, timed, strict=True):
        assert not timing.total.error, (group["name"], timing.total.error)
        assert timing.rules == len(group["rules"]) and timing.total.runs >= 3
        assert 0 < timing.total.median_ms <= timing.total.p95_ms
        assert [rule for rule, _ in timing.rule_ms] == [r.get("record") or r.get("alert") for r in group["rules"]]
    baseline = timed[-1]
    assert baseline.name == BASELINE_GROUP and baseline.total.series == 2  # two counts recorded


@pytest.mark.slow
def test_the_gpu_alert_group_alone_runs_its_yardstick_floor_and_job_records_first(tmp_path):
    # The floor reads exactly the poller series the group reads, derived from its rules: a series
    # the group starts reading joins the floor.
    assert gpu_alert_inputs(CFG) == sorted(
        {
            catalog.GPU_ERRORS_TOTAL.name,
            catalog.GPU_MEMORY_USED_BYTES.name,
            catalog.GPU_MEMORY_TOTAL_BYTES.name,
            catalog.GPU_TEMPERATURE_CELSIUS.name,
        }
    )
    sequenced = gpu_alert_group_alone(CFG)
    rules = sequenced.group["rules"]
    assert [name for name, _ in sequenced.parts] == ["fleet read", "floor", jobs.GROUP, gpu.GROUP]
    assert sum(n for _, n in sequenced.parts) == len(rules)
    assert rules[0] == baseline_group(CFG)["rules"][0]
    assert [r["expr"] for r in rules[1:5]] == [f"count({name})" for name in gpu_alert_inputs(CFG)]
    by_name = {g["name"]: g["rules"] for g in rule_groups(CFG)}
    assert rules[5:] == [*by_name[jobs.GROUP], *by_name[gpu.GROUP]]
    # On a live (small) fleet every rule evaluates, and the parts add up to the rules' times.
    shape = FleetShape(nodes=2, gpus_per_node=2, training_jobs=2)
    fleet = targets(CFG, shape, Patterns(40, 1, 1_700_000_000))
    with FleetExporter(fleet, 1) as exporter:
        config = config_yaml(exporter.scrape_configs(), ["rules.yml"], scrape_interval="1s", evaluation_interval="1s")
        groups = [sequenced.group]
        with PrometheusServer(tmp_path / "p", config, {"rules.yml": dump_groups(groups)}) as prometheus:
            exporter.wait_scraped(prometheus.api, timeout=30)
            evaluations = collect_group_evaluations(prometheus.api, [sequenced.group["name"]], 3, 60, 0.5)
            (timing,) = group_timings(prometheus.api, evaluations, groups)
    assert not timing.total.error, timing.total.error
    costs = part_costs(sequenced, timing)
    assert list(costs) == [name for name, _ in sequenced.parts] and all(ms > 0 for ms in costs.values())
    assert sum(costs.values()) == pytest.approx(sum(ms for _, ms in timing.rule_ms))


def test_a_broken_rule_is_reported_not_timed():
    samples = {"g": GroupEvaluations(["r"], [0.01], [[0.01]], health_errors=("bad expr",))}
    unused = PrometheusApi(1)  # never asked: nothing is counted for a broken or missing group
    [timed] = group_timings(unused, samples, [{"name": "g", "rules": [{"record": "r", "expr": "x"}]}])
    assert timed.total.error == "bad expr"
    [missing] = group_timings(unused, {}, [{"name": "h", "rules": []}])
    assert missing.total.error == "never evaluated"


def test_instant_targets_are_judged_by_their_instant_query_and_groups_by_fleet_reads():
    result = fake_result(1000, 400.0, 80.0)
    table = result.panels[0]
    instant_query = dataclasses.replace(table.query, instant=True)
    result.panels[0] = PanelTiming(instant_query, table.expr, Timing(20.0, 30.0, 5), Timing(5000.0, 6000.0, 5))
    result.groups.append(
        GroupTiming(
            BASELINE_GROUP, 2, Timing(45.0, 50.0, 2), "b", 40.0, (("bench:gpu:count", 40.0), ("bench:node:count", 5.0))
        )
    )
    section = render(
        [fake_result(100, 30.0, 5.0), result], "make bench", "2 cores", live_warmup_seconds=150, live_evaluations=6
    )
    assert "(150 s of scraping)" in section and "p95 of 6 evaluations" in section
    assert "| instant | 5 |" in section and "**misses goal**" in section  # the group, not the panel
    assert "1 of 1 panel queries meet" in section and "0 of 1 rule groups meet" in section
    assert "| 2.0 |" in section  # 80 ms = two whole-fleet GPU reads of 40 ms
    assert "`bench:gpu:count` 40 ms" in section
    assert f"| {BASELINE_GROUP} |" not in section  # the baseline is a yardstick, not a group


@pytest.mark.slow
def test_the_previous_design_is_the_per_gpu_alert_group_without_the_job_join(tmp_path):
    group = previous_gpu_group(CFG)
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "GPUUtilizationLow",
        "GPUUtilizationCritical",
        "GPUMemoryUsageHigh",
        "GPUMemoryExhausted",
        "GPUTemperatureHigh",
        "GPUErrorsDetected",
    }
    assert not any(catalog.TRAINING_JOB_GPU_INFO.name in r["expr"] for r in group["rules"])
    assert alerts["GPUUtilizationLow"]["expr"].startswith("max by (node, gpu_id, uuid, gpu_name)")
    path = tmp_path / "previous.yml"
    path.write_text(dump_groups([group]))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_report_sets_the_previous_design_beside_the_current_one():
    result = fake_result(1000, 400.0, 80.0)
    baseline = GroupTiming(BASELINE_GROUP, 2, Timing(45.0, 50.0, 2), "b", 40.0, (("bench:gpu:count", 40.0),))
    storm = (("GPUUtilizationLow", 1000), ("GPUUtilizationCritical", 2900), ("GPUTemperatureHigh", 50))
    per_job = (("GPUUtilizationLow", 5), ("GPUUtilizationCritical", 0), ("GPUTemperatureHigh", 50))
    result.groups.extend(
        [
            baseline,
            GroupTiming("ml_gpu_resources", 7, Timing(120.0, 130.0, 55), "x", 40.0, (), per_job),
            GroupTiming("ml_training_job_gpus.recording", 27, Timing(200.0, 220.0, 900), "y", 50.0),
        ]
    )
    result.previous_groups.extend(
        [
            baseline,
            GroupTiming(PREVIOUS_GROUP, 6, Timing(2600.0, 2900.0, 3950), "z", 1000.0, (), storm),
        ]
    )
    result.alone.update({"fleet read": 40.0, "floor": 240.0, jobs.GROUP: 400.0, gpu.GROUP: 480.0})
    section = render([fake_result(100, 30.0, 5.0), result], "make bench", "2 cores")
    assert "floor 6.0 fleet reads; `ml_gpu_resources` 12.0 fleet reads, 2.0x its floor" in section
    assert "`ml_training_job_gpus.recording` 10.0 fleet reads" in section
    assert "| active alerts of `ml_gpu_resources` | 3950 | 55 |" in section
    assert "| of which GPUUtilizationLow / GPUUtilizationCritical | 3900 | 5 |" in section
    assert "2600 / 2900 ms, 65.0 fleet reads" in section and "120 / 130 ms, 3.0 fleet reads" in section
    assert (
        "| `ml_training_job_gpus.recording` evaluation (median / p95) | none | 200 / 220 ms, 5.0 fleet reads |"
        in section
    )


def test_the_rule_groups_only_report_shows_each_group_and_the_highlighted_one_per_rule(tmp_path):
    def groups(health_ms: float) -> list[GroupTiming]:
        return [
            GroupTiming("ml_storage", 3, Timing(2.0, 3.0, 6), "CheckpointSaveFailures", 1.0, (("a", 1.0),)),
            GroupTiming(
                "ml_monitoring_health", 8, Timing(health_ms, health_ms * 2, 6), "GPUPollerDown", health_ms / 2,
                (("GPUPollerDown", health_ms / 2), ("Watchdog", 0.1)),
            ),
            GroupTiming(BASELINE_GROUP, 2, Timing(45.0, 50.0, 6), "b", 40.0, (("bench:gpu:count", 40.0),)),
        ]  # fmt: skip

    small, big = FleetShape(100, 8, 50), FleetShape(1000, 8, 50)
    section = render_rule_groups(
        [(small, groups(4.0)), (big, groups(20.0))], "python -m bench.fleet --rule-groups-only", "2 cores", 150, 6,
        "ml_monitoring_health",
    )  # fmt: skip
    assert section.startswith(GROUPS_BEGIN) and section.rstrip().endswith(GROUPS_END)
    assert "| **ml_monitoring_health** | 8 | 6 | 20 / 40 | 4.0 | 0.5 | GPUPollerDown (10) |" in section  # 20 / 40
    assert "per rule (mean ms): GPUPollerDown 10, Watchdog 0.1." in section
    one_size = render_rule_groups([(big, groups(20.0))], "x", "2 cores", 150, 6, "ml_monitoring_health")
    assert "| **ml_monitoring_health** | 8 | 6 | 20 / 40 | 0.5 | GPUPollerDown (10) |" in one_size
    assert f"| {BASELINE_GROUP} |" not in section
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(f"# Benchmarks\n\n{BEGIN}\nthe full run\n{END}\n")
    write_section(section, GROUPS_BEGIN, GROUPS_END, path)
    text = path.read_text()
    assert "the full run" in text and text.count(GROUPS_BEGIN) == 1
