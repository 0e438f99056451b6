"""`foxhunt-run` and the switches, on programs that import no framework (fast): the exit code and
output are the program's, an existing sitecustomize still runs, a bad switch is named and the
program runs uninstrumented, and nothing imports a framework the program does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from foxhunt_trainer.autolog import launch, switches
from foxhunt_trainer.trainer_env import AUTOLOG_DISABLE_ENV, AUTOLOG_ENV, JOB_NAME_ENV
from infra import REPO_ROOT

RUN = [sys.executable, "-m", "foxhunt_trainer.autolog"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON"))}
    return {**env, "PYTHONPATH": str(REPO_ROOT), **extra}


def _run(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


PROBE = (
    "import sys, foxhunt_trainer.autolog.importer as i, foxhunt_trainer.autolog.state as s; "
    "print(s.STATE.installed, i.FINDER in sys.meta_path, sorted(m for m in ('torch', 'optuna', "
    "'stable_baselines3', 'pytorch_lightning', 'prometheus_client') if m in sys.modules)); sys.exit(7)"
)


def test_the_program_runs_with_the_hook_installed_and_exits_with_its_own_code_importing_nothing_it_does_not():
    done = _run([*RUN, sys.executable, "-c", PROBE], _env())
    assert done.returncode == 7, done.stderr
    assert done.stdout == "True True []\n", done.stdout  # no framework, not even prometheus_client
    assert done.stderr == ""


def test_off_runs_the_program_untouched():
    done = _run([*RUN, sys.executable, "-c", PROBE], _env(**{AUTOLOG_ENV: "off"}))
    assert (done.returncode, done.stdout, done.stderr) == (7, "False False []\n", "")


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        (AUTOLOG_ENV, "maybe", "'maybe' is not one of on, off"),
        (
            AUTOLOG_DISABLE_ENV,
            "lightning,keras",
            "unknown integration 'keras'; accepted: torch, distributed, lightning, sb3, optuna, tracing",
        ),
    ],
)
def test_a_bad_switch_is_named_with_the_accepted_values_and_the_program_still_runs_uninstrumented(name, value, named):
    done = _run([*RUN, sys.executable, "-c", PROBE], _env(**{name: value}))
    assert done.returncode == 7 and done.stdout == "False False []\n"
    assert done.stderr.count("\n") == 1 and named in done.stderr and name in done.stderr, done.stderr
    assert "runs uninstrumented" in done.stderr


def test_switches_read_every_integration_and_off():
    assert switches.read({}).on("torch")
    chosen = switches.read({AUTOLOG_DISABLE_ENV: " Lightning, sb3 ,"})
    assert chosen.enabled and chosen.disabled == {"lightning", "sb3"} and not chosen.on("sb3") and chosen.on("torch")
    assert not switches.read({AUTOLOG_ENV: "OFF"}).enabled
    assert switches.read({AUTOLOG_ENV: "on"}).error is None


def test_an_existing_sitecustomize_still_runs_after_the_hook(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = 'yes'\n")
    probe = "import builtins, sys; print(builtins.CHAINED, sys.modules['sitecustomize'].__file__)"
    done = _run([*RUN, sys.executable, "-c", probe], _env(PYTHONPATH=f"{REPO_ROOT}{os.pathsep}{tmp_path}"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"yes {tmp_path / 'sitecustomize.py'}\n"


def test_the_bootstrap_goes_first_on_pythonpath_once():
    env = launch.instrumented_env({"PYTHONPATH": f"/a{os.pathsep}{launch.BOOTSTRAP}{os.pathsep}/b"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(launch.BOOTSTRAP), "/a", "/b"]
    assert launch.instrumented_env({AUTOLOG_ENV: "off"}).get("PYTHONPATH") is None


JOB_ID_PROBE = "import os; print(os.environ.get('FOXHUNT_JOB_ID'))"


def test_the_programs_processes_are_given_one_job_id_unless_the_environment_names_one():
    named = _run([*RUN, sys.executable, "-c", JOB_ID_PROBE], _env())
    assert re.fullmatch(rf"{Path(sys.executable).stem}-\d{{8}}T\d{{6}}Z\n", named.stdout), named.stdout
    assert _run([*RUN, sys.executable, "-c", JOB_ID_PROBE], _env(FOXHUNT_JOB_ID="mine")).stdout == "mine\n"
    assert _run([*RUN, sys.executable, "-c", JOB_ID_PROBE], _env(**{JOB_NAME_ENV: "dqn-abc12"})).stdout == "None\n"
    assert _run([*RUN, sys.executable, "-c", JOB_ID_PROBE], _env(**{AUTOLOG_ENV: "off"})).stdout == "None\n"


def test_a_missing_command_exits_127_and_no_command_shows_the_usage():
    done = _run([*RUN, "no-such-command-foxhunt"], _env())
    assert done.returncode == 127 and "command not found" in done.stderr
    done = _run(RUN, _env())
    assert done.returncode == 2 and "usage: foxhunt-run" in done.stderr


def test_the_ranks_of_a_launch_share_one_job_id_unless_the_environment_names_one():
    assert launch.shared_job_id(["--nproc-per-node=2", "train.py", "--lr", "1"], {}, 0) == "train-19700101T000000Z"
    assert launch.shared_job_id(["--standalone", "-m", "pkg.trainer"], {}, 0) == "trainer-19700101T000000Z"
    assert launch.shared_job_id(["train.py"], {JOB_NAME_ENV: "dqn-abc12"}) is None


class _Trainer:
    """What `trainer_rank` reads of a Lightning trainer."""

    def __init__(self, world_size: int, global_rank: int, local_rank: int, node_rank: int = 0) -> None:
        self.world_size, self.global_rank, self.local_rank, self.node_rank = (
            world_size,
            global_rank,
            local_rank,
            node_rank,
        )


@pytest.mark.slow  # imports Lightning
def test_a_lightning_trainers_ranks_are_taken_only_where_nothing_else_tells_them():
    from foxhunt_trainer.autolog.lightning_patches import trainer_rank
    from foxhunt_trainer.ranks import RankInfo

    # Lightning's own launcher: no RANK; the trainer's view of a 4-process job on 2 nodes
    assert trainer_rank(_Trainer(4, 3, 1, node_rank=1), environ={}) == RankInfo(3, 1, 4, 1)
    assert trainer_rank(_Trainer(4, 3, 1), environ={"RANK": "3"}) is None  # a launcher's environment wins
    assert trainer_rank(_Trainer(1, 0, 0), environ={}) is None  # one process: nothing to take
    assert trainer_rank(_Trainer(2, 5, 0), environ={}) is None  # a rank outside the world: not taken
    assert trainer_rank(object(), environ={}) is None  # a trainer that does not tell
