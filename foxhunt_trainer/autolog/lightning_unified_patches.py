"""The `lightning` package's `lightning.pytorch` with no code: its `Trainer` patched as
`pytorch_lightning`'s is (`lightning_patches.patch_trainer`), with the same callback.

The `lightning` package installs `pytorch_lightning` beside it, and a `lightning.pytorch.Trainer`
calls a `pytorch_lightning` callback's hooks as its own. Importing `pytorch_lightning` here first
runs the import hook's patches of it, complete, before this module uses them.
"""

from __future__ import annotations

from types import ModuleType


def install(module: ModuleType) -> None:
    """Patch `lightning.pytorch` (the import hook calls this once it is imported)."""
    import pytorch_lightning  # noqa: F401  (its own patches, through the import hook)

    from foxhunt_trainer.autolog import lightning_patches

    lightning_patches.patch_trainer(module.Trainer)
