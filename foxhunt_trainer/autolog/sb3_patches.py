"""Stable-Baselines3 with no code: `MetricsCallback` added to every `learn()`.

The algorithms' `learn` (`OnPolicyAlgorithm.learn`: PPO, A2C; `OffPolicyAlgorithm.learn`: DQN,
SAC, TD3, DDPG) gets the integration's callback next to the program's own (a callback, a list, a
function), for an algorithm whose policy steps an optimizer the callback counts
(`sb3.policy_optimizers`: the policy's own, or an actor-critic's critic's). The job's model type,
unless the environment names one, is the algorithm's (`ppo`, `dqn`, `sac`). Every method of the
callback SB3 calls is guarded (`state`).
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ConvertCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from foxhunt_trainer.autolog import job as auto_job
from foxhunt_trainer.autolog.state import STATE, guarded_subclass
from foxhunt_trainer.autolog.switches import SB3
from foxhunt_trainer.integrations.sb3 import MetricsCallback, policy_optimizers

AutoMetricsCallback = guarded_subclass(
    MetricsCallback,
    SB3,
    {
        "_on_training_start": None,
        "_on_rollout_start": None,
        "_on_step": True,  # keep training
        "_on_rollout_end": None,
        "_on_training_end": None,
        "_before_optimizer_step": None,
        "_optimizer_stepped": None,
        "flush": None,
    },
)


def _callback_for(model: BaseAlgorithm) -> MetricsCallback | None:
    if not STATE.on(SB3) or policy_optimizers(model) is None:
        return None
    auto = auto_job.current(hint=type(model).__name__.lower())
    return AutoMetricsCallback(auto.job) if auto is not None else None


def combined(callback: Any, added: BaseCallback) -> BaseCallback:
    """The program's callback argument (None, a callback, a list, a function) with `added`."""
    if callback is None:
        return added
    if isinstance(callback, list):
        return CallbackList([*callback, added])
    if not isinstance(callback, BaseCallback):
        callback = ConvertCallback(callback)
    return CallbackList([callback, added])


def _patch(cls: type[BaseAlgorithm]) -> None:
    original = cls.learn
    signature = inspect.signature(original)

    @functools.wraps(original)
    def learn(self: BaseAlgorithm, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the program's own mistake: SB3 says so
            return original(self, *args, **kwargs)
        try:
            added = _callback_for(self)
            if added is not None:
                bound.arguments["callback"] = combined(bound.arguments.get("callback"), added)
        except Exception as error:
            STATE.failed(SB3, error)
            return original(self, *args, **kwargs)
        STATE.framework_started()  # the policy optimizer's steps are the callback's to count
        try:
            return original(*bound.args, **bound.kwargs)
        except BaseException:
            if added is not None:
                added.flush()  # guarded: the steps taken before the error are counted
            raise
        finally:
            STATE.framework_ended()

    cls.learn = learn  # type: ignore[method-assign]


def install(module: ModuleType) -> None:
    for cls in (OnPolicyAlgorithm, OffPolicyAlgorithm):
        _patch(cls)
