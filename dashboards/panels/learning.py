"""Learning panels: loss, validation loss, the optimizer's state and the model's quality scores
(classification ratios, regression errors), per job. `model` is the dashboard's model-type matcher;
`job` the matchers of one job."""

from __future__ import annotations

from dashboards.panels import (
    GREEN,
    JOB_LEGEND,
    RED,
    YELLOW,
    ColourSteps,
    Common,
    PanelBuilder,
    Query,
    gauge,
    prometheus_table,
    timeseries,
)
from dashboards.panels.training import per_job
from foxhunt_trainer.contract import catalog
from observability import promql

ACCURACY = ColourSteps(RED, ((0.85, YELLOW), (0.90, GREEN)))  # red <0.85, yellow 0.85-0.90, green >0.90


def epoch_loss(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Epoch Loss and Validation Loss",
            "Training loss (solid) and validation loss (dashed) of each job's latest epoch: there from the "
            "first epoch, also for a job that dies in its first fold.",
            "none",
            w=w,
        ),
        [
            Query(promql.gauge(catalog.TRAINING_LOSS, (model,)), f"{JOB_LEGEND} loss"),
            Query(promql.gauge(catalog.TRAINING_VALIDATION_LOSS, (model,)), f"{JOB_LEGEND} validation"),
        ],
        dashed_refs=("B",),
    )


def mean_loss_by_model_type(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common("Training Loss Curves", "Mean training loss of every model type, overlaid.", "none", w=w),
        [
            Query(
                promql.aggregate("avg", ("model_type",), promql.gauge(catalog.TRAINING_LOSS, (model,))),
                "{{model_type}}",
            )
        ],
    )


def loss_curves(model: str, *, w: int, h: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Training Loss Curves",
            "Training loss of every job of the selected model types (MAMBA-2, DQN, PPO, TFT).",
            "none",
            w=w,
            h=h,
        ),
        [Query(promql.gauge(catalog.TRAINING_LOSS, (model,)), JOB_LEGEND)],
    )


def validation_against_training_loss(job: tuple[str, ...], *, w: int, h: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Validation Loss Curves",
            "Validation loss (solid) against training loss (dashed): a widening gap means overfitting.",
            "none",
            w=w,
            h=h,
        ),
        [
            Query(promql.gauge(catalog.TRAINING_VALIDATION_LOSS, job), f"{JOB_LEGEND} validation"),
            Query(promql.gauge(catalog.TRAINING_LOSS, job), f"{JOB_LEGEND} training"),
        ],
        dashed_refs=("B",),
    )


def convergence_rate(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return per_job(
        "Model Convergence Rate",
        "Change of the training loss per epoch; negative means improving.",
        catalog.TRAINING_CONVERGENCE_RATE,
        "none",
        job,
        w=w,
    )


def loss_per_step(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return per_job(
        "Loss per Step",
        "Mean training loss of $job_id over the steps between two checks of the PyTorch integration "
        "(per epoch: Epoch Loss and Validation Loss).",
        catalog.TRAINING_STEP_LOSS,
        "none",
        job,
        w=w,
        legend="{{job_id}} step loss",
    )


def learning_rate(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return per_job(
        "Learning Rate",
        "Learning rate of each optimizer parameter group of $job_id.",
        catalog.TRAINING_LEARNING_RATE,
        "none",
        job,
        w=w,
        min=0,
        legend="{{job_id}} {{param_group}}",
    )


def gradient_norm(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return per_job(
        "Gradient Norm",
        "Global L2 norm of $job_id's gradients at each check: spikes precede divergence, a collapse "
        "to zero means vanishing gradients.",
        catalog.TRAINING_GRADIENT_NORM,
        "none",
        job,
        w=w,
        min=0,
        legend="{{job_id}}",
    )


def hyperparameters(model: str, *, w: int) -> PanelBuilder:
    return prometheus_table(
        Common(
            "Hyperparameters",
            "Batch size, optimizer, precision and learning-rate schedule of the jobs: compare throughput "
            "and loss across them.",
            "none",
            w=w,
        ),
        [Query(promql.gauge(catalog.TRAINING_HYPERPARAMETERS_INFO, (model,)), instant=True, format="table")],
        hidden_columns=("Value", "__name__", "instance", "job", "pod", "service"),
    )


def _quality(title: str, metric: catalog.Metric, model: str, w: int) -> PanelBuilder:
    return per_job(title, f"{metric.help} Per job.", metric, "percentunit", (model,), w=w, min=0, max=1)


def accuracy(model: str, *, w: int) -> PanelBuilder:
    return _quality("Accuracy", catalog.MODEL_ACCURACY, model, w)


def f1_score(model: str, *, w: int) -> PanelBuilder:
    return _quality("F1 Score", catalog.MODEL_F1_SCORE, model, w)


def precision(model: str, *, w: int) -> PanelBuilder:
    return _quality("Precision", catalog.MODEL_PRECISION, model, w)


def recall(model: str, *, w: int) -> PanelBuilder:
    return _quality("Recall", catalog.MODEL_RECALL, model, w)


def accuracy_gauge(job: tuple[str, ...], *, w: int) -> PanelBuilder:
    return gauge(
        Common(
            "Model Accuracy Gauge",
            "Validation accuracy: red below 0.85, yellow to 0.90, green above.",
            "percentunit",
            w=w,
            min=0,
            max=1,
            thresholds=ACCURACY,
        ),
        [Query(promql.gauge(catalog.MODEL_ACCURACY, job), JOB_LEGEND)],
    )


def regression_error(model: str, *, w: int) -> PanelBuilder:
    return timeseries(
        Common(
            "Regression Error (RMSE, MAE)",
            "Root mean squared error (solid) and mean absolute error (dashed) of each regression job on its "
            "validation set, in the target's unit: falling while the model learns; RMSE well above MAE means a "
            "few large errors.",
            "none",
            w=w,
            min=0,
        ),
        [
            Query(promql.gauge(catalog.MODEL_RMSE, (model,)), f"{JOB_LEGEND} RMSE"),
            Query(promql.gauge(catalog.MODEL_MAE, (model,)), f"{JOB_LEGEND} MAE"),
        ],
        dashed_refs=("B",),
    )


def r2_score(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "R² Score", f"{catalog.MODEL_R2_SCORE.help} Per job.", catalog.MODEL_R2_SCORE, "none", (model,), w=w, max=1
    )
