"""Optuna with no code: every `Study.optimize` monitored, every `Trial.report` exported.

`study.optimize(objective, ...)` runs with what `StudyMonitor.optimize` adds: a trial shows as
running from its start, the trial counts by state and the best value are read from the study's
storage after each trial, and a trial whose exception ends the search still counts as failed;
`trial.report(value, step)` also exports the trial's epoch and loss (what `StudyMonitor.report`
does). Each of these is guarded (`state`): the objective's own results and exceptions are
Optuna's as they would be.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from foxhunt_trainer.autolog import job as auto_job
from foxhunt_trainer.autolog.state import STATE, guarded
from foxhunt_trainer.autolog.switches import OPTUNA
from foxhunt_trainer.integrations.optuna import StudyMonitor

MONITORS: weakref.WeakKeyDictionary[optuna.Study, StudyMonitor] = weakref.WeakKeyDictionary()
_inside: list[bool] = []  # a monitored optimize is running (StudyMonitor.optimize calls optimize)


@guarded(OPTUNA)
def _monitor(study: optuna.Study) -> StudyMonitor | None:
    auto = auto_job.current()
    if auto is None:
        return None
    monitor = MONITORS.get(study)
    if monitor is None:
        monitor = MONITORS[study] = StudyMonitor(auto.job, study)
    return monitor


@guarded(OPTUNA)
def _trial_started(monitor: StudyMonitor, trial: optuna.Trial) -> None:
    monitor.series.trial_started(trial.number)
    monitor.refresh()


@guarded(OPTUNA)
def _trial_failed(monitor: StudyMonitor, trial: optuna.Trial) -> None:
    monitor._record_failed_by_exception(trial)


@guarded(OPTUNA)
def _trial_ended(monitor: StudyMonitor, study: optuna.Study, trial: FrozenTrial) -> None:
    monitor(study, trial)


@guarded(OPTUNA)
def _refresh(monitor: StudyMonitor) -> None:
    monitor.refresh()


def _patch_optimize() -> None:
    original = optuna.study.Study.optimize
    signature = inspect.signature(original)

    @functools.wraps(original)
    def optimize(self: optuna.Study, *args: Any, **kwargs: Any) -> None:
        monitor = _monitor(self) if not _inside and STATE.on(OPTUNA) else None
        try:
            bound = signature.bind(self, *args, **kwargs) if monitor is not None else None
        except TypeError:
            bound = None
        if monitor is None or bound is None:
            return original(self, *args, **kwargs)
        func: Callable[[optuna.Trial], Any] = bound.arguments["func"]
        catch = bound.arguments.get("catch", ())
        caught = tuple(catch) if isinstance(catch, Iterable) else (catch,)

        def monitored(trial: optuna.Trial) -> Any:
            _trial_started(monitor, trial)
            try:
                return func(trial)
            except Exception as error:
                if not isinstance(error, (optuna.TrialPruned, *caught)):
                    _trial_failed(monitor, trial)  # Optuna re-raises it without calling the callbacks
                raise

        def ended(study: optuna.Study, trial: FrozenTrial) -> None:
            _trial_ended(monitor, study, trial)

        bound.arguments["func"] = monitored
        bound.arguments["callbacks"] = [*(bound.arguments.get("callbacks") or ()), ended]
        _inside.append(True)
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            _inside.pop()
            _refresh(monitor)

    optuna.study.Study.optimize = optimize  # type: ignore[method-assign]


def _patch_report() -> None:
    original = optuna.trial.Trial.report

    @functools.wraps(original)
    def report(self: optuna.Trial, value: float, step: int) -> None:
        original(self, value, step)
        _reported(self, value, step)

    optuna.trial.Trial.report = report  # type: ignore[method-assign]


@guarded(OPTUNA)
def _reported(trial: optuna.Trial, value: float, step: int) -> None:
    monitor = MONITORS.get(trial.study) if auto_job.existing() is not None else None
    if monitor is None:
        return
    monitor.series.record_trial_progress(trial.number, step, value)
    if trial.number not in monitor._reported:
        monitor._reported.add(trial.number)
        monitor.refresh()


def install(module: ModuleType) -> None:
    _patch_optimize()
    _patch_report()
