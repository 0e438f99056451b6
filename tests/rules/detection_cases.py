"""The 30-second promise in simulated time, for several critical scrape/evaluation intervals.

For each critical-detection alert and each interval pair, the failure happens just after a scrape
started (the worst moment: it waits a whole scrape interval for the next one), and that next
sample is stored at the end of its scrape, a whole scrape timeout later. In promtool a sample is
visible from its timestamp on, so the first bad sample is placed where it becomes visible (at
several phases of the evaluation clock: just after an evaluation is the worst case) and the
failure `scrape interval + scrape timeout` before it. Samples come every scrape interval on a 1s
grid; every group is evaluated at the critical evaluation interval. Each case asserts the alert is
still silent one evaluation before the predicted firing time and firing at it; the predicted
failure-to-page time (Alertmanager's group_wait added) is checked against the budget in Python.
A single-sample out-of-memory spike must never fire.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.promql import duration
from observability.rules import alert_rules
from observability.rules.detection import detection_budget
from tests.rules.alert_cases import H100_BYTES, NAN_JOB, NAN_LABELS, TRAINING_POD
from tests.rules.promtool_harness import Case, Check, Firing, Suite, gpu_labels, poller_target, series

# (critical scrape, critical evaluation, budget): every stack's 5/5 and the edges that still fit.
INTERVALS: tuple[tuple[int, int, int], ...] = (
    (5, 5, 30),
    (2, 2, 30),
    (6, 6, 30),
    (7, 7, 30),
    (3, 5, 30),
    (15, 15, 60),
)
GPU = gpu_labels("3", node="gpu-node-2")


def variant_cfg(scrape: int, evaluation: int, budget: int) -> ObservabilityConfig:
    """Every source and group at these intervals (promtool evaluates every group at one interval)."""
    return ObservabilityConfig(
        scrape_interval_seconds=scrape,
        evaluation_interval_seconds=evaluation,
        critical_scrape_interval_seconds=scrape,
        critical_evaluation_interval_seconds=evaluation,
        critical_detection_seconds=budget,
    )


@dataclass(frozen=True)
class Detection:
    alert: str
    scrape: int
    evaluation: int
    budget: int
    phase: int
    first_bad: int  # when the first bad sample becomes visible (its scrape ended)
    fires_at: int  # predicted first firing evaluation
    event: int  # when the failure happened: just after the scrape before, so a scrape interval and timeout earlier
    group_wait: int  # Alertmanager's wait before the page

    @property
    def latency(self) -> int:
        """Failure to firing in Prometheus."""
        return self.fires_at - self.event

    @property
    def page_latency(self) -> int:
        """Failure to the page leaving Alertmanager."""
        return self.latency + self.group_wait


def _samples(scrape: int, phase: int, first_bad: int, end: int, good: float, bad: float) -> str:
    """A 1s grid with a sample every `scrape` seconds from `phase`; `bad` from `first_bad` on."""
    grid = ["_"] * (end + 1)
    for at in range(phase, end + 1, scrape):
        grid[at] = repr(bad) if at >= first_bad else repr(good)
    return " ".join(grid)


def _input(
    alert: str, text_for: tuple[float, float], scrape: int, phase: int, first_bad: int, end: int
) -> dict[str, str]:
    good, bad = text_for
    samples = _samples(scrape, phase, first_bad, end, good, bad)
    if alert == "TrainingNaNDetected":
        return {series(catalog.TRAINING_NAN_COUNT, {**TRAINING_POD, **NAN_JOB}): samples}
    if alert == "GPUErrorsDetected":
        # An XID as the poller counts it: in the errors counter, which exists at 0 before it.
        return {series(catalog.GPU_ERRORS_TOTAL, {**poller_target(), **GPU, "error_type": "xid"}): samples}
    total = _samples(scrape, phase, first_bad, end, H100_BYTES, H100_BYTES)
    return {
        series(catalog.GPU_MEMORY_USED_BYTES, {**poller_target(), **GPU}): samples,
        series(catalog.GPU_MEMORY_TOTAL_BYTES, {**poller_target(), **GPU}): total,
    }


_GOOD_BAD = {
    "TrainingNaNDetected": (0.0, 1.0),
    "GPUErrorsDetected": (0.0, 1.0),
    "GPUMemoryExhausted": (0.5 * H100_BYTES, 0.9875 * H100_BYTES),
}
_FIRING = {
    "TrainingNaNDetected": Firing(NAN_LABELS),
    "GPUErrorsDetected": Firing(GPU),
    "GPUMemoryExhausted": Firing(GPU, 0.9875),
}


def detections(scrape: int, evaluation: int, budget: int) -> list[Detection]:
    cfg = variant_cfg(scrape, evaluation, budget)
    bound = detection_budget(cfg)
    for_seconds = {a.name: a.for_seconds for a in alert_rules(cfg)}
    out = []
    for alert in _GOOD_BAD:
        # The first bad sample becomes visible `offset` seconds after an evaluation (60s is on every
        # clock used here); the scrape grid is shifted to put a sample there, with samples before it.
        for offset in sorted({0, 1, evaluation // 2, evaluation - 1}):
            first_bad = 60 + offset
            seen_at = math.ceil(first_bad / evaluation) * evaluation
            phase = first_bad % scrape
            event = first_bad - scrape - bound.scrape_timeout_seconds
            fires_at = seen_at + for_seconds[alert]
            out.append(
                Detection(
                    alert, scrape, evaluation, budget, phase, first_bad, fires_at, event, bound.group_wait_seconds
                )
            )
    return out


def spike_case(scrape: int, evaluation: int, budget: int) -> Case:
    """One scraped sample at 98.75% between samples at 50%: GPUMemoryExhausted never fires."""
    spike_at = 60 + 1
    end = spike_at + 4 * max(scrape, evaluation)
    grid = ["_"] * (end + 1)
    for at in range(spike_at % scrape, end + 1, scrape):
        grid[at] = repr(0.9875 * H100_BYTES if at == spike_at else 0.5 * H100_BYTES)
    total = _samples(scrape, spike_at % scrape, spike_at, end, H100_BYTES, H100_BYTES)
    checks = tuple(Check(duration(t)) for t in range(spike_at - spike_at % evaluation, end + 1, evaluation))
    return Case(
        alert="GPUMemoryExhausted",
        name=f"scrape {scrape}s, evaluation {evaluation}s: a single-sample spike at {spike_at}s never fires",
        input={
            series(catalog.GPU_MEMORY_USED_BYTES, {**poller_target(), **GPU}): " ".join(grid),
            series(catalog.GPU_MEMORY_TOTAL_BYTES, {**poller_target(), **GPU}): total,
        },
        checks=checks,
        interval="1s",
    )


def detection_case(d: Detection) -> Case:
    end = d.fires_at + 2 * d.evaluation
    return Case(
        alert=d.alert,
        name=f"scrape {d.scrape}s, evaluation {d.evaluation}s, first bad sample at {d.first_bad}s "
        f"({d.first_bad % d.evaluation}s after an evaluation): fires at {d.fires_at}s, {d.latency}s later",
        input=_input(d.alert, _GOOD_BAD[d.alert], d.scrape, d.phase, d.first_bad, end),
        checks=(Check(duration(d.fires_at - d.evaluation)), Check(duration(d.fires_at), (_FIRING[d.alert],))),
        interval="1s",
    )


def detection_suites() -> list[tuple[Suite, list[Detection]]]:
    suites = []
    for scrape, evaluation, budget in INTERVALS:
        found = detections(scrape, evaluation, budget)
        suite = Suite(
            name=f"detection-s{scrape}-e{evaluation}-b{budget}",
            cfg=variant_cfg(scrape, evaluation, budget),
            cases=[*(detection_case(d) for d in found), spike_case(scrape, evaluation, budget)],
        )
        suites.append((suite, found))
    return suites
