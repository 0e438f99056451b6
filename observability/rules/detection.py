"""The promise: critical failures (NaN, GPU out of memory, GPU errors) detected in 30 seconds.

Measured from the first scraped sample that shows the failure to the
alert being `firing` in Prometheus. A rule sees that sample at the first evaluation at or after
its timestamp, which is less than one evaluation interval later; from then the alert is pending
for its `for` and fires at the first evaluation at least `for` later. So the worst case is

    latency < evaluation_interval + for        (`for` a multiple of the evaluation interval)

and the `for` of the fast critical alerts is the largest multiple of the evaluation interval
that keeps `evaluation_interval + for <= critical_detection_seconds`, capped at what the rule
wants for itself. From the failure itself add up to one scrape interval (until the next scrape)
and the scrape's own duration; paging adds Alertmanager's `group_wait`.

The rule groups run at `cfg.evaluation_interval_seconds` (their `interval` is set from it), so a
Prometheus whose global evaluation interval differs cannot silently break the promise.
"""

from __future__ import annotations

from dataclasses import dataclass

from observability.config import ObservabilityConfig

# Alerts bound by the promise. Their expressions read raw series, or series recorded earlier in
# their own group (same evaluation time, so just as fresh): a rule reading another group's
# recorded series may see a value one evaluation old.
CRITICAL_DETECTION_ALERTS: tuple[str, ...] = ("TrainingNaNDetected", "GPUMemoryExhausted", "GPUErrorsDetected")


@dataclass(frozen=True)
class DetectionBudget:
    """How a config spends its detection budget."""

    budget_seconds: int
    evaluation_interval_seconds: int
    scrape_interval_seconds: int

    @property
    def max_for_seconds(self) -> int:
        """The longest `for` that still meets the budget (a multiple of the evaluation interval)."""
        spare = self.budget_seconds - self.evaluation_interval_seconds
        return spare // self.evaluation_interval_seconds * self.evaluation_interval_seconds

    def worst_latency_seconds(self, for_seconds: int) -> int:
        """Upper bound on first-bad-sample-to-firing for an alert with this `for`."""
        return self.evaluation_interval_seconds + _round_up(for_seconds, self.evaluation_interval_seconds)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def detection_budget(cfg: ObservabilityConfig) -> DetectionBudget:
    """The config's budget, or ValueError when its intervals make the 30-second promise impossible."""
    problems = []
    if cfg.scrape_interval_seconds <= 0:
        problems.append(f"scrape_interval_seconds must be positive, got {cfg.scrape_interval_seconds}")
    if cfg.evaluation_interval_seconds <= 0:
        problems.append(f"evaluation_interval_seconds must be positive, got {cfg.evaluation_interval_seconds}")
    if cfg.critical_detection_seconds <= 0:
        problems.append(f"critical_detection_seconds must be positive, got {cfg.critical_detection_seconds}")
    if problems:
        raise ValueError("; ".join(problems))
    if cfg.evaluation_interval_seconds > cfg.critical_detection_seconds:
        raise ValueError(
            f"critical failures cannot be detected within critical_detection_seconds="
            f"{cfg.critical_detection_seconds}: with evaluation_interval_seconds={cfg.evaluation_interval_seconds} "
            f"a rule first sees a new sample up to {cfg.evaluation_interval_seconds}s after it is scraped, even "
            f"with no `for`. Lower the evaluation interval to at most {cfg.critical_detection_seconds}s or raise "
            f"critical_detection_seconds."
        )
    return DetectionBudget(
        budget_seconds=cfg.critical_detection_seconds,
        evaluation_interval_seconds=cfg.evaluation_interval_seconds,
        scrape_interval_seconds=cfg.scrape_interval_seconds,
    )


def critical_for_seconds(cfg: ObservabilityConfig, wanted_seconds: int) -> int:
    """`for` of a fast critical alert: what it wants, shortened until the promise holds."""
    budget = detection_budget(cfg)
    wanted = _round_up(wanted_seconds, cfg.evaluation_interval_seconds)
    return min(wanted, budget.max_for_seconds)


def event_window_seconds(cfg: ObservabilityConfig, minimum_seconds: int = 600) -> int:
    """Window of the counter-event alerts (NaN, GPU errors, checkpoint failures).

    The alert stays firing this long after the last event. It must span at least two scrapes so
    that `increase()` sees the sample before the event next to the sample after it; four leave
    room for a missed scrape.
    """
    detection_budget(cfg)
    return max(minimum_seconds, 4 * cfg.scrape_interval_seconds)
