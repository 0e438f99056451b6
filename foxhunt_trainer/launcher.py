"""`foxhunt-torchrun`: torchrun run as a child, so the pod exits with the trainer's documented code.

torchrun ends with 1 whenever a worker fails, whatever the worker's exit code, so the Job's
podFailurePolicy would never see the codes of training that a restart cannot fix (`EXIT_CODES`:
its rule fails the Job at once on them). The training job template therefore runs

    foxhunt-torchrun [torchrun's options] <program> [its arguments]

which starts `torchrun` with the same arguments and:

- auto-instruments every worker as `foxhunt-run` does (`foxhunt_trainer.autolog`: its
  `sitecustomize` first on PYTHONPATH, unless FOXHUNT_AUTOLOG=off), with one job ID for all ranks
  (FOXHUNT_JOB_ID: the Kubernetes Job's name where the template sets it, else the program's name
  and the start time);
- gives it (and through it every worker) a fresh directory of its own, named in
  `WORKER_EXIT_DIR_ENV`: a worker that ends with a documented code writes it there first
  (`record_exit_code`, called by the trainer library's remediation);
- forwards the signals Kubernetes and a terminal send (SIGTERM on deletion or preemption, SIGINT,
  SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to torchrun, which stops its workers;
- exits 0 when torchrun does; else with the most severe code a worker recorded
  (`SEVERITY`); else with torchrun's own code (128 + N when signal N ended it), so a retriable
  failure stays retriable and counts against the Job's backoffLimit.

Standard library only, so it starts before anything of the job is imported. A worker torchrun
restarts (`--max-restarts`) keeps the records of the attempts before it: a documented code is a
failure the next attempt would repeat.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from foxhunt_trainer.autolog.launch import BOOTSTRAP, JOB_ID_ENV, PYTHONPATH, instrumented_env, shared_job_id

# Exit codes of training that a restart cannot fix (the podFailurePolicy fails the Job on them).
EXIT_ROLLBACK_BUDGET_SPENT = 80
EXIT_NO_GOOD_CHECKPOINT = 81
EXIT_REMEDIATION_OFF = 82
EXIT_CODES: Mapping[int, str] = {
    EXIT_ROLLBACK_BUDGET_SPENT: "training went non-finite again after the job's last allowed rollback",
    EXIT_NO_GOOD_CHECKPOINT: "training went non-finite before any good checkpoint existed to roll back to",
    EXIT_REMEDIATION_OFF: "training went non-finite and remediation is off for the job",
}
UNFIXABLE_EXIT_CODES: tuple[int, ...] = tuple(sorted(EXIT_CODES))
# Most severe first, when workers of one pod recorded different codes: a run that diverged after
# every rollback it was allowed, one that diverged before its first good checkpoint, one that
# was never allowed to roll back.
SEVERITY: tuple[int, ...] = (EXIT_ROLLBACK_BUDGET_SPENT, EXIT_NO_GOOD_CHECKPOINT, EXIT_REMEDIATION_OFF)

WORKER_EXIT_DIR_ENV = "FOXHUNT_WORKER_EXIT_DIR"
TORCHRUN = "torchrun"
FORWARDED_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
)  # fmt: skip
EXIT_NOT_FOUND = 127  # the shell's code for a command that is not there


def record_exit_code(code: int, environ: Mapping[str, str] | None = None) -> Path | None:
    """A worker is about to exit with the documented `code`: write it where the launcher reads it
    (nothing outside the launcher). Returns the file written."""
    if code not in EXIT_CODES:
        raise ValueError(f"exit code {code} is not documented: expected one of {UNFIXABLE_EXIT_CODES}")
    directory = (os.environ if environ is None else environ).get(WORKER_EXIT_DIR_ENV)
    if not directory or not os.path.isdir(directory):
        return None
    path = Path(directory) / f"{os.getpid()}.code"
    partial = path.with_suffix(".partial")
    partial.write_text(str(code))
    partial.replace(path)  # the launcher never reads half a record
    return path


def recorded_exit_codes(directory: Path) -> list[int]:
    """The documented codes workers wrote into `directory` (anything else there is ignored)."""
    codes = []
    for record in sorted(directory.glob("*.code")):
        text = record.read_text().strip()
        if text.isdigit() and int(text) in EXIT_CODES:
            codes.append(int(text))
    return codes


def most_severe(codes: Iterable[int]) -> int | None:
    present = set(codes)
    return next((code for code in SEVERITY if code in present), None)


def pod_exit_code(torchrun_code: int, recorded: Sequence[int]) -> int:
    """What the container exits with, from torchrun's code and the workers' records."""
    if torchrun_code == 0:
        return 0
    documented = most_severe(recorded)
    if documented is not None:
        return documented
    return 128 - torchrun_code if torchrun_code < 0 else torchrun_code


def run(args: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Run torchrun with `args` and return the pod's exit code (see the module docstring)."""
    env = dict(os.environ if environ is None else environ)
    torchrun = shutil.which(TORCHRUN, path=env.get("PATH"))
    if torchrun is None:
        print(f"foxhunt-torchrun: {TORCHRUN} is not on PATH ({env.get('PATH', '')}): install PyTorch", file=sys.stderr)
        return EXIT_NOT_FOUND
    env = instrumented_env(env)  # the workers auto-instrumented (foxhunt_trainer.autolog)
    job_id = shared_job_id(args, env)
    if job_id is not None and env.get(PYTHONPATH, "").startswith(str(BOOTSTRAP)):
        env[JOB_ID_ENV] = job_id  # one job, whatever second each rank starts in
    with tempfile.TemporaryDirectory(prefix="foxhunt-worker-exits-") as directory:
        env[WORKER_EXIT_DIR_ENV] = directory
        child = subprocess.Popen([torchrun, *args], env=env)

        def forward(signum: int, _frame: FrameType | None) -> None:
            child.send_signal(signum)

        previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
        try:
            code = child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return pod_exit_code(code, recorded_exit_codes(Path(directory)))


USAGE = "usage: foxhunt-torchrun [torchrun's options] <training program> [its arguments]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if args in (["-h"], ["--help"]):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1])
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
