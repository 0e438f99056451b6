"""`foxhunt-run <command...>`: run a training program auto-instrumented, without changing a line.

    foxhunt-run python train.py --epochs 10
    foxhunt-run python -m my_project.train

puts `BOOTSTRAP` (a directory holding a `sitecustomize`) first on PYTHONPATH, names the job for
every process of the program (FOXHUNT_JOB_ID, unless the environment names it: the script's name
and the start time, `train-20261202T061502Z`), and replaces itself
with the command (exec: the program's exit code and signals are its own, it keeps the PID). Every
Python process of the program, its subprocesses, `multiprocessing` spawns and torchrun's workers
included, then installs the import hook of `foxhunt_trainer.autolog.importer`, which instruments
PyTorch, Lightning, Stable-Baselines3 and Optuna when the program first imports them. A
`sitecustomize` the environment already had still runs, after this one.

`FOXHUNT_AUTOLOG=off` runs the command untouched; `FOXHUNT_AUTOLOG_DISABLE=lightning,sb3` turns
integrations off one by one (`switches`). Standard library only, so it starts before anything of
the job is imported.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from foxhunt_trainer.autolog import switches
from foxhunt_trainer.trainer_env import JOB_NAME_ENV

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
PYTHONPATH = "PYTHONPATH"
# The job's ID for every process of a program (`foxhunt-torchrun` sets one for its ranks when the
# job template's Kubernetes Job name is not there); also how a user names a job by hand.
JOB_ID_ENV = "FOXHUNT_JOB_ID"
EXIT_NOT_FOUND = 127  # the shell's codes for a command that is not there / cannot run
EXIT_NOT_EXECUTABLE = 126
USAGE = "usage: foxhunt-run <command> [its arguments]   (e.g. foxhunt-run python train.py)"


def instrumented_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to run the program in: BOOTSTRAP first on PYTHONPATH, unless the switches
    say off or are wrong (reported on stderr; the program then runs uninstrumented)."""
    env = dict(os.environ if environ is None else environ)
    chosen = switches.read(env)
    if chosen.error is not None:
        print(f"{switches.PREFIX}: {chosen.error}", file=sys.stderr)
        return env
    if not chosen.enabled:
        return env
    entries = [entry for entry in env.get(PYTHONPATH, "").split(os.pathsep) if entry and entry != str(BOOTSTRAP)]
    env[PYTHONPATH] = os.pathsep.join([str(BOOTSTRAP), *entries])
    return env


def shared_job_id(
    args: Sequence[str], environ: Mapping[str, str], started: float | None = None, fallback: str = "torchrun"
) -> str | None:
    """The job ID the processes a launcher starts share: None when the environment names one
    (FOXHUNT_JOB_ID, or the Kubernetes Job's name), else the program's name (its script's, its
    module's, else `fallback`) and the start time."""
    if environ.get(JOB_ID_ENV, "").strip() or environ.get(JOB_NAME_ENV, "").strip():
        return None
    program = next((Path(arg).stem for arg in args if arg.endswith(".py")), None)
    if program is None and "-m" in args[:-1]:
        program = args[list(args).index("-m") + 1].rsplit(".", 1)[-1]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if started is None else started))
    return f"{program or fallback}-{stamp}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if args in (["-h"], ["--help"]):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1])
        return 0
    env = instrumented_env()
    job_id = shared_job_id(args, env, fallback=Path(args[0]).stem or "python")
    if job_id is not None and env.get(PYTHONPATH, "").startswith(str(BOOTSTRAP)):
        # One job for every process of the program, whatever second each starts in (the ranks a
        # framework's own launcher starts, a multiprocessing spawn).
        env[JOB_ID_ENV] = job_id
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, env)
    except FileNotFoundError:
        print(f"foxhunt-run: {args[0]}: command not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"foxhunt-run: {args[0]}: permission denied", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
