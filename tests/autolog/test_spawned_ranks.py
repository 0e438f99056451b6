"""Ranks started without torchrun each report their own rank, world size and steps under
`foxhunt-run`, each on its own port (the base port plus its local rank): ranks started by
`torch.multiprocessing.spawn`, the way PyTorch's DDP tutorial starts them (no launcher, so no RANK
or WORLD_SIZE in their environment), and a Lightning fit whose second process Lightning's own
launcher starts (`Trainer(strategy="ddp", devices=2)` run with plain `python`: no RANK, and no
process group yet when the trainer is made), whose DDP module is timed as torchrun's ranks' are."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer.contract import catalog
from harness.ports import free_port, free_port_range
from infra import REPO_ROOT

pytestmark = pytest.mark.slow

WORLD, STEPS, JOB_ID = 2, 30, "spawned"
PROGRAM = REPO_ROOT / "tests" / "autolog" / "programs" / "ddp_spawn.py"
LIGHTNING_PROGRAM = REPO_ROOT / "tests" / "autolog" / "programs" / "lightning_ddp.py"
RUN = [sys.executable, "-m", "foxhunt_trainer.autolog", sys.executable]


def page(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return str(response.read().decode())
    except (OSError, urllib.error.URLError):
        return None


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def run_to_the_end(command: list[str], base: int, job_id: str | None = JOB_ID) -> tuple[dict[int, str], str]:
    """Run `command` under `foxhunt-run` with its ranks served from `base` (and `job_id` in the
    environment, if given): each rank's last page (every rank waits at exit for a scrape of its
    final page: this loop's), and the output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON", "TRAINING_JOB"))}
    env.update(
        PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", FOXHUNT_METRICS_BASE_PORT=str(base),
        FOXHUNT_PROGRESS_SECONDS="off", FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS="120",
    )  # fmt: skip
    if job_id is not None:
        env["FOXHUNT_JOB_ID"] = job_id
    proc = subprocess.Popen([*RUN, *command], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last: dict[int, str] = {}
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the job did not end in 300 s"
            for rank in range(WORLD):
                if (text := page(base + rank)) is not None:
                    last[rank] = text
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode == 0, output
    return last, output


def assert_each_rank_reported(
    last: dict[int, str], output: str, base: int, model_type: str, steps: int, job_id: str = JOB_ID
) -> None:
    for rank in range(WORLD):
        assert rank in last, f"rank {rank} served nothing on port {base + rank}\n{output}"
        (info,) = samples(last[rank], catalog.TRAINING_RANK_INFO.name)
        assert info[0]["job_id"] == job_id
        assert (info[0]["rank"], info[0]["local_rank"], info[0]["world_size"]) == (str(rank), str(rank), str(WORLD))
        (counted,) = samples(last[rank], catalog.TRAINING_STEPS_TOTAL.name)
        assert counted == ({"job_id": job_id, "model_type": model_type, "rank": str(rank)}, float(steps))


def test_spawned_ranks_without_a_launcher_report_their_own_rank_on_their_own_port(tmp_path: Path) -> None:
    base = free_port_range(WORLD)
    command = [str(PROGRAM), str(tmp_path), "--master-port", str(free_port()), "--steps", str(STEPS)]
    last, output = run_to_the_end(command, base)
    for rank in range(WORLD):
        assert json.loads((tmp_path / f"result-{rank}.json").read_text())["steps"] == STEPS
    assert_each_rank_reported(last, output, base, "ddp_spawn", STEPS)


def test_a_lightning_fit_whose_launcher_is_lightnings_own_reports_each_rank_on_its_own_port(tmp_path: Path) -> None:
    # No job ID in the environment: the two processes (started seconds apart) share the one
    # `foxhunt-run` names the program's job with.
    base = free_port_range(WORLD)
    last, output = run_to_the_end([str(LIGHTNING_PROGRAM), str(tmp_path)], base, job_id=None)
    results = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in range(WORLD)]
    assert [r["world_size"] for r in results] == [WORLD, WORLD]
    steps = results[0]["global_step"]
    assert steps > 0 and results[1]["global_step"] == steps
    (info,) = samples(last[0], catalog.TRAINING_RANK_INFO.name)
    assert re.fullmatch(r"lightning_ddp-\d{8}T\d{6}Z", info[0]["job_id"]), info
    assert_each_rank_reported(last, output, base, "lightning_ddp", steps, job_id=info[0]["job_id"])
    # The DDP module Lightning's strategy made is timed: one gradient bucket a step, and the wait
    # for it in the collective phase (what the straggler and hang alerts read).
    for rank in range(WORLD):
        reduced = dict(
            (labels["collective"], value)
            for labels, value in samples(last[rank], catalog.TRAINING_COLLECTIVE_OPERATIONS_TOTAL.name)
        )
        assert reduced["all_reduce"] == steps, reduced
        phases = {
            labels["phase"]: value for labels, value in samples(last[rank], catalog.TRAINING_PHASE_SECONDS_TOTAL.name)
        }
        assert phases["collective"] > 0 and phases["compute"] > 0, phases


LATE_GROUP = """
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def worker(rank, world_size, port, late):
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    if late:
        next(iter(loader))  # a first look at the data: the job starts here
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    for (batch,) in loader:
        dist.all_reduce(batch)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]), sys.argv[2] == "late"), nprocs=2, join=True)
"""


@pytest.mark.parametrize("order", ["late", "first"])
def test_a_process_group_made_after_the_job_started_is_named_on_stderr_with_what_to_do(tmp_path: Path, order: str):
    # The job's series are labelled when its first training call makes it; a process group made
    # after that cannot relabel them, so each rank says so once, naming its true rank.
    program = tmp_path / "late_group.py"
    program.write_text(LATE_GROUP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON", "TRAINING_JOB"))}
    env.update(
        PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", FOXHUNT_METRICS_BASE_PORT=str(free_port_range(WORLD)),
        FOXHUNT_PROGRESS_SECONDS="off", FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS="0",
    )  # fmt: skip
    command = [*RUN, str(program), str(free_port()), order]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, timeout=180)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    said = sorted(re.findall(r"joined its process group as rank (\d) of 2 after its job had started", stderr))
    assert said == (["0", "1"] if order == "late" else []), stderr
    if order == "late":
        assert "start the ranks with torchrun (foxhunt-torchrun)" in stderr
