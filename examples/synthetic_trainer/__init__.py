"""A synthetic DQN/PPO-like trainer instrumented with `foxhunt_trainer`.

It trains nothing: loss curves, folds, data loading and checkpoints are simulated (checkpoints
are real files), so dashboards and alerts can be exercised without a GPU. Faults on demand:
a NaN loss, a failed checkpoint save, a slowdown, by schedule (flags) or by signal
(SIGUSR1: NaN in the next epoch, SIGUSR2: the next checkpoint save fails).
"""
