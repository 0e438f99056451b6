"""Training cockpit rows of specific workloads: reinforcement learning (DQN, PPO) and
hyperparameter search. Each panel draws one catalog family per job (or per study), filtered by
the cockpit's `$model` variable."""

from __future__ import annotations

from dashboards import panels
from dashboards.layout import Row
from dashboards.panels import Common, Query
from observability import catalog, promql

MODEL = promql.variable_matcher("model_type", "model")
JOB_LEGEND = "{{model_type}} {{job_id}}"
STUDY_LEGEND = "{{study}} {{job_id}}"


def _per_job(
    title: str,
    description: str,
    metric: catalog.Metric,
    unit: str,
    w: int,
    min: float | None = None,
    max: float | None = None,
) -> panels.PanelBuilder:
    return panels.timeseries(
        Common(title, description, unit, w=w, min=min, max=max), [Query(promql.gauge(metric, (MODEL,)), JOB_LEGEND)]
    )


def reinforcement_learning() -> Row:
    episodes_per_minute = promql.aggregate(
        "sum", ("model_type", "job_id"), promql.rate(catalog.RL_EPISODES_TOTAL, (MODEL,))
    )
    return Row(
        "Reinforcement Learning (DQN, PPO)",
        [
            _per_job(
                "Episode Reward",
                "Mean total reward of each job's latest episodes (the last 100 by default): the learning curve.",
                catalog.RL_EPISODE_REWARD,
                "none",
                8,
            ),
            _per_job(
                "Episode Length",
                "Mean length in environment steps of each job's latest episodes.",
                catalog.RL_EPISODE_LENGTH,
                "short",
                8,
                min=0,
            ),
            panels.timeseries(
                Common("Episodes per Minute", "Episodes each job completes per minute.", "short", w=8, min=0),
                [Query(f"60 * {episodes_per_minute}", JOB_LEGEND)],
            ),
            _per_job(
                "Exploration Rate (DQN)",
                "Probability that the epsilon-greedy policy acts at random now; it decays on the algorithm's schedule.",
                catalog.RL_EXPLORATION_RATE,
                "percentunit",
                6,
                min=0,
                max=1,
            ),
            _per_job(
                "Q-Value (DQN)",
                "Predicted value of the greedy action on the latest observations; a value that keeps growing "
                "past what the rewards allow is overestimation or divergence.",
                catalog.RL_Q_VALUE,
                "none",
                6,
            ),
            _per_job(
                "Policy Entropy (PPO)",
                "Entropy of the policy's action distribution; a collapse to 0 early means the policy stopped "
                "exploring.",
                catalog.RL_POLICY_ENTROPY,
                "none",
                6,
                min=0,
            ),
            _per_job(
                "Value Loss (PPO)",
                "Value-function loss of the latest policy update.",
                catalog.RL_VALUE_LOSS,
                "none",
                6,
                min=0,
            ),
            _per_job(
                "Approximate KL (PPO)",
                "How far each policy update moved the policy; spikes mean updates too large for the clip range.",
                catalog.RL_APPROX_KL,
                "none",
                8,
                min=0,
            ),
            _per_job(
                "Clip Fraction (PPO)",
                "Share of samples whose probability ratio was clipped in the latest policy update.",
                catalog.RL_CLIP_FRACTION,
                "percentunit",
                8,
                min=0,
                max=1,
            ),
            _per_job(
                "Explained Variance",
                "Share of the returns' variance the value function explains (1 is perfect, 0 or less predicts "
                "nothing).",
                catalog.RL_EXPLAINED_VARIANCE,
                "none",
                8,
                max=1,
            ),
        ],
    )


def hyperparameter_search() -> Row:
    per_study_state = ("model_type", "study", "state")
    # Every worker of a shared study reports the study's own counts: the max is the study's.
    trials = promql.aggregate("max", per_study_state, promql.gauge(catalog.HPO_TRIALS, (MODEL,)))
    epochs = promql.aggregate("sum", per_study_state, promql.increase(catalog.HPO_TRIAL_EPOCHS_TOTAL, (MODEL,)))
    return Row(
        "Hyperparameter Search",
        [
            panels.timeseries(
                Common(
                    "Trials by State",
                    "Trials of each study by state (running, waiting, complete, pruned, failed), as the study's "
                    "storage holds them.",
                    "short",
                    w=8,
                    min=0,
                ),
                [Query(trials, "{{study}} {{state}}")],
                stacked=True,
            ),
            panels.timeseries(
                Common(
                    "Best and Latest Objective",
                    "Best objective value of each study so far (solid) and the latest completed trial's value "
                    "(dashed).",
                    "none",
                    w=8,
                ),
                [
                    Query(promql.gauge(catalog.HPO_BEST_VALUE, (MODEL,)), f"{STUDY_LEGEND} best"),
                    Query(promql.gauge(catalog.HPO_OBJECTIVE_VALUE, (MODEL,)), f"{STUDY_LEGEND} latest"),
                ],
                dashed_refs=("B",),
            ),
            panels.timeseries(
                Common(
                    "Epochs by Trial End",
                    "Epochs of the trials that ended in each interval, by how they ended: pruned epochs are the "
                    "ones pruning cut short.",
                    "short",
                    w=8,
                    min=0,
                ),
                [Query(epochs, "{{study}} {{state}}")],
                bars=True,
                stacked=True,
                fill_opacity=60,
            ),
            panels.timeseries(
                Common(
                    "Trial in Progress", "Number of the trial each job runs now (or ran last).", "short", w=6, min=0
                ),
                [Query(promql.gauge(catalog.HPO_TRIAL_NUMBER, (MODEL,)), STUDY_LEGEND)],
            ),
            panels.timeseries(
                Common("Trial Epoch", "Latest epoch the trial in progress reported.", "short", w=6, min=0),
                [Query(promql.gauge(catalog.HPO_TRIAL_EPOCH, (MODEL,)), STUDY_LEGEND)],
            ),
            panels.timeseries(
                Common(
                    "Trial Loss",
                    "Latest loss the trial in progress reported (the value the pruner judges it by); each "
                    "trial's curve follows the previous one's.",
                    "none",
                    w=12,
                ),
                [Query(promql.gauge(catalog.HPO_TRIAL_LOSS, (MODEL,)), STUDY_LEGEND)],
            ),
        ],
    )
