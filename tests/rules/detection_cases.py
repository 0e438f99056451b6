"""The 30-second promise in simulated time, for several scrape/evaluation intervals.

For each critical-detection alert and each interval pair, the first bad sample is placed at several
phases relative to the evaluation clock (just after an evaluation is the worst case). Samples come
every scrape interval on a 1s grid. Each case asserts the alert is still silent one evaluation
before the predicted firing time and firing at it; the predicted time is checked against the
budget in Python, so the cases prove latency <= critical_detection_seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from observability import catalog
from observability.config import ObservabilityConfig
from observability.promql import duration
from observability.rules import alert_rules
from tests.rules.alert_cases import H100_BYTES, NAN_JOB, NAN_LABELS, TRAINING_POD
from tests.rules.promtool_harness import Case, Check, Firing, Suite, gpu_labels, poller_target, series

# (scrape, evaluation, budget): the stacks' 15/15 and 10/10, and the edges the brief names.
INTERVALS: tuple[tuple[int, int, int], ...] = (
    (15, 15, 30),
    (10, 10, 30),
    (30, 30, 30),
    (30, 15, 30),
    (15, 30, 30),
    (5, 5, 30),
    (30, 30, 60),
)
GPU = gpu_labels("3", node="gpu-node-2")


def variant_cfg(scrape: int, evaluation: int, budget: int) -> ObservabilityConfig:
    return ObservabilityConfig(
        scrape_interval_seconds=scrape, evaluation_interval_seconds=evaluation, critical_detection_seconds=budget
    )


@dataclass(frozen=True)
class Detection:
    alert: str
    scrape: int
    evaluation: int
    budget: int
    phase: int
    first_bad: int  # time of the first bad sample
    fires_at: int  # predicted first firing evaluation

    @property
    def latency(self) -> int:
        return self.fires_at - self.first_bad


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
    for_seconds = {a.name: a.for_seconds for a in alert_rules(cfg)}
    out = []
    for alert in _GOOD_BAD:
        # The first bad sample lands `offset` seconds after an evaluation (60s is on every clock
        # used here); the scrape grid is shifted to put a sample there, with two samples before it.
        for offset in sorted({0, 1, evaluation // 2, evaluation - 1}):
            first_bad = 60 + offset
            seen_at = math.ceil(first_bad / evaluation) * evaluation
            phase = first_bad % scrape
            out.append(Detection(alert, scrape, evaluation, budget, phase, first_bad, seen_at + for_seconds[alert]))
    return out


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
            cases=[detection_case(d) for d in found],
        )
        suites.append((suite, found))
    return suites
