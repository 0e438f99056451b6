"""Started by Python in every process whose PYTHONPATH `foxhunt-run` (or `foxhunt-torchrun`) set:
installs the auto-instrumentation's import hook (`foxhunt_trainer.autolog.importer`), then runs the
`sitecustomize` that this one shadows, if there is one further along the path.

Never stops the program: a trainer library that cannot be imported here (another interpreter, a
broken install) is reported in one line on stderr and the program runs uninstrumented.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    try:
        from foxhunt_trainer.autolog import importer
    except Exception as error:
        sys.stderr.write(
            f"foxhunt-autolog: the trainer library cannot be imported by {sys.executable} ({error!r}): "
            "the program runs uninstrumented\n"
        )
        return
    importer.install_from_environment()


def _chain() -> None:
    """Run the next `sitecustomize` on the path (the image's or the environment's own)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_start()
_chain()
