"""`foxhunt-torchrun` (foxhunt_trainer/launcher.py) around a real torchrun of two local workers
(`tests/trainer/launcher_worker.py`): a worker that ends with the documented code 80 (its
rollback budget spent, through the trainer library's remediation) makes the launcher exit 80,
where torchrun alone exits 1; a retriable failure stays retriable; a clean run exits 0; SIGTERM
reaches the workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt_trainer import launcher, remediation
from infra import REPO_ROOT

TORCHRUN_BIN = Path(sys.executable).parent
TWO_WORKERS = ("--standalone", "--nnodes=1", "--nproc-per-node=2")


def _env(tmp: Path) -> dict[str, str]:
    tmp.mkdir(exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_"))},
        "PATH": f"{TORCHRUN_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO_ROOT),
        "OTEL_TRACES_EXPORTER": "none",
        "TMPDIR": str(tmp),  # where the launcher makes its directory of the workers' records
    }


def _worker(out: Path, *args: str) -> list[str]:
    return ["-m", "tests.trainer.launcher_worker", "--out", str(out), *args]


def _launch(out: Path, *worker_args: str, through_launcher: bool = True) -> subprocess.Popen[str]:
    head = [sys.executable, "-m", "foxhunt_trainer.launcher"] if through_launcher else [str(TORCHRUN_BIN / "torchrun")]
    return subprocess.Popen(
        [*head, *TWO_WORKERS, *_worker(out, *worker_args)],
        cwd=REPO_ROOT, env=_env(out / "tmp"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = process.communicate(timeout=180)
    return process.returncode, output


@pytest.mark.slow
def test_a_worker_that_spent_its_rollback_budget_makes_the_pod_exit_80_where_torchrun_says_1(tmp_path):
    alone, through = tmp_path / "torchrun", tmp_path / "launcher"
    alone.mkdir(), through.mkdir()
    spent = ("--ranks", "1", "--ending", "budget-spent")
    code, output = _finish(_launch(alone, *spent, through_launcher=False))
    assert code == 1 and "exitcode  : 80" in output, output  # torchrun saw 80 and said 1
    code, output = _finish(_launch(through, *spent))
    assert code == remediation.EXIT_ROLLBACK_BUDGET_SPENT == 80, output
    assert (through / "sigterm-0").exists()  # the other worker was stopped, not waited for
    assert list((through / "tmp").glob("foxhunt-worker-exits-*")) == []  # the records' directory is gone


@pytest.mark.slow
def test_a_retriable_failure_stays_retriable_and_a_clean_run_exits_0(tmp_path):
    code, output = _finish(_launch(tmp_path, "--ranks", "1", "--ending", "retriable"))
    assert code != 0 and code not in launcher.UNFIXABLE_EXIT_CODES, output  # counts against backoffLimit
    assert "exitcode  : 3" in output
    code, output = _finish(_launch(tmp_path, "--ranks", "all", "--ending", "clean"))
    assert code == 0, output


@pytest.mark.slow
def test_sigterm_reaches_every_worker_and_the_pod_exits_with_torchruns_code(tmp_path):
    process = _launch(tmp_path, "--ranks", "none", "--ending", "clean", "--others-sleep", "120")
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"started-{rank}").exists() for rank in (0, 1)):
        assert process.poll() is None and time.monotonic() < deadline, _finish(process)
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)  # what the kubelet sends on deletion or preemption
    code, output = _finish(process)
    assert (tmp_path / "sigterm-0").exists() and (tmp_path / "sigterm-1").exists(), output
    assert code != 0 and code not in launcher.UNFIXABLE_EXIT_CODES, output


def test_the_pods_code_is_the_most_severe_recorded_else_torchruns(tmp_path):
    budget, off = launcher.EXIT_ROLLBACK_BUDGET_SPENT, launcher.EXIT_REMEDIATION_OFF
    assert launcher.pod_exit_code(1, [off, budget]) == budget
    assert launcher.pod_exit_code(1, []) == 1
    assert launcher.pod_exit_code(-signal.SIGTERM, []) == 128 + signal.SIGTERM
    assert launcher.pod_exit_code(0, [budget]) == 0  # torchrun succeeded (a restarted worker recovered)
    environ = {launcher.WORKER_EXIT_DIR_ENV: str(tmp_path)}
    record = launcher.record_exit_code(off, environ)
    assert record is not None and launcher.recorded_exit_codes(tmp_path) == [off]
    (tmp_path / "stray.code").write_text("3")  # not documented: ignored
    assert launcher.recorded_exit_codes(tmp_path) == [off]
    assert launcher.record_exit_code(budget, {}) is None  # not under the launcher: nothing written
    with pytest.raises(ValueError, match=r"exit code 3 is not documented: expected one of \(80, 81, 82\)"):
        launcher.record_exit_code(3, environ)


def test_without_torchrun_on_the_path_it_says_so_and_exits_127(tmp_path, capsys):
    assert launcher.run(["-m", "train"], {"PATH": str(tmp_path)}) == launcher.EXIT_NOT_FOUND
    assert "torchrun is not on PATH" in capsys.readouterr().err
    assert launcher.main([]) == 2
