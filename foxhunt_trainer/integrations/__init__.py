"""Framework integrations of the trainer library, one module per framework.

Importing this package imports no framework: each module imports its own (PyTorch,
Stable-Baselines3, PyTorch Lightning, Optuna) and is imported only by the training code that uses
it, e.g. `from foxhunt_trainer.integrations.torch import watch`.
"""
