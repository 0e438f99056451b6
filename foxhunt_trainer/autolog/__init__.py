"""Zero lines to instrument: a training program reports itself without a change.

    foxhunt-run python train.py          # the program unchanged (the job template does this)

or, in a notebook or a program that wants it in code, before or after importing the frameworks:

    from foxhunt_trainer.autolog import autolog
    autolog()

PyTorch (optimizer steps, DataLoader timing, the loss `backward()` is called on, torch.save as a
checkpoint, DistributedDataParallel and collectives), PyTorch Lightning (the callback on every
Trainer), Stable-Baselines3 (the callback on every `learn()`) and Optuna (every
`Study.optimize`) are patched when the program first imports them (`importer`), into one job
per process (`job`). Every patch is exception-safe (`state`); switches in `switches`.
Importing this package imports no framework and nothing outside the standard library.
"""

from __future__ import annotations

from foxhunt_trainer.autolog import switches


def autolog() -> None:
    """Instrument this process as `foxhunt-run` would (the environment's switches apply);
    frameworks imported already are patched now, the others when imported. Idempotent."""
    from foxhunt_trainer.autolog import importer

    importer.install(switches.read())


__all__ = ["autolog"]
