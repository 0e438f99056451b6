"""Stable-Baselines3: a callback that exports what DQN, PPO, A2C, SAC, TD3 and DDPG compute, as the
algorithm computes it.

    from foxhunt_trainer.integrations.sb3 import MetricsCallback

    with metrics.job("ppo", job_id) as job:
        model = PPO("MlpPolicy", env)
        model.learn(total_timesteps, callback=MetricsCallback(job))

What it reads, and where from (nothing is recomputed that the algorithm already computed):
- steps: every gradient step: each step of the policy's optimizer (the step hooks of
  `model.policy.optimizer`: DQN, PPO, A2C), or of its critic's, which steps once per gradient
  step beside the actor's (`model.policy.critic.optimizer`: SAC, TD3, DDPG),
  handed to the job at most every `step_batches.RECORD_EVERY_SECONDS` (0.1 s; at a step or a rollout's end) and
  when training ends, with the environment transitions collected since the previous hand-over as
  their samples (`ml_training_samples_total` then follows SB3's `time/total_timesteps`);
- the loss and the policy-update statistics SB3 records into its logger at each `train()`
  (`train/loss` as the step loss, or for an actor-critic `train/critic_loss`, its actor's
  `train/actor_loss` checked for NaN too; PPO and A2C: `train/entropy_loss` as the policy entropy, `train/value_loss`,
  `train/approx_kl`, `train/clip_fraction`, `train/explained_variance`), read when the next rollout
  starts (at most once every `read_every_seconds`, 1 s) and when training ends, before SB3's logger
  clears them at its next dump;
- the learning rate of every optimizer of the policy after each update (an actor-critic's as
  `0.<group>` for the actor, `1.<group>` for the critic), and the global norm of the gradients
  the counted optimizer steps with (after SB3's clipping) every `check_every` optimizer steps; the
  hyperparameters series (batch size, optimizer, precision, constant or scheduled learning rate);
- DQN: the exploration rate (`model.exploration_rate`, what `rollout/exploration_rate` logs) after
  a rollout (with the episodes), and the Q-value of the greedy action on the latest observations, from the
  algorithm's own Q-network, every `q_value_every` environment steps (one forward pass; on a GPU
  one synchronisation) and when training ends;
- episodes: an off-policy algorithm's own count of finished episodes (DQN, SAC, TD3: `_episode_num`),
  else those the environments' `Monitor` wrapper reports (`info["episode"]`), and the mean
  reward and length of the algorithm's episode buffer (`rollout/ep_rew_mean`, `rollout/ep_len_mean`),
  after a rollout (at most once every `read_every_seconds`, and when training ends);
- time: collecting rollouts counts as "data_wait" (the learner waits for experience), updating the
  policy as "compute".
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from torch.utils.hooks import RemovableHandle

from foxhunt_trainer.hyperparameters import UNKNOWN, Hyperparameters
from foxhunt_trainer.integrations.optimizers import gradient_norm, learning_rates, short_name
from foxhunt_trainer.integrations.phase_blocks import PhaseBlocks
from foxhunt_trainer.integrations.step_batches import StepBatches
from foxhunt_trainer.integrations.torch import precision_of
from foxhunt_trainer.phases import COMPUTE, DATA_WAIT
from foxhunt_trainer.training import JobMetrics

# SB3 logger keys of a policy update, and the keyword of `RlMetrics.record_policy_update` each feeds.
UPDATE_KEYS: dict[str, str] = {
    "train/value_loss": "value_loss",
    "train/approx_kl": "approx_kl",
    "train/clip_fraction": "clip_fraction",
    "train/explained_variance": "explained_variance",
}
ENTROPY_LOSS_KEY = "train/entropy_loss"  # minus the mean entropy
LOSS_KEY = "train/loss"
CRITIC_LOSS_KEY = "train/critic_loss"  # an actor-critic's (SAC, TD3, DDPG), which logs no train/loss
ACTOR_LOSS_KEY = "train/actor_loss"
DEFAULT_Q_VALUE_EVERY = 1000
DEFAULT_CHECK_EVERY = 50
# The update statistics and the episode means are read at most this often (and when training ends):
# a scrape every 15 s sees the same, and an algorithm whose rollouts are a few environment steps
# (DQN's train_freq=4) does not pay for a read at every one.
DEFAULT_READ_EVERY_SECONDS = 1.0


def policy_optimizers(model: Any) -> tuple[torch.optim.Optimizer, list[torch.optim.Optimizer]] | None:
    """The optimizer whose steps are the algorithm's gradient steps, and every optimizer of its
    policy (for their learning rates): the policy's one (DQN, PPO, A2C), else its critic's beside
    its actor's (SAC, TD3, DDPG; TD3's actor steps only every `policy_delay` gradient steps);
    None for a policy with neither."""
    policy = getattr(model, "policy", None)
    single = getattr(policy, "optimizer", None)
    if isinstance(single, torch.optim.Optimizer):
        return single, [single]
    critic = getattr(getattr(policy, "critic", None), "optimizer", None)
    if not isinstance(critic, torch.optim.Optimizer):
        return None
    actor = getattr(getattr(policy, "actor", None), "optimizer", None)
    return critic, [actor, critic] if isinstance(actor, torch.optim.Optimizer) else [critic]


class MetricsCallback(BaseCallback):
    """Exports a Stable-Baselines3 run's steps, losses and model-specific values into `job`."""

    def __init__(
        self,
        job: JobMetrics,
        *,
        q_value_every: int = DEFAULT_Q_VALUE_EVERY,
        check_every: int = DEFAULT_CHECK_EVERY,
        read_every_seconds: float = DEFAULT_READ_EVERY_SECONDS,
        verbose: int = 0,
    ) -> None:
        if q_value_every < 1:
            raise ValueError(f"q_value_every is a number of environment steps of at least 1, got {q_value_every}")
        if check_every < 1:
            raise ValueError(f"check_every is a number of optimizer steps of at least 1, got {check_every}")
        if not read_every_seconds >= 0:
            raise ValueError(f"read_every_seconds is a number of seconds of at least 0, got {read_every_seconds}")
        super().__init__(verbose)
        self.job = job
        self.read_every_seconds = read_every_seconds
        self._update_read_at = self._rollout_read_at = -math.inf
        self.q_value_every = q_value_every
        self.check_every = check_every
        self._phases = PhaseBlocks(job)
        self._hooks: list[RemovableHandle] = []
        self._optimizers: list[torch.optim.Optimizer] = []
        self._counted_timesteps = 0
        self._steps = StepBatches(job, check_every)
        self._episodes = 0
        # An off-policy algorithm's own count of finished episodes (`_episode_num`, every
        # environment's): read at the rollout reads instead of each step's infos being searched.
        self._episode_num: int | None = None
        self._q_value_at = 0
        self._updates_read: int | None = None

    # --- SB3's hooks --------------------------------------------------------------------------
    def _on_training_start(self) -> None:
        optimizers = policy_optimizers(self.model)
        if optimizers is None:
            raise TypeError(
                f"{type(self.model).__name__}: MetricsCallback counts the steps of the policy's optimizer "
                "(`model.policy.optimizer`, as DQN, PPO and A2C have) or of its critic's "
                "(`model.policy.critic.optimizer`, as SAC, TD3 and DDPG have); this algorithm has neither"
            )
        optimizer, self._optimizers = optimizers
        self._counted_timesteps = self.model.num_timesteps
        self._q_value_at = self.model.num_timesteps
        self._steps.start()
        # Every algorithm has the attribute; only an off-policy one's collection counts it up.
        episode_num = getattr(self.model, "_episode_num", None)
        counted = isinstance(self.model, OffPolicyAlgorithm) and type(episode_num) is int
        self._episode_num = episode_num if counted else None
        self._updates_read = getattr(self.model, "_n_updates", None)
        self._hooks = [
            optimizer.register_step_pre_hook(self._before_optimizer_step),
            optimizer.register_step_post_hook(self._optimizer_stepped),
        ]
        self.job.set_hyperparameters(self._hyperparameters(optimizer))

    def _on_rollout_start(self) -> None:
        now = time.monotonic()
        if now - self._update_read_at >= self.read_every_seconds:
            self._update_read_at = now
            self._read_update()
        self._phases.switch(DATA_WAIT)

    def _on_step(self) -> bool:
        if self._episode_num is not None:
            return True  # the algorithm counts its episodes (`_read_rollout`)
        infos: list[dict[str, Any]] | None = self.locals.get("infos")
        if infos:
            for info in infos:
                if "episode" in info:
                    self._episodes += 1
        return True

    def _on_rollout_end(self) -> None:
        now = time.monotonic()
        if now - self._rollout_read_at >= self.read_every_seconds:
            self._rollout_read_at = now
            self._read_rollout()
        if self.num_timesteps - self._q_value_at >= self.q_value_every:
            self._read_q_value()
        if self._steps.due():
            self._record_steps()  # the last update's tail, before the next one starts
        self._phases.switch(COMPUTE)

    def _on_training_end(self) -> None:
        try:
            self._record_steps()
            self._read_update()
            self._read_rollout()
            self._read_q_value()
        finally:
            self._phases.close()
            for hook in self._hooks:
                hook.remove()
            self._hooks = []

    # --- reading the algorithm's values -------------------------------------------------------
    def _hyperparameters(self, optimizer: torch.optim.Optimizer) -> Hyperparameters:
        rate = getattr(self.model, "learning_rate", None)
        schedule = "constant" if isinstance(rate, int | float) else short_name(getattr(rate, "__name__", UNKNOWN))
        batch_size = getattr(self.model, "batch_size", None)
        return Hyperparameters(
            batch_size=batch_size if isinstance(batch_size, int) and batch_size > 0 else None,
            optimizer=short_name(type(optimizer).__name__),
            precision=precision_of(self.model.policy),
            lr_schedule=schedule,
        )

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # After SB3 clipped them: the gradients the optimizer steps with (at check steps only).
        if self._steps.step():
            norm = gradient_norm([optimizer])
            if norm is not None:
                self.job.record_gradient_norm(float(norm))

    def _optimizer_stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._steps.due():
            self._record_steps()

    def flush(self) -> None:
        """Hand the optimizer steps not yet counted to the job: what a `learn()` that raised calls
        (SB3 calls no callback hook then; the auto-instrumentation does it by itself)."""
        self._record_steps()

    def _record_steps(self) -> None:
        """Hand the optimizer steps taken since the last call to the job, with the environment
        transitions collected since then as their samples."""
        if self._steps.unrecorded:
            timesteps = self.model.num_timesteps
            self._steps.record(max(timesteps - self._counted_timesteps, 0))
            self._counted_timesteps = timesteps

    def _read_update(self) -> None:
        updates = getattr(self.model, "_n_updates", None)
        if updates == self._updates_read:
            return  # no policy update since the last read: SB3's logger holds the same values
        self._updates_read = updates
        logged: dict[str, Any] = self.model.logger.name_to_value
        loss_key = LOSS_KEY if LOSS_KEY in logged else CRITIC_LOSS_KEY
        if loss_key in logged:
            self.job.record_step_loss(float(logged[loss_key]))
        if ACTOR_LOSS_KEY in logged:
            self.job.check_finite(float(logged[ACTOR_LOSS_KEY]))
        if self._optimizers:
            self.job.set_learning_rates(learning_rates(self._optimizers))
        update = {keyword: float(logged[key]) for key, keyword in UPDATE_KEYS.items() if key in logged}
        if ENTROPY_LOSS_KEY in logged:
            update["entropy"] = -float(logged[ENTROPY_LOSS_KEY])
        if update:
            self.job.rl.record_policy_update(**update)

    def _read_rollout(self) -> None:
        rate = getattr(self.model, "exploration_rate", None)
        if isinstance(rate, float) and hasattr(self.model, "exploration_schedule"):
            self.job.rl.set_exploration_rate(rate)
        if self._episode_num is not None:
            episode_num = getattr(self.model, "_episode_num", self._episode_num)
            finished, self._episode_num = max(episode_num - self._episode_num, 0), episode_num
        else:
            finished, self._episodes = self._episodes, 0
        if not finished:
            return  # the episode buffer changes only when episodes end
        buffer = self.model.ep_info_buffer
        if buffer:  # the means as SB3 computes them (`safe_mean`), to the last bit
            rewards = [float(episode["r"]) for episode in buffer]
            lengths = [float(episode["l"]) for episode in buffer]
            self.job.rl.record_episodes(finished, float(np.mean(rewards)), float(np.mean(lengths)))
        else:
            self.job.rl.record_episodes(finished)

    def _read_q_value(self) -> None:
        q_net = getattr(self.model, "q_net", None)
        observations = getattr(self.model, "_last_obs", None)
        if not isinstance(q_net, torch.nn.Module) or observations is None:
            return
        self._q_value_at = self.num_timesteps
        with torch.no_grad():
            tensor, _ = self.model.policy.obs_to_tensor(observations)
            value = float(q_net(tensor).max(dim=1).values.mean())
        self.job.rl.set_q_value(value)
        self.job.check_finite(value, "activation")
