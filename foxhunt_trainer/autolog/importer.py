"""The import hook: each framework's patches applied right after the program first imports it.

A finder first on `sys.meta_path` answers only for the frameworks in `PATCHES` that are not
imported yet: it asks the other finders for the real module spec and wraps its loader, so the
module executes as it would, and its patches are applied once it has (in whatever order the
program imports the frameworks, and never for one it does not import: nothing here imports a
framework). A framework imported already when the hook is installed (`autolog()` called late) is
patched at once. Standard library only.

The patches build on the trainer library's integration modules, and those import their framework:
a program that imports one first (`from foxhunt_trainer.integrations.torch import watch`, before
`import torch`) imports the framework from inside it. Patches due while an integration module is
still executing wait until it has (`_OwnModuleLoader`), so they never meet it half-initialised.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from foxhunt_trainer.autolog import switches
from foxhunt_trainer.autolog.state import STATE

# Module -> (the integration it belongs to, the module whose `install(module)` patches it).
PATCHES: dict[str, tuple[str, str]] = {
    "torch": (switches.TORCH, "foxhunt_trainer.autolog.torch_patches"),
    "pytorch_lightning": (switches.LIGHTNING, "foxhunt_trainer.autolog.lightning_patches"),
    "lightning.pytorch": (switches.LIGHTNING, "foxhunt_trainer.autolog.lightning_unified_patches"),
    "stable_baselines3": (switches.SB3, "foxhunt_trainer.autolog.sb3_patches"),
    "optuna": (switches.OPTUNA, "foxhunt_trainer.autolog.optuna_patches"),
}
# torch's patches also carry torch.distributed's (switched by DISTRIBUTED): on when either is.
_ALSO_ON = {switches.TORCH: (switches.DISTRIBUTED,)}

# The trainer library's modules that import a framework: their loaders are wrapped too.
OWN_MODULES = "foxhunt_trainer.integrations."

_lock = threading.Lock()
_pending: set[str] = set()
_deferred: list[tuple[str, ModuleType]] = []  # framework imports patched once `_own_executing` is 0
_own_executing = 0  # integration modules executing now (nested)


def _wanted(integration: str) -> bool:
    return any(STATE.switches.on(name) for name in (integration, *_ALSO_ON.get(integration, ())))


def apply(name: str, module: ModuleType) -> None:
    """Patch the just-imported framework `name` (once); a failure turns its integration off.
    While one of the library's integration modules is executing, the patch waits for it."""
    with _lock:
        if name not in _pending:
            return
        if _own_executing:
            _deferred.append((name, module))
            return
        _pending.discard(name)
    integration, patches = PATCHES[name]
    try:
        importlib.import_module(patches).install(module)
    except Exception as error:
        STATE.failed(integration, error)


class _PatchingLoader(importlib.abc.Loader):
    """The framework's own loader; the patches run after it executed the module."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner, self._name = inner, name

    def __getattr__(self, attribute: str) -> Any:  # get_source, is_package, get_resource_reader...
        return getattr(self._inner, attribute)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None and spec.loader is self:
            spec.loader = self._inner  # the module looks as it would without the hook
        module.__loader__ = self._inner
        self._inner.exec_module(module)
        apply(self._name, module)


class _OwnModuleLoader(_PatchingLoader):
    """An integration module's own loader; the patches that fell due while it executed run after it."""

    def exec_module(self, module: ModuleType) -> None:
        global _own_executing
        spec = module.__spec__
        if spec is not None and spec.loader is self:
            spec.loader = self._inner
        module.__loader__ = self._inner
        with _lock:
            _own_executing += 1
        try:
            self._inner.exec_module(module)
        finally:
            with _lock:
                _own_executing -= 1
                due = list(_deferred) if not _own_executing else []
                if due:
                    _deferred.clear()
            for name, framework in due:
                apply(name, framework)


class PatchingFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        own = fullname.startswith(OWN_MODULES)
        if not own and fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = (_OwnModuleLoader if own else _PatchingLoader)(spec.loader, fullname)
                return spec
        return None


FINDER = PatchingFinder()


def install(chosen: switches.Switches) -> None:
    """Start the auto-instrumentation with `chosen` (idempotent: the first call's switches hold)."""
    if chosen.error is not None:
        print(f"{switches.PREFIX}: {chosen.error}", file=sys.stderr)
        return
    if not chosen.enabled:
        return
    with _lock:
        if STATE.installed:
            return
        STATE.switches, STATE.installed = chosen, True
        STATE.refresh()
        wanted = {name for name, (integration, _) in PATCHES.items() if _wanted(integration)}
        _pending.update(wanted)
        if FINDER not in sys.meta_path:
            sys.meta_path.insert(0, FINDER)
    for name in sorted(wanted):
        module = sys.modules.get(name)
        if module is not None:  # imported before the hook (autolog() called after the imports)
            apply(name, module)


def install_from_environment() -> None:
    """What the bootstrap `sitecustomize` calls: the switches from the environment."""
    try:
        install(switches.read())
    except Exception as error:
        STATE.failed("import hook", error)
