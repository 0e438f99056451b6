"""The "Fleet scale" section of BENCHMARKS.md, from the measured timings."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench._fleet_data import BackfillStats, FleetShape
from bench._query_timing import MIN_REPEAT, ONE_RUN_SECONDS, SLOW_QUERY_SECONDS, GroupTiming, PanelTiming, Timing

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


def render(results: Sequence[ScaleResult], command: str, machine: str, repeat: int = 7) -> str:
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
        f"{big.shape.training_jobs} training jobs (the series `observability.instrument` exposes), plus the "
        "ML service and Tempo span metrics; target labels as scrape discovery sets them. Backfilled with "
        "`promtool tsdb create-blocks-from openmetrics`, recording rules backfilled with "
        "`promtool tsdb create-blocks-from rules` (in dependency order), Prometheus 2.42 started on the "
        "data and left to compact it into one block, then every Prometheus query of every dashboard "
        "(every template variable set to All, the worst case) run at the end of the hour: instant, and "
        "over the dashboard's "
        "1 h range at the panel's step. Latency is the client's wall time over HTTP (JSON included), "
        f"median and nearest-rank p95 of {repeat} runs after a warm-up ({MIN_REPEAT} runs for queries slower "
        f"than {SLOW_QUERY_SECONDS:.0f} s, the warm-up run alone for those slower than {ONE_RUN_SECONDS:.0f} s); "
        "the answer is read to its last byte but not decoded. A rule group's cost is the sum of its rules' "
        "expressions run as instant queries at the same time (an upper bound of the in-engine "
        "evaluation, which skips HTTP and JSON).",
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
        f"### Dashboard panels at {big.shape.nodes} nodes (goal: range query median < {PANEL_GOAL_MS:.0f} ms)",
        "",
        f"Growth = range-query median at {big.shape.nodes} nodes / at {small.shape.nodes} nodes. "
        f"Series: what the range query returns; more than {MANY_SERIES} on one panel is flagged.",
        "",
        "| dashboard | panel (ref) | query | series | instant median / p95 ms | range median / p95 ms | "
        f"range median at {small.shape.nodes} nodes ms | growth | verdict |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in big.panels:
        before = small_panels.get(_panel_key(p))
        verdict = []
        if p.range.error:
            verdict.append(f"**fails**: {_cell(p.range.error, 60)}")
        elif p.range.median_ms >= PANEL_GOAL_MS:
            verdict.append("**misses goal**")
        if p.range.series > MANY_SERIES or p.instant.series > MANY_SERIES:
            verdict.append(f"**{max(p.range.series, p.instant.series)} series**")
        before_range = before.range if before else None
        lines.append(
            f"| {p.query.dashboard_uid} | {_cell(p.query.panel_title, 40)} ({p.query.ref_id}) | `{_cell(p.expr)}` | "
            f"{p.range.series or p.instant.series} | {_timing(p.instant)} | {_timing(p.range)} | "
            f"{_timing(before_range).split(' / ')[0] if before_range else 'n/a'} | {_growth(p.range, before_range)} | "
            f"{', '.join(verdict) or 'ok'} |"
        )
    lines += [
        "",
        f"### Rule groups at {big.shape.nodes} nodes (goal: < {GROUP_GOAL_MS:.0f} ms a group)",
        "",
        f"| group | rules | series out | median / p95 ms | at {small.shape.nodes} nodes ms | growth "
        "| slowest rule (mean ms) | verdict |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for g in big.groups:
        before_g = small_groups.get(g.name)
        if g.total.error:
            group_verdict = f"**fails**: {_cell(g.total.error, 60)}"
        else:
            group_verdict = "**misses goal**" if g.total.median_ms >= GROUP_GOAL_MS else "ok"
        lines.append(
            f"| {g.name} | {g.rules} | {g.total.series} | {_timing(g.total)} | "
            f"{_timing(before_g.total).split(' / ')[0] if before_g else 'n/a'} | "
            f"{_growth(g.total, before_g.total if before_g else None)} | "
            f"{g.slowest_rule} ({_ms(g.slowest_rule_ms)}) | {group_verdict} |"
        )
    lines += ["", *summary(results), END]
    return "\n".join(lines) + "\n"


def summary(results: Sequence[ScaleResult]) -> list[str]:
    big = max(results, key=lambda r: r.shape.nodes)
    missing = [p for p in big.panels if _missed(p.range, PANEL_GOAL_MS)]
    wide = [p for p in big.panels if max(p.range.series, p.instant.series) > MANY_SERIES]
    slow_groups = [g for g in big.groups if _missed(g.total, GROUP_GOAL_MS)]
    out = [
        f"Summary at {big.shape.nodes} nodes: {len(big.panels) - len(missing)} of {len(big.panels)} panel "
        f"queries meet the {PANEL_GOAL_MS:.0f} ms range-median goal, {len(big.groups) - len(slow_groups)} of "
        f"{len(big.groups)} rule groups meet the {GROUP_GOAL_MS:.0f} ms goal; {len(wide)} panel queries return "
        f"more than {MANY_SERIES} series."
    ]
    if len(results) > 1:
        small = min(results, key=lambda r: r.shape.nodes)
        ratios = sorted(
            p.range.median_ms / q.range.median_ms
            for p in big.panels
            for q in small.panels
            if _panel_key(p) == _panel_key(q) and q.range.median_ms > 0 and not p.range.error and not q.range.error
        )
        if ratios:
            out.append(
                f"Growth from {small.shape.nodes} to {big.shape.nodes} nodes (range-query median): "
                f"median {ratios[len(ratios) // 2]:.1f}x, max {ratios[-1]:.1f}x over the panel queries "
                f"(the GPU series grow {big.shape.nodes / small.shape.nodes:.0f}x, the training-job series not at all)."
            )
    return out


def write_section(path: Path, section: str) -> None:
    """Replace this benchmark's section of BENCHMARKS.md (between its markers), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", re.DOTALL)
    updated = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(updated, encoding="utf-8")
