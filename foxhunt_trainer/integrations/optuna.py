"""Optuna: a study's trials by state, its best value and the progress of each trial, per study.

    import optuna
    from foxhunt_trainer.integrations.optuna import StudyMonitor

    with metrics.job("tft", job_id) as job:
        study = optuna.create_study(study_name="tft-lr", pruner=optuna.pruners.MedianPruner())
        monitor = StudyMonitor(job, study)

        def objective(trial: optuna.Trial) -> float:
            lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
            for epoch in range(epochs):
                loss = train_one_epoch(lr)
                monitor.report(trial, loss, epoch)   # trial.report, and the trial's epoch and loss
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return loss

        monitor.optimize(objective, n_trials=20)    # study.optimize, with the monitor as a callback

The series are the study's (`ml_hpo_*{study}`; `state` on the trial counts), never one per trial:
the trial in progress shows its number, epoch and loss in series the next trial overwrites.
Trial counts and the best value are read from the study's storage, so they are the study's own
(every worker of a study shared through a database reports the same counts). The monitor also
works as a plain callback (`study.optimize(objective, callbacks=[monitor])`): the counts, best value
and finished trials' epochs are then updated after each trial, and the running trial shows once it
reports through `monitor.report`. A trial's non-finite loss is not a NaN detection of the job
(a diverging trial is what a search explores; Optuna fails it). Multi-objective studies have no
single best value: only their trial counts, epochs and losses are exported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from foxhunt_trainer import search
from foxhunt_trainer.training import JobMetrics

# Optuna's trial states, as the `state` label values of `foxhunt_trainer.search`.
STATES: dict[TrialState, str] = {
    TrialState.RUNNING: search.RUNNING,
    TrialState.WAITING: search.WAITING,
    TrialState.COMPLETE: search.COMPLETE,
    TrialState.PRUNED: search.PRUNED,
    TrialState.FAIL: search.FAILED,
}

Objective = Callable[[optuna.Trial], Any]


class StudyMonitor:
    """Exports an Optuna study's trial counts, best value and trial progress into `job`."""

    def __init__(self, job: JobMetrics, study: optuna.Study) -> None:
        self.job = job
        self.study = study
        self.series = job.study(study.study_name)
        self._single_objective = len(study.directions) == 1
        self._reported: set[int] = set()
        self.refresh()

    def refresh(self) -> None:
        """Read the study's trial counts and best value from its storage."""
        trials = self.study.get_trials(deepcopy=False)
        self.series.set_trial_counts(Counter(STATES[t.state] for t in trials))
        if self._single_objective and any(t.state is TrialState.COMPLETE for t in trials):
            self.series.set_best_value(self.study.best_value)

    def report(self, trial: optuna.Trial, value: float, step: int) -> None:
        """`trial.report(value, step)`, and the trial's epoch (`step`) and loss (`value`) exported."""
        trial.report(value, step)
        self.series.record_trial_progress(trial.number, step, value)
        if trial.number not in self._reported:
            self._reported.add(trial.number)
            self.refresh()  # the trial shows as running from its first report

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Optuna's callback after each trial: the trial's end, then the study's counts."""
        self._record_end(trial)
        self.refresh()

    def optimize(
        self,
        func: Objective,
        *,
        catch: Iterable[type[Exception]] | type[Exception] = (),
        callbacks: Iterable[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
        **kwargs: Any,
    ) -> None:
        """`study.optimize(func, ...)` with this monitor among the callbacks; a trial shows as
        running from its start, and a trial whose exception ends the search still counts as failed."""
        caught = tuple(catch) if isinstance(catch, Iterable) else (catch,)

        def monitored(trial: optuna.Trial) -> Any:
            self.series.trial_started(trial.number)
            self.refresh()
            try:
                return func(trial)
            except Exception as error:
                if not isinstance(error, (optuna.TrialPruned, *caught)):
                    # Optuna records the failure and re-raises without calling the callbacks.
                    self._record_failed_by_exception(trial)
                raise

        try:
            self.study.optimize(monitored, catch=caught, callbacks=[self, *(callbacks or ())], **kwargs)
        finally:
            self.refresh()

    def _record_end(self, trial: FrozenTrial) -> None:
        state = STATES[trial.state]
        if state not in search.FINISHED_STATES:
            return
        value = trial.value if self._single_objective and trial.state is TrialState.COMPLETE else None
        self.series.record_trial_end(state, len(trial.intermediate_values), value)

    def _record_failed_by_exception(self, trial: optuna.Trial) -> None:
        frozen = next((t for t in self.study.get_trials(deepcopy=False) if t.number == trial.number), None)
        epochs = len(frozen.intermediate_values) if frozen is not None else 0
        self.series.record_trial_end(search.FAILED, epochs)
