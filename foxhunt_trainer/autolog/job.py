"""The auto-instrumented process's one training job: made at the first sign of training (an
optimizer step, a DataLoader batch, a DistributedDataParallel, a Lightning Trainer, an SB3
`learn()`, an Optuna `optimize()`), served on the job template's port, finished at exit.

- identity: `job_id` from `FOXHUNT_JOB_ID`, else the Kubernetes Job's name the template sets
  (`TRAINING_JOB_NAME`), else the script's name and the process's start time
  (`train-20261202T061502Z`); `model_type` from `FOXHUNT_MODEL_TYPE` (the template sets the
  stack's), else `ml.model_type` in OTEL_RESOURCE_ATTRIBUTES, else the framework's name for it
  (SB3's algorithm: `ppo`, `dqn`), else the script's name. Ranks from torchrun's environment, else
  from the process group the process joined (`RankInfo.of_process`: `torch.multiprocessing.spawn`),
  else from a Lightning trainer made before either (its own launcher: `lightning_patches`).
- the metrics server: base port plus local rank (`FOXHUNT_METRICS_BASE_PORT`, 9094 by default),
  on all interfaces in Kubernetes (`KUBERNETES_SERVICE_HOST` set) and on 127.0.0.1 elsewhere
  (`FOXHUNT_METRICS_ADDRESS` chooses). A port taken is reported and the program runs on.
- the end: at interpreter exit the job finishes "failed" after an unhandled exception (by its type,
  `errors.failure_type`) or a non-zero exit code (`exits`: `sys.exit` and the builtin `exit`, and
  on Python 3.12 and later any SystemExit that leaves the main module; the remediation's exit codes
  count as "nan", any other code as "exception"), "stopped" after SIGTERM or Ctrl-C, else "completed"; the server
  then waits for the final scrape (`MetricsServer.close`). SIGTERM with no handler of the
  program's finishes the job "stopped" as the library does (`foxhunt_trainer.termination`).
- a program that makes its own `TrainingMetrics` (the manual API) is left to it: the auto job's
  server closes at once, freeing the port, and the auto layer records nothing more.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt_trainer.autolog import exits, switches
from foxhunt_trainer.autolog.launch import JOB_ID_ENV
from foxhunt_trainer.autolog.state import STATE
from foxhunt_trainer.trainer_env import JOB_NAME_ENV, MODEL_TYPE_ENV

if TYPE_CHECKING:
    from foxhunt_trainer.ranks import RankInfo
    from foxhunt_trainer.server import MetricsServer
    from foxhunt_trainer.training import JobMetrics, TrainingMetrics

ADDRESS_ENV = "FOXHUNT_METRICS_ADDRESS"
KUBERNETES_ENV = "KUBERNETES_SERVICE_HOST"
RESOURCE_ATTRIBUTES_ENV = "OTEL_RESOURCE_ATTRIBUTES"
MODEL_TYPE_ATTRIBUTE = "ml.model_type"
# Exit codes of the remediation (foxhunt_trainer.launcher.EXIT_CODES): training went non-finite.
_NAN_EXIT_CODES = (80, 81, 82)
STARTED = time.time()

_lock = threading.RLock()
_auto: AutoJob | None = None


def script_name(argv: list[str] | None = None) -> str:
    """The program's name: its script's stem (a package's `__main__` is the package's name)."""
    args = sys.argv if argv is None else argv
    first = args[0] if args else ""
    if not first or first in ("-c", "-"):
        return "python"
    path = Path(first)
    if path.stem == "__main__":
        return path.parent.name or "python"
    return path.stem or "python"


def _resource_model_type(environ: Mapping[str, str]) -> str | None:
    for pair in environ.get(RESOURCE_ATTRIBUTES_ENV, "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == MODEL_TYPE_ATTRIBUTE and value.strip():
            return value.strip()
    return None


def job_identity(hint: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(model_type, job_id) of this process's job (see the module docstring)."""
    env = os.environ if environ is None else environ
    name = script_name()
    model_type = env.get(MODEL_TYPE_ENV, "").strip() or _resource_model_type(env) or hint or name
    started = datetime.datetime.fromtimestamp(STARTED, datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    job_id = env.get(JOB_ID_ENV, "").strip() or env.get(JOB_NAME_ENV, "").strip() or f"{name}-{started}"
    return model_type, job_id


def metrics_address(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    chosen = env.get(ADDRESS_ENV, "").strip()
    if chosen:
        return chosen
    return "0.0.0.0" if env.get(KUBERNETES_ENV) else "127.0.0.1"


class AutoJob:
    """The process's auto-instrumented job, its registry and server."""

    def __init__(self, hint: str | None, rank: RankInfo | None = None) -> None:
        from foxhunt_trainer.ranks import RankInfo
        from foxhunt_trainer.server import MetricsServer, rank_metrics_port
        from foxhunt_trainer.training import TrainingMetrics

        model_type, job_id = job_identity(hint)
        STATE.creating_metrics = True
        try:
            self.metrics: TrainingMetrics = TrainingMetrics()
        finally:
            STATE.creating_metrics = False
        rank = RankInfo.of_process() if rank is None else rank
        self.job: JobMetrics = self.metrics.start_job(model_type, job_id, rank=rank)
        self.server: MetricsServer | None = None
        self._span: Any = None
        self._extensions: dict[str, Any] = {}
        port = rank_metrics_port(self.job.rank.local_rank)
        try:
            self.server = MetricsServer(self.metrics.registry, port, metrics_address())
        except OSError as error:
            sys.stderr.write(f"{switches.PREFIX}: no metrics server on port {port} ({error}): the job is not scraped\n")
        exits.watch()
        # After the server's own exit hook, so this runs first (atexit is last in, first out).
        atexit.register(self.finish_at_exit)
        STATE.on_manual = self.hand_over
        self._start_tracing()

    def extension(self, name: str, make: Callable[[], Any]) -> Any:
        """One object per name for the job's life (the torch integration's, the collective timer)."""
        with _lock:
            if name not in self._extensions:
                self._extensions[name] = make()
            return self._extensions[name]

    def _start_tracing(self) -> None:
        if not STATE.on(switches.TRACING):
            return
        try:
            from foxhunt_trainer.autolog import tracing

            self._span = tracing.start(self.job)
        except Exception as error:
            STATE.failed(switches.TRACING, error)

    def finish_at_exit(self) -> None:
        """Finish the job as the process ends (see the module docstring)."""
        try:
            self._finish_at_exit()
        except Exception as error:
            STATE.failed("job", error)

    def _finish_at_exit(self) -> None:
        from foxhunt_trainer.termination import HANDLER

        job = self.job
        for closing in list(self._extensions.values()):
            close = getattr(closing, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as error:
                    STATE.failed("job", error)
        if not job.finished and not STATE.manual:
            unhandled = getattr(sys, "last_value", None)  # what the interpreter printed a traceback of
            code = exits.exit_code()
            if HANDLER.received or isinstance(unhandled, KeyboardInterrupt):
                job.finish("stopped")
            elif unhandled is not None:
                job.fail(unhandled)
            elif code not in (None, 0):
                job.record_failure("nan" if code in _NAN_EXIT_CODES else "exception")
                job.finish("failed")
            else:
                job.finish("completed")
        if self._span is not None:
            self._span.end()

    def hand_over(self) -> None:
        """The program made its own metrics: free the port at once, record nothing more."""
        if self.server is not None:
            self.server.close(final_scrape_wait=0)


def current(hint: str | None = None, rank: RankInfo | None = None) -> AutoJob | None:
    """The auto job, made now if this is the first sign of training (`rank`: the process's, where
    the framework knows it and nothing else does); None while the program instruments itself or
    the job could not be made (reported once)."""
    global _auto
    if _auto is not None:
        return _auto if not STATE.manual else None
    if not STATE.on("job"):
        return None
    with _lock:
        if _auto is None:
            try:
                _auto = AutoJob(hint, rank)
            except Exception as error:
                STATE.failed("job", error)
                return None
    return _auto if not STATE.manual else None


def existing() -> AutoJob | None:
    """The auto job if it was made (and the program does not instrument itself), else None."""
    return _auto if _auto is not None and not STATE.manual else None
