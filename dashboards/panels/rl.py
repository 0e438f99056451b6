"""Reinforcement learning panels (DQN, PPO, as the Stable-Baselines3 integration reports them):
one catalog family per job. `model` is the dashboard's model-type matcher."""

from __future__ import annotations

from dashboards.panels import JOB_LEGEND, Common, PanelBuilder, Query, timeseries
from dashboards.panels.training import per_job
from foxhunt_trainer.contract import catalog
from observability import promql


def episode_reward(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Episode Reward",
        "Mean total reward of each job's latest episodes (the last 100 by default): the learning curve.",
        catalog.RL_EPISODE_REWARD,
        "none",
        (model,),
        w=w,
    )


def episode_length(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Episode Length",
        "Mean length in environment steps of each job's latest episodes.",
        catalog.RL_EPISODE_LENGTH,
        "short",
        (model,),
        w=w,
        min=0,
    )


def episodes_per_minute(model: str, *, w: int) -> PanelBuilder:
    per_second = promql.aggregate("sum", ("model_type", "job_id"), promql.rate(catalog.RL_EPISODES_TOTAL, (model,)))
    return timeseries(
        Common("Episodes per Minute", "Episodes each job completes per minute.", "short", w=w, min=0),
        [Query(f"60 * {per_second}", JOB_LEGEND)],
    )


def exploration_rate(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Exploration Rate (DQN)",
        "Probability that the epsilon-greedy policy acts at random now; it decays on the algorithm's schedule.",
        catalog.RL_EXPLORATION_RATE,
        "percentunit",
        (model,),
        w=w,
        min=0,
        max=1,
    )


def q_value(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Q-Value (DQN)",
        "Predicted value of the greedy action on the latest observations; a value that keeps growing "
        "past what the rewards allow is overestimation or divergence.",
        catalog.RL_Q_VALUE,
        "none",
        (model,),
        w=w,
    )


def policy_entropy(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Policy Entropy (PPO)",
        "Entropy of the policy's action distribution; a collapse to 0 early means the policy stopped exploring.",
        catalog.RL_POLICY_ENTROPY,
        "none",
        (model,),
        w=w,
        min=0,
    )


def value_loss(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Value Loss (PPO)",
        "Value-function loss of the latest policy update.",
        catalog.RL_VALUE_LOSS,
        "none",
        (model,),
        w=w,
        min=0,
    )


def approx_kl(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Approximate KL (PPO)",
        "How far each policy update moved the policy; spikes mean updates too large for the clip range.",
        catalog.RL_APPROX_KL,
        "none",
        (model,),
        w=w,
        min=0,
    )


def clip_fraction(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Clip Fraction (PPO)",
        "Share of samples whose probability ratio was clipped in the latest policy update.",
        catalog.RL_CLIP_FRACTION,
        "percentunit",
        (model,),
        w=w,
        min=0,
        max=1,
    )


def explained_variance(model: str, *, w: int) -> PanelBuilder:
    return per_job(
        "Explained Variance",
        "Share of the returns' variance the value function explains (1 is perfect, 0 or less predicts nothing).",
        catalog.RL_EXPLAINED_VARIANCE,
        "none",
        (model,),
        w=w,
        max=1,
    )
