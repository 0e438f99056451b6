"""The "Fleet scale" section of BENCHMARKS.md, from the measured timings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.fleet.baseline import GROUP as PREVIOUS_GROUP
from bench.fleet.baseline import PREVIOUS_REVISION
from bench.fleet.data import BackfillStats, FleetShape
from bench.fleet.live import BASELINE_GROUP
from bench.fleet.query_timing import MIN_REPEAT, ONE_RUN_SECONDS, SLOW_QUERY_SECONDS, GroupTiming, PanelTiming, Timing

BEGIN = "<!-- fleet-scale:begin (written by `python -m bench fleet`) -->"
END = "<!-- fleet-scale:end -->"
PANEL_GOAL_MS = 300.0
GROUP_GOAL_MS = 50.0
MANY_SERIES = 100  # more than this on one panel is unreadable: aggregate or topk


@dataclass(frozen=True)
class ScaleResult:
    shape: FleetShape
    backfill: BackfillStats
    rules_backfill_seconds: float
    compaction_seconds: float
    panels: list[PanelTiming]
    groups: list[GroupTiming]
    previous_groups: list[GroupTiming] = field(default_factory=list)  # the previous design, timed apart
    # The GPU alert group timed alone, in one sequence with its yardstick and floor: mean ms by part.
    alone: dict[str, float] = field(default_factory=dict)


def _cell(text: str, limit: int = 110) -> str:
    one_line = " ".join(text.split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    return one_line.replace("|", "\\|")


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _timing(t: Timing) -> str:
    if t.error:
        return "**timeout**" if "timed out" in t.error or "timeout" in t.error.lower() else "**error**"
    return f"{_ms(t.median_ms)} / {_ms(t.p95_ms)}"


def _growth(after: Timing, before: Timing | None) -> str:
    if before is None or after.error or before.error or not before.median_ms:
        return "n/a"
    return f"{after.median_ms / before.median_ms:.1f}x"


def _missed(t: Timing, goal_ms: float) -> bool:
    return bool(t.error) or t.median_ms >= goal_ms


def _panel_key(p: PanelTiming) -> tuple[str, int, str]:
    return (p.query.dashboard_uid, p.query.panel_id, p.query.ref_id)


def render(
    results: Sequence[ScaleResult],
    command: str,
    machine: str,
    repeat: int = 7,
    live_warmup_seconds: float = 150.0,
    live_evaluations: int = 6,
) -> str:
    big = max(results, key=lambda r: r.shape.nodes)
    small = min(results, key=lambda r: r.shape.nodes)
    small_panels = {_panel_key(p): p for p in small.panels}
    small_groups = {g.name: g for g in small.groups}
    lines = [
        BEGIN,
        "## Fleet scale",
        "",
        f"Command: `{command}` ({machine}). One hour of data at the stack's 15 s scrape interval, "
        f"synthesized as OpenMetrics text (timestamps in seconds, `# EOF`) for N nodes x "
        f"{big.shape.gpus_per_node} GPUs (every series the poller exports: 9 gauges, 9 throttle reasons, "
        f"2 ECC and 3 error types per GPU, XID codes only on GPUs that had one, plus per-node poller health) and "
        f"{big.shape.training_jobs} training jobs (the series `foxhunt_trainer` exposes), plus the "
        "ML service and Tempo span metrics; target labels as scrape discovery sets them. Backfilled with "
        "`promtool tsdb create-blocks-from openmetrics`, recording rules backfilled with "
        "`promtool tsdb create-blocks-from rules` (in dependency order), Prometheus 2.42 started on the "
        "data and left to compact it into one block, then every Prometheus query of every dashboard run "
        "at the end of the hour, its variables as Grafana sets them on load (All where the variable offers "
        "it, the worst case; else the first value, e.g. the training cockpit's first node): instant, and "
        "over the dashboard's 1 h range at the panel's step. Latency is the client's wall time over HTTP "
        f"(JSON included), median and nearest-rank p95 of {repeat} runs after a warm-up ({MIN_REPEAT} runs "
        f"for queries slower than {SLOW_QUERY_SECONDS:.0f} s, the warm-up run alone for those slower than "
        f"{ONE_RUN_SECONDS:.0f} s); the answer is read to its last byte but not decoded. A target is judged "
        "by the query Grafana runs for it: tables and stats by the instant query, graphs by the range query.",
        "",
        "Rule groups are timed the way they run in production: a fresh Prometheus scrapes the same fleet "
        "live (one target per poller, training job and service, every series the backfill holds), "
        "every rule group loaded at the stack's evaluation interval; after the rate windows fill "
        f"({live_warmup_seconds:.0f} s of scraping), the evaluation time Prometheus' rule manager records "
        "for each group (`/api/v1/rules`, in-engine, against the in-memory head block, all groups running "
        f"concurrently as they do in production), median and nearest-rank p95 of {live_evaluations} "
        "evaluations.",
        "",
        "| nodes | GPUs | series | samples | OpenMetrics text | generate | promtool "
        "| recording-rule backfill | compaction |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: r.shape.nodes):
        b = r.backfill
        lines.append(
            f"| {r.shape.nodes} | {r.shape.nodes * r.shape.gpus_per_node} | {b.series:,} | {b.samples:,} | "
            f"{b.bytes / 1e9:.1f} GB | {b.generate_seconds:.0f} s | {b.promtool_seconds:.0f} s | "
            f"{r.rules_backfill_seconds:.0f} s | {r.compaction_seconds:.0f} s |"
        )
    lines.append("")
    lines.append(
        "Generation and promtool run in one process per core, each on a time slice of the hour; the "
        "columns give the slowest slice."
    )
    lines += [
        "",
        f"### Dashboard panels at {big.shape.nodes} nodes (goal: median < {PANEL_GOAL_MS:.0f} ms)",
        "",
        f"Kind: the query Grafana runs (instant or range), which the verdict judges. Growth = that "
        f"query's median at {big.shape.nodes} nodes / at {small.shape.nodes} nodes. Series: what it "
        f"returns; more than {MANY_SERIES} on one panel is flagged.",
        "",
        "| dashboard | panel (ref) | query | kind | series | instant median / p95 ms | range median / p95 ms | "
        f"median at {small.shape.nodes} nodes ms | growth | verdict |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in big.panels:
        before = small_panels.get(_panel_key(p))
        judged = p.judged
        verdict = []
        if judged.error:
            verdict.append(f"**fails**: {_cell(judged.error, 60)}")
        elif judged.median_ms >= PANEL_GOAL_MS:
            verdict.append("**misses goal**")
        if judged.series > MANY_SERIES:
            verdict.append(f"**{judged.series} series**")
        before_judged = before.judged if before else None
        lines.append(
            f"| {p.query.dashboard_uid} | {_cell(p.query.panel_title, 40)} ({p.query.ref_id}) | `{_cell(p.expr)}` | "
            f"{'instant' if p.query.instant else 'range'} | {judged.series} | {_timing(p.instant)} | "
            f"{_timing(p.range)} | {_timing(before_judged).split(' / ')[0] if before_judged else 'n/a'} | "
            f"{_growth(judged, before_judged)} | {', '.join(verdict) or 'ok'} |"
        )
    baseline = _baseline(big.groups)
    lines += [
        "",
        f"### Rule groups at {big.shape.nodes} nodes (goal: < {GROUP_GOAL_MS:.0f} ms a group)",
        "",
        *_baseline_lines(big, small),
        "",
        f"| group | rules | series and alerts out | median / p95 ms | at {small.shape.nodes} nodes ms | growth "
        "| fleet reads | slowest rule (mean ms) | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for g in _real_groups(big.groups):
        before_g = small_groups.get(g.name)
        if g.total.error:
            group_verdict = f"**fails**: {_cell(g.total.error, 60)}"
        else:
            group_verdict = "**misses goal**" if g.total.median_ms >= GROUP_GOAL_MS else "ok"
        lines.append(
            f"| {g.name} | {g.rules} | {g.total.series} | {_timing(g.total)} | "
            f"{_timing(before_g.total).split(' / ')[0] if before_g else 'n/a'} | "
            f"{_growth(g.total, before_g.total if before_g else None)} | {_fleet_reads(g, baseline)} | "
            f"{g.slowest_rule} ({_ms(g.slowest_rule_ms)}) | {group_verdict} |"
        )
    lines += ["", *summary(results), *_previous_design_lines(big), END]
    return "\n".join(lines) + "\n"


UTILIZATION_ALERTS = ("GPUUtilizationLow", "GPUUtilizationCritical")
JOB_GROUP = "ml_training_job_gpus.recording"
GPU_ALERT_GROUP = "ml_gpu_resources"


def _alerts(group: GroupTiming | None, names: Sequence[str] | None = None) -> str:
    if group is None or group.total.error:
        return "n/a"
    return str(sum(n for rule, n in group.alerts_by_rule if names is None or rule in names))


def _previous_design_lines(big: ScaleResult) -> list[str]:
    """The GPU alert group before and after jobs owned their GPUs, same fleet, same run."""
    before = next((g for g in big.previous_groups if g.name == PREVIOUS_GROUP), None)
    if before is None:
        return []
    now = {g.name: g for g in big.groups}
    after, jobs_group = now.get(GPU_ALERT_GROUP), now.get(JOB_GROUP)
    base_before, base_now = _baseline(big.previous_groups), _baseline(big.groups)
    held = big.shape.training_jobs * big.shape.gpus_per_node

    def cost(group: GroupTiming | None, baseline: GroupTiming | None) -> str:
        if group is None:
            return "n/a"
        return f"{_timing(group.total)} ms, {_fleet_reads(group, baseline)} fleet reads"

    return [
        "",
        f"### Jobs own their GPUs: the previous GPU alert design, same fleet, same run ({big.shape.nodes} nodes)",
        "",
        f"{big.shape.training_jobs} training jobs hold {big.shape.gpus_per_node} GPUs each ({held:,} of "
        f"{big.shape.nodes * big.shape.gpus_per_node:,}), every tenth job keeping them idle; every other GPU is "
        "held by no job and keeps the fleet's mix (an eighth idle, most above 95%). The previous design's "
        f"`ml_gpu_resources` (as built at commit {PREVIOUS_REVISION[:12]}: utilization judged per GPU, no job join, "
        "each hardware alert reading the poller's series itself; today's records the GPU inputs once at its head) "
        "ran after the current groups on a "
        "second live Prometheus of the same fleet, alone with the baseline, so neither contends with the "
        "other. Active alerts: pending or firing at the last recorded evaluation (the live phase is "
        "shorter than the 10-minute `for` of GPUUtilizationLow, so its alerts are pending).",
        "",
        "| | previous design | now |",
        "|---|---:|---:|",
        f"| active alerts of `{GPU_ALERT_GROUP}` | {_alerts(before)} | {_alerts(after)} |",
        f"| of which GPUUtilizationLow / GPUUtilizationCritical | {_alerts(before, UTILIZATION_ALERTS)} | "
        f"{_alerts(after, UTILIZATION_ALERTS)} |",
        f"| `{GPU_ALERT_GROUP}` evaluation (median / p95) | {cost(before, base_before)} | {cost(after, base_now)} |",
        f"| `{JOB_GROUP}` evaluation (median / p95) | none | {cost(jobs_group, base_now)} |",
        f"| baseline GPU read (`count` of one GPU gauge) | {_ms(_gpu_read_ms(base_before) or 0)} ms | "
        f"{_ms(_gpu_read_ms(base_now) or 0)} ms |",
        *_per_rule_lines(after, base_now),
        *_alone_lines(big.alone),
    ]


def _per_rule_lines(group: GroupTiming | None, baseline: GroupTiming | None) -> list[str]:
    """Where a group's evaluation goes: each rule's mean cost in fleet reads."""
    read = _gpu_read_ms(baseline)
    if group is None or group.total.error or not group.rule_ms or read is None or read <= 0:
        return []
    rules = ", ".join(f"`{rule}` {ms / read:.2f}" for rule, ms in group.rule_ms)
    return [
        "",
        f"`{group.name}` now, by rule (mean fleet reads; the recorded inputs first, then the alerts, which "
        f"read them in the same evaluation): {rules}.",
    ]


def _alone_lines(alone: dict[str, float]) -> list[str]:
    """The GPU alert group timed alone: its cost and its floor in fleet reads, measured in one sequence."""
    read, floor = alone.get("fleet read", 0.0), alone.get("floor", 0.0)
    if read <= 0 or floor <= 0 or GPU_ALERT_GROUP not in alone:
        return []
    group, jobs_ms = alone[GPU_ALERT_GROUP], alone.get(JOB_GROUP, 0.0)
    return [
        "",
        f"Timed alone, on a third live Prometheus of the same fleet: one bench-only group runs, in order at one "
        f"timestamp, the fleet read (`count()` of one GPU metric), the floor (`count()` of each poller series "
        f"`{GPU_ALERT_GROUP}` reads, once), the per-job records its utilization alerts read, then "
        f"`{GPU_ALERT_GROUP}`'s rules; no other group contends within an evaluation (mean of the recorded "
        f"evaluations). Fleet read {_ms(read)} ms; floor {floor / read:.1f} fleet reads; `{GPU_ALERT_GROUP}` "
        f"{group / read:.1f} fleet reads, {group / floor:.1f}x its floor; "
        f"`{JOB_GROUP}` {jobs_ms / read:.1f} fleet reads. No design that reads the group's inputs at every "
        "evaluation costs less than the floor.",
    ]


def _baseline(groups: Sequence[GroupTiming]) -> GroupTiming | None:
    return next((g for g in groups if g.name == BASELINE_GROUP and not g.total.error), None)


def _real_groups(groups: Sequence[GroupTiming]) -> list[GroupTiming]:
    return [g for g in groups if g.name != BASELINE_GROUP]


def _gpu_read_ms(baseline: GroupTiming | None) -> float | None:
    """Mean cost of the baseline's first rule: one read of every GPU's series of one metric."""
    if baseline is None or not baseline.rule_ms:
        return None
    return baseline.rule_ms[0][1]


def _fleet_reads(group: GroupTiming, baseline: GroupTiming | None) -> str:
    read = _gpu_read_ms(baseline)
    if read is None or group.total.error or read <= 0:
        return "n/a"
    return f"{group.total.median_ms / read:.1f}"


def _baseline_lines(big: ScaleResult, small: ScaleResult) -> list[str]:
    lines = []
    for result in (small, big) if small is not big else (big,):
        baseline = _baseline(result.groups)
        if baseline is None:
            continue
        costs = ", ".join(f"`{rule}` {_ms(ms)} ms" for rule, ms in baseline.rule_ms)
        lines.append(
            f"- Baseline at {result.shape.nodes} nodes, evaluated alongside the groups (not deployed): {costs} "
            f"(reading every GPU's series of one metric once: {result.shape.nodes * result.shape.gpus_per_node:,} "
            f"series; every node's: {result.shape.nodes:,})."
        )
    if lines:
        lines.append(
            "- Fleet reads = group median / the baseline's GPU read: how many whole-fleet GPU reads a group's "
            "evaluation costs. A group that must look at every GPU costs at least one; the goal is met on "
            "this machine only by groups that do not read per-GPU series at all."
        )
    return lines


def summary(results: Sequence[ScaleResult]) -> list[str]:
    big = max(results, key=lambda r: r.shape.nodes)
    missing = [p for p in big.panels if _missed(p.judged, PANEL_GOAL_MS)]
    wide = [p for p in big.panels if p.judged.series > MANY_SERIES]
    groups = _real_groups(big.groups)
    slow_groups = [g for g in groups if _missed(g.total, GROUP_GOAL_MS)]
    out = [
        f"Summary at {big.shape.nodes} nodes: {len(big.panels) - len(missing)} of {len(big.panels)} panel "
        f"queries meet the {PANEL_GOAL_MS:.0f} ms goal, {len(groups) - len(slow_groups)} of "
        f"{len(groups)} rule groups meet the {GROUP_GOAL_MS:.0f} ms goal; {len(wide)} panel queries return "
        f"more than {MANY_SERIES} series."
    ]
    if len(results) > 1:
        small = min(results, key=lambda r: r.shape.nodes)
        ratios = sorted(
            p.judged.median_ms / q.judged.median_ms
            for p in big.panels
            for q in small.panels
            if _panel_key(p) == _panel_key(q) and q.judged.median_ms > 0 and not p.judged.error and not q.judged.error
        )
        if ratios:
            out.append(
                f"Growth from {small.shape.nodes} to {big.shape.nodes} nodes (median of the query Grafana runs): "
                f"median {ratios[len(ratios) // 2]:.1f}x, max {ratios[-1]:.1f}x over the panel queries "
                f"(the GPU series grow {big.shape.nodes / small.shape.nodes:.0f}x, the training-job series not at all)."
            )
    return out


GROUPS_BEGIN = "<!-- fleet-rule-groups:begin (written by `python -m bench.fleet --rule-groups-only`) -->"
GROUPS_END = "<!-- fleet-rule-groups:end -->"


def render_rule_groups(
    results: Sequence[tuple[FleetShape, Sequence[GroupTiming]]],
    command: str,
    machine: str,
    live_warmup_seconds: float,
    live_evaluations: int,
    highlight: str = "",
) -> str:
    """A rule-groups-only run (no backfill, no panels): every group on a live fleet, each size."""
    big_shape, big_groups = max(results, key=lambda r: r[0].nodes)
    small_shape, small_list = min(results, key=lambda r: r[0].nodes)
    small_groups = {g.name: g for g in small_list}
    baseline = _baseline(big_groups)
    lines = [
        GROUPS_BEGIN,
        "## Fleet scale: rule groups only",
        "",
        f"Command: `{command}` ({machine}). The live half of the fleet benchmark alone: a fresh Prometheus "
        f"scrapes the synthetic fleet ({big_shape.gpus_per_node} GPUs a node, every series the poller exports) "
        f"and itself every {big_shape.interval_seconds} s with every rule group loaded; after "
        f"{live_warmup_seconds:.0f} s of scraping, {live_evaluations} evaluations of each group are read from "
        "its rule manager (`/api/v1/rules`). Fleet reads = group median / the baseline's read of every GPU's "
        "series of one metric (evaluated alongside, not deployed). All figures come from one run on one machine.",
        "",
    ]
    for shape, groups in results:
        base = _baseline(groups)
        if base is not None:
            costs = ", ".join(f"`{rule}` {_ms(ms)} ms" for rule, ms in base.rule_ms)
            lines.append(f"- Baseline at {shape.nodes} nodes: {costs}.")
    two_sizes = small_shape != big_shape
    smaller = f" at {small_shape.nodes} nodes ms |" if two_sizes else ""
    lines += [
        "",
        f"| group | rules | series and alerts out | median / p95 ms at {big_shape.nodes} nodes |{smaller} "
        "fleet reads | slowest rule (mean ms) |",
        "|---|---:|---:|---:|" + ("---:|" if two_sizes else "") + "---:|---|",
    ]
    for g in _real_groups(big_groups):
        before = small_groups.get(g.name)
        name = f"**{g.name}**" if g.name == highlight else g.name
        slowest = f"{g.slowest_rule} ({_ms(g.slowest_rule_ms)})" if not g.total.error else _cell(g.total.error, 60)
        earlier = f" {_timing(before.total).split(' / ')[0] if before else 'n/a'} |" if two_sizes else ""
        lines.append(
            f"| {name} | {g.rules} | {g.total.series} | {_timing(g.total)} |{earlier} "
            f"{_fleet_reads(g, baseline)} | {slowest} |"
        )
    chosen = next((g for g in big_groups if g.name == highlight), None)
    if chosen is not None and not chosen.total.error:
        lines += [
            "",
            f"{highlight} at {big_shape.nodes} nodes: {_ms(chosen.total.median_ms)} ms median, "
            f"{_ms(chosen.total.p95_ms)} ms p95 an evaluation ({_fleet_reads(chosen, baseline)} whole-fleet GPU "
            f"reads); per rule (mean ms): " + ", ".join(f"{rule} {_ms(ms)}" for rule, ms in chosen.rule_ms) + ".",
        ]
    lines.append(GROUPS_END)
    return "\n".join(lines) + "\n"
