"""Ranks started by `torch.multiprocessing.spawn`, the way PyTorch's DDP tutorial starts them (no
launcher, so no RANK or WORLD_SIZE in their environment), each report their own rank, world size
and steps under `foxhunt-run`, each on its own port (the base port plus its rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer.contract import catalog
from harness.prometheus import free_port, free_port_range
from infra import REPO_ROOT

pytestmark = pytest.mark.slow

WORLD, STEPS, JOB_ID = 2, 30, "spawned"
PROGRAM = REPO_ROOT / "tests" / "autolog" / "programs" / "ddp_spawn.py"
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


def test_spawned_ranks_without_a_launcher_report_their_own_rank_on_their_own_port(tmp_path: Path) -> None:
    base = free_port_range(WORLD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON"))}
    env.update(
        PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", FOXHUNT_METRICS_BASE_PORT=str(base), FOXHUNT_JOB_ID=JOB_ID,
        FOXHUNT_PROGRESS_SECONDS="off", FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS="120",
    )  # fmt: skip
    command = [*RUN, str(PROGRAM), str(tmp_path), "--master-port", str(free_port()), "--steps", str(STEPS)]
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last: dict[int, str] = {}
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None:  # each rank waits at exit for a scrape of its final page: this loop's
            assert time.monotonic() < deadline, "the spawned job did not end in 300 s"
            for rank in range(WORLD):
                if (text := page(base + rank)) is not None:
                    last[rank] = text
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode == 0, output
    for rank in range(WORLD):
        assert json.loads((tmp_path / f"result-{rank}.json").read_text())["steps"] == STEPS
        assert rank in last, f"rank {rank} served nothing on port {base + rank}\n{output}"
        (info,) = samples(last[rank], catalog.TRAINING_RANK_INFO.name)
        assert info[0]["job_id"] == JOB_ID
        assert (info[0]["rank"], info[0]["local_rank"], info[0]["world_size"]) == (str(rank), str(rank), str(WORLD))
        (steps,) = samples(last[rank], catalog.TRAINING_STEPS_TOTAL.name)
        assert steps == ({"job_id": JOB_ID, "model_type": "ddp_spawn", "rank": str(rank)}, float(STEPS))
