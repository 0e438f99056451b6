"""Reinforcement-learning series of a training job: exploration, Q-values, policy updates, episodes.

Framework-free: `integrations.sb3` feeds it from Stable-Baselines3's own values, and any other RL
loop can call it directly (`job.rl.set_exploration_rate(epsilon)`). Every series is per job
(`catalog.JOB`); nothing is labelled by step or episode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Metric


class RlFamilies:
    """The reinforcement-learning families of one `TrainingMetrics` registry."""

    def __init__(self, gauge: Callable[[Metric], Gauge], counter: Callable[[Metric], Counter]) -> None:
        self.exploration_rate = gauge(catalog.RL_EXPLORATION_RATE)
        self.q_value = gauge(catalog.RL_Q_VALUE)
        self.policy_entropy = gauge(catalog.RL_POLICY_ENTROPY)
        self.value_loss = gauge(catalog.RL_VALUE_LOSS)
        self.approx_kl = gauge(catalog.RL_APPROX_KL)
        self.clip_fraction = gauge(catalog.RL_CLIP_FRACTION)
        self.explained_variance = gauge(catalog.RL_EXPLAINED_VARIANCE)
        self.episode_reward = gauge(catalog.RL_EPISODE_REWARD)
        self.episode_length = gauge(catalog.RL_EPISODE_LENGTH)
        self.episodes = counter(catalog.RL_EPISODES_TOTAL)


def _ratio(name: str, value: float) -> float:
    if not 0 <= value <= 1:  # NaN fails too
        raise ValueError(f"{name} is a ratio 0-1, got {value}")
    return value


class RlMetrics:
    """One job's reinforcement-learning series. Values are set as given (a NaN Q-value or value
    loss shows as NaN: the network diverged); ratios outside 0-1 are refused."""

    def __init__(self, families: RlFamilies, model_type: str, job_id: str) -> None:
        self._f = families
        self._labels = {"model_type": model_type, "job_id": job_id}
        # The job's child of each family, looked up once: a callback sets some every rollout, and
        # prometheus-client's `labels()` costs microseconds a call.
        self._children: dict[int, Any] = {}
        # At 0 from the first scrape, so the first episodes are an increase.
        self._child(families.episodes)

    def _child(self, family: Any) -> Any:
        child = self._children.get(id(family))
        if child is None:
            child = self._children[id(family)] = family.labels(**self._labels)
        return child

    def set_exploration_rate(self, rate: float) -> None:
        """The probability of a random action now (DQN's epsilon)."""
        self._child(self._f.exploration_rate).set(_ratio("the exploration rate", rate))

    def set_q_value(self, value: float) -> None:
        """The greedy action's predicted value, averaged over the latest observations."""
        self._child(self._f.q_value).set(value)

    def record_policy_update(
        self,
        *,
        entropy: float | None = None,
        value_loss: float | None = None,
        approx_kl: float | None = None,
        clip_fraction: float | None = None,
        explained_variance: float | None = None,
    ) -> None:
        """The statistics of one policy update (PPO's train step); None leaves a series as it was."""
        f = self._f
        if clip_fraction is not None:
            _ratio("the clip fraction", clip_fraction)
        for gauge, value in (
            (f.policy_entropy, entropy),
            (f.value_loss, value_loss),
            (f.approx_kl, approx_kl),
            (f.clip_fraction, clip_fraction),
            (f.explained_variance, explained_variance),
        ):
            if value is not None:
                self._child(gauge).set(value)

    def record_episodes(
        self, finished: int, mean_reward: float | None = None, mean_length: float | None = None
    ) -> None:
        """`finished` more episodes ended; the mean reward and length of the latest episodes."""
        if finished < 0:
            raise ValueError(f"finished episodes are a count of at least 0, got {finished}")
        if mean_length is not None and not (math.isfinite(mean_length) and mean_length >= 0):
            raise ValueError(f"a mean episode length is a number of steps of at least 0, got {mean_length}")
        f = self._f
        if finished:
            self._child(f.episodes).inc(finished)
        if mean_reward is not None:
            self._child(f.episode_reward).set(mean_reward)
        if mean_length is not None:
            self._child(f.episode_length).set(mean_length)
