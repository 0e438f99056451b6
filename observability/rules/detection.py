"""The promise: a critical failure (NaN, GPU out of memory, GPU errors) pages within 30 seconds of
the failure itself.

The person paged counts from the failure, so the bound runs from the event to the notification
leaving Alertmanager. Its parts, worst case:

    scrape interval      the failure waits for the next scrape of its source (the GPU poller, a
                         training job or the training service, all scraped at
                         `critical_scrape_interval_seconds`);
    scrape timeout       the sample is stored when the scrape ends (at most its timeout later);
    evaluation interval  the first evaluation of the alert's group after that (the groups holding
                         the critical alerts run at `critical_evaluation_interval_seconds`);
    for                  pending until `for` has passed (a multiple of the evaluation interval);
    group wait           Alertmanager's `group_wait` of the page route (PAGE_GROUP_WAIT_SECONDS);
    delivery allowance   the evaluation itself and Prometheus sending the alert to Alertmanager.

so `worst_event_to_page = S + timeout + E + for + group_wait + allowance <= budget`, and the
render refuses intervals that cannot keep it. GPUMemoryExhausted keeps a guard against a single
spike: its `for` spans at least one scrape interval, so a second sample must agree before it
fires; within the budget it gets the longest such `for` up to what it wants (60 s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from observability.config import ObservabilityConfig
from observability.scrape_config import critical_scrape_timeout_seconds

# Alerts bound by the promise. Their expressions read raw series, or series recorded earlier in
# their own group (same evaluation time, so just as fresh): a rule reading another group's
# recorded series may see a value one evaluation old.
CRITICAL_DETECTION_ALERTS: tuple[str, ...] = ("TrainingNaNDetected", "GPUMemoryExhausted", "GPUErrorsDetected")
# Alertmanager's group_wait on the page route (observability.alertmanager takes it from here): the
# critical alerts of one evaluation arrive together, so a short wait still batches them.
PAGE_GROUP_WAIT_SECONDS = 5
# The rule evaluation itself and Prometheus' notifier sending the alert (milliseconds in practice).
DELIVERY_ALLOWANCE_SECONDS = 1


@dataclass(frozen=True)
class DetectionBudget:
    """How a config spends its detection budget, from the failure to the page."""

    budget_seconds: int
    scrape_interval_seconds: int  # of the critical alerts' sources
    scrape_timeout_seconds: int
    evaluation_interval_seconds: int  # of the groups holding the critical alerts
    group_wait_seconds: int = PAGE_GROUP_WAIT_SECONDS
    allowance_seconds: int = DELIVERY_ALLOWANCE_SECONDS

    @property
    def fixed_seconds(self) -> int:
        """Everything but `for`: from the failure to the first evaluation that sees it, plus paging."""
        return (
            self.scrape_interval_seconds
            + self.scrape_timeout_seconds
            + self.evaluation_interval_seconds
            + self.group_wait_seconds
            + self.allowance_seconds
        )

    @property
    def max_for_seconds(self) -> int:
        """The longest `for` that still meets the budget (a multiple of the evaluation interval)."""
        spare = self.budget_seconds - self.fixed_seconds
        return spare // self.evaluation_interval_seconds * self.evaluation_interval_seconds

    @property
    def spike_guard_for_seconds(self) -> int:
        """The shortest `for` that needs a second scraped sample to agree (one scrape interval)."""
        return _round_up(self.scrape_interval_seconds, self.evaluation_interval_seconds)

    def worst_event_to_firing_seconds(self, for_seconds: int) -> int:
        """Upper bound on failure-to-firing in Prometheus for an alert with this `for`."""
        return (
            self.scrape_interval_seconds
            + self.scrape_timeout_seconds
            + self.evaluation_interval_seconds
            + _round_up(for_seconds, self.evaluation_interval_seconds)
            + self.allowance_seconds
        )

    def worst_event_to_page_seconds(self, for_seconds: int) -> int:
        """Upper bound on failure-to-notification (Alertmanager's group_wait included)."""
        return self.worst_event_to_firing_seconds(for_seconds) + self.group_wait_seconds


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def detection_budget(cfg: ObservabilityConfig) -> DetectionBudget:
    """The config's budget, or ValueError when its intervals make the 30-second promise impossible."""
    problems = []
    for name in (
        "scrape_interval_seconds",
        "evaluation_interval_seconds",
        "critical_scrape_interval_seconds",
        "critical_evaluation_interval_seconds",
        "critical_detection_seconds",
    ):
        if getattr(cfg, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(cfg, name)}")
    if problems:
        raise ValueError("; ".join(problems))
    budget = DetectionBudget(
        budget_seconds=cfg.critical_detection_seconds,
        scrape_interval_seconds=cfg.critical_scrape_interval_seconds,
        scrape_timeout_seconds=critical_scrape_timeout_seconds(cfg),
        evaluation_interval_seconds=cfg.critical_evaluation_interval_seconds,
    )
    if budget.max_for_seconds < budget.spike_guard_for_seconds:
        raise ValueError(
            f"critical failures cannot page within critical_detection_seconds={cfg.critical_detection_seconds}: "
            f"with critical_scrape_interval_seconds={budget.scrape_interval_seconds} (scrape timeout "
            f"{budget.scrape_timeout_seconds}s) and critical_evaluation_interval_seconds="
            f"{budget.evaluation_interval_seconds}, a failure waits up to {budget.scrape_interval_seconds}s for the "
            f"scrape that shows it, {budget.scrape_timeout_seconds}s for that scrape, "
            f"{budget.evaluation_interval_seconds}s for an evaluation, {budget.spike_guard_for_seconds}s of `for` "
            f"(a second sample must confirm an out-of-memory), {budget.group_wait_seconds}s of Alertmanager's "
            f"group_wait and {budget.allowance_seconds}s to deliver: "
            f"{budget.fixed_seconds + budget.spike_guard_for_seconds}s. Lower the critical intervals (at most "
            f"{_largest_interval(cfg.critical_detection_seconds)}s each) or raise critical_detection_seconds."
        )
    return budget


def _largest_interval(budget_seconds: int) -> int:
    """The largest equal critical scrape and evaluation interval that keeps the budget."""
    best = 0
    for interval in range(1, budget_seconds + 1):
        cfg = ObservabilityConfig(
            critical_scrape_interval_seconds=interval,
            critical_evaluation_interval_seconds=interval,
            critical_detection_seconds=budget_seconds,
        )
        timeout = critical_scrape_timeout_seconds(cfg)
        fixed = 3 * interval + timeout + PAGE_GROUP_WAIT_SECONDS + DELIVERY_ALLOWANCE_SECONDS
        if fixed <= budget_seconds:
            best = interval
    return best


def critical_for_seconds(cfg: ObservabilityConfig, wanted_seconds: int) -> int:
    """`for` of a fast critical alert: what it wants, shortened until the promise holds.

    An alert that wants a `for` (a guard against a single spike) keeps at least one scrape
    interval of it; `detection_budget` refuses intervals that leave less."""
    budget = detection_budget(cfg)
    if wanted_seconds <= 0:
        return 0
    wanted = max(_round_up(wanted_seconds, budget.evaluation_interval_seconds), budget.spike_guard_for_seconds)
    return min(wanted, budget.max_for_seconds)


def promise_text(cfg: ObservabilityConfig, for_seconds: Mapping[str, int]) -> str:
    """The promise in words, with each critical alert's worst case at the config's intervals (the
    runbooks' introduction states it; `for_seconds` holds each alert's `for`)."""
    budget = detection_budget(cfg)
    worst = ", ".join(f"{name} {budget.worst_event_to_page_seconds(for_seconds[name])}s" for name in for_seconds)
    return (
        f"Critical failures ({', '.join(for_seconds)}) page within {budget.budget_seconds}s of the failure "
        "itself, not of the first sample that shows it. Worst case from the failure to the page, with their "
        f"sources scraped every {budget.scrape_interval_seconds}s (timeout {budget.scrape_timeout_seconds}s), their "
        f"groups evaluated every {budget.evaluation_interval_seconds}s and Alertmanager's {budget.group_wait_seconds}s "
        f"page group_wait: {worst}. A stack whose intervals cannot keep the promise fails to render "
        "(`observability/rules/detection.py`)."
    )


def event_window_seconds(cfg: ObservabilityConfig, minimum_seconds: int = 600) -> int:
    """Window of the counter-event alerts (NaN, GPU errors, checkpoint failures).

    The alert stays firing this long after the last event. It must span at least two scrapes so
    that `increase()` sees the sample before the event next to the sample after it; four leave
    room for a missed scrape.
    """
    detection_budget(cfg)
    return max(minimum_seconds, 4 * max(cfg.scrape_interval_seconds, cfg.critical_scrape_interval_seconds))
