"""Hyperparameter search panels (Optuna studies): trials by state, the best and latest objective,
the epochs pruning saved and the trial each worker runs. `model` is the dashboard's model-type
matcher."""

from __future__ import annotations

from dashboards.panels import Common, PanelBuilder, Query, timeseries
from dashboards.panels.training import per_job
from foxhunt_trainer.contract import catalog
from observability import promql

STUDY_LEGEND = "{{study}} {{job_id}}"
PER_STUDY_STATE = ("model_type", "study", "state")


def trials_by_state(model: str, *, w: int) -> PanelBuilder:
    # Every worker of a shared study reports the study's own counts: the max is the study's.
    trials = promql.aggregate("max", PER_STUDY_STATE, promql.gauge(catalog.HPO_TRIALS, (model,)))
    return timeseries(
        Common(
            "Trials by State",
            "Trials of each study by state (running, waiting, complete, pruned, failed), as the study's "
            "storage holds them.",
            "short",
            w=w,
            min=0,
        ),
        [Query(trials, "{{study}} {{state}}")],
        stacked=True,
    )


def best_and_latest_objective(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Best and Latest Objective",
            "Best objective value of each study so far (solid) and the latest completed trial's value (dashed).",
            "none",
            w=w,
        ),
        [
            Query(promql.gauge(catalog.HPO_BEST_VALUE, (model,)), f"{STUDY_LEGEND} best"),
            Query(promql.gauge(catalog.HPO_OBJECTIVE_VALUE, (model,)), f"{STUDY_LEGEND} latest"),
        ],
        dashed_refs=("B",),
    )


def epochs_by_trial_end(model: str, *, w: int) -> PanelBuilder:
    epochs = promql.aggregate("sum", PER_STUDY_STATE, promql.increase(catalog.HPO_TRIAL_EPOCHS_TOTAL, (model,)))
    return timeseries(
        Common(
            "Epochs by Trial End",
            "Epochs of the trials that ended in each interval, by how they ended: pruned epochs are the "
            "ones pruning cut short.",
            "short",
            w=w,
            min=0,
        ),
        [Query(epochs, "{{study}} {{state}}")],
        bars=True,
        stacked=True,
        fill_opacity=60,
    )


def trial_in_progress(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Trial in Progress",
        "Number of the trial each job runs now (or ran last).",
        catalog.HPO_TRIAL_NUMBER,
        "short",
        (model,),
        w=w,
        min=0,
        legend=STUDY_LEGEND,
    )


def trial_epoch(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Trial Epoch",
        "Latest epoch the trial in progress reported.",
        catalog.HPO_TRIAL_EPOCH,
        "short",
        (model,),
        w=w,
        min=0,
        legend=STUDY_LEGEND,
    )


def trial_loss(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Trial Loss",
        "Latest loss the trial in progress reported (the value the pruner judges it by); each "
        "trial's curve follows the previous one's.",
        catalog.HPO_TRIAL_LOSS,
        "none",
        (model,),
        w=w,
        legend=STUDY_LEGEND,
    )
