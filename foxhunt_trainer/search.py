"""Hyperparameter-search series of a training job: one set per study, never one per trial.

A study's trials are counted by state (`ml_hpo_trials{study, state}`, as the study's storage holds
them, so every worker of a shared study reports the same counts: panels take the max), with the
best objective value so far and the latest completed trial's value. The trial in progress shows its
number, latest epoch and loss in series that the next trial overwrites; the epochs of finished
trials add up by the state they ended in (`ml_hpo_trial_epochs_total`: what pruning saved).

Framework-free: `integrations.optuna` feeds it from an Optuna study; any other search loop can
call it directly (`job.study("lr-search").record_trial_end(...)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from prometheus_client import Counter, Gauge

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Metric

RUNNING = "running"
WAITING = "waiting"
COMPLETE = "complete"
PRUNED = "pruned"
FAILED = "failed"
# Every state a trial can be in: the bounded values of the `state` label.
TRIAL_STATES: tuple[str, ...] = (RUNNING, WAITING, COMPLETE, PRUNED, FAILED)
FINISHED_STATES: tuple[str, ...] = (COMPLETE, PRUNED, FAILED)


class SearchFamilies:
    """The hyperparameter-search families of one `TrainingMetrics` registry."""

    def __init__(self, gauge: Callable[[Metric], Gauge], counter: Callable[[Metric], Counter]) -> None:
        self.trials = gauge(catalog.HPO_TRIALS)
        self.best_value = gauge(catalog.HPO_BEST_VALUE)
        self.objective_value = gauge(catalog.HPO_OBJECTIVE_VALUE)
        self.trial_number = gauge(catalog.HPO_TRIAL_NUMBER)
        self.trial_epoch = gauge(catalog.HPO_TRIAL_EPOCH)
        self.trial_loss = gauge(catalog.HPO_TRIAL_LOSS)
        self.trial_epochs = counter(catalog.HPO_TRIAL_EPOCHS_TOTAL)


def _check_state(state: str, allowed: tuple[str, ...]) -> str:
    if state not in allowed:
        raise ValueError(f"unknown trial state {state!r}; expected one of {allowed}")
    return state


def _check_count(what: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{what} is a count of at least 0, got {value}")
    return value


class StudyMetrics:
    """One study's series within a job. Every state's trial count exists (at 0) from the start."""

    def __init__(self, families: SearchFamilies, model_type: str, job_id: str, study: str) -> None:
        if not study:
            raise ValueError("a study needs a name (the `study` label)")
        self._f = families
        self.study = study
        self._labels = {"model_type": model_type, "job_id": job_id, "study": study}
        for state in TRIAL_STATES:
            families.trials.labels(**self._labels, state=state).set(0)
        for state in FINISHED_STATES:
            families.trial_epochs.labels(**self._labels, state=state)

    def set_trial_counts(self, counts: Mapping[str, int]) -> None:
        """The study's trials by state; a state left out has none."""
        for state, count in counts.items():
            _check_state(state, TRIAL_STATES)
            _check_count(f"trials {state}", count)
        for state in TRIAL_STATES:
            self._f.trials.labels(**self._labels, state=state).set(counts.get(state, 0))

    def set_best_value(self, value: float) -> None:
        """The best objective value of the study's completed trials so far."""
        self._f.best_value.labels(**self._labels).set(value)

    def trial_started(self, number: int) -> None:
        """This job began trial `number` (at epoch 0; the loss shows the previous trial's until the
        new one reports)."""
        self._f.trial_number.labels(**self._labels).set(_check_count("a trial number", number))
        self._f.trial_epoch.labels(**self._labels).set(0)

    def record_trial_progress(self, number: int, epoch: int, loss: float) -> None:
        """Trial `number` reported `loss` at `epoch` (Optuna's intermediate value at a step)."""
        labels = self._labels
        self._f.trial_number.labels(**labels).set(_check_count("a trial number", number))
        self._f.trial_epoch.labels(**labels).set(_check_count("an epoch", epoch))
        self._f.trial_loss.labels(**labels).set(loss)

    def record_trial_end(self, state: str, epochs: int, value: float | None = None) -> None:
        """A trial of this job ended in `state` after `epochs` epochs; `value`: its objective value
        (a completed trial's; a NaN or missing value leaves the latest objective as it was)."""
        _check_state(state, FINISHED_STATES)
        self._f.trial_epochs.labels(**self._labels, state=state).inc(_check_count("epochs", epochs))
        if state == COMPLETE and value is not None and not math.isnan(value):
            self._f.objective_value.labels(**self._labels).set(value)
