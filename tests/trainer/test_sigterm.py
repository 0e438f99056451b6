"""SIGTERM, as Kubernetes stops a pod: a real training process records its job as stopped, is
scraped once more within the grace period, runs the handler installed before it, and dies of
the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt_trainer import termination
from foxhunt_trainer.trainer_env import FINAL_SCRAPE_WAIT_ENV, TERMINATION_GRACE_ENV

from .test_flush_on_exit import Scraper

pytestmark = pytest.mark.slow

# A real PyTorch loop under `watch`, endless until SIGTERM; "previous" installs a handler first
# (as a launcher or a framework would) that says it ran and exits with its own status; "later"
# installs one after the library's that calls the handler it found and asks the loop to stop, as
# Lightning's does.
TRAINING_SCRIPT = """
import signal, sys, time
import torch
from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.integrations.torch import watch

if sys.argv[1] == "previous":
    def previous(signum, frame):
        print("previous handler ran", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, previous)

metrics = TrainingMetrics()
server = metrics.serve(0, "127.0.0.1")
stop_requested = []
if sys.argv[1] == "later":
    found = signal.getsignal(signal.SIGTERM)
    def later(signum, frame):
        stop_requested.append(signum)
        found(signum, frame)
    signal.signal(signal.SIGTERM, later)
print(server.port, flush=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
batches = [(torch.randn(32, 8), torch.randn(32, 1)) for _ in range(20)]
with metrics.job("mlp", "preempted", gpu_uuids=[]) as job, watch(job, model, optimizer) as watcher:
    while True:
        for x, y in watcher.loader(batches):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            watcher.record_loss(loss)
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(0.002)
            if stop_requested:
                print("the loop stopped as asked", flush=True)
                sys.exit(0)
"""


def start(mode: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, "-c", TRAINING_SCRIPT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, **env},
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def wait_for_steps(scraper: Scraper, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any('ml_training_steps_total{job_id="preempted",model_type="mlp",rank="0"} 2' in b for b in scraper.bodies):
            return
        time.sleep(0.1)
    raise AssertionError("the training process never reported its first 20 steps")


def test_sigterm_stops_the_job_flushes_it_to_the_scraper_and_kills_the_process_with_the_signal():
    process, port = start("default", {FINAL_SCRAPE_WAIT_ENV: "20", TERMINATION_GRACE_ENV: "60"})
    scraper = Scraper(port, 0.3)
    try:
        wait_for_steps(scraper)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM  # died of the signal, as without the library
    finally:
        scraper.stop()
        process.kill()
    last = scraper.bodies[-1]  # the flush: a scrape after the job stopped
    assert 'ml_training_jobs_by_status{status="stopped"} 1.0' in last
    assert 'ml_training_jobs_by_status{status="running"} 0.0' in last
    assert 'ml_training_job_end_timestamp_seconds{job_id="preempted",model_type="mlp"}' in last
    assert 'ml_training_failures_total{error_type="exception",job_id="preempted",model_type="mlp"} 0.0' in last
    assert any('ml_training_jobs_by_status{status="running"} 1.0' in b for b in scraper.bodies)  # before


@pytest.mark.parametrize(
    ("handler", "exit_code", "said"),
    [
        # a handler installed before runs first, after the flush; its own exit stands
        ("previous", 7, "previous handler ran"),
        # a handler installed later that calls this one decides: the loop stopped and exited, the
        # library did not kill it
        ("later", 0, "the loop stopped as asked"),
    ],
)
def test_the_programs_own_sigterm_handler_decides_the_exit_and_the_job_is_flushed_stopped(handler, exit_code, said):
    process, port = start(handler, {FINAL_SCRAPE_WAIT_ENV: "20"})
    scraper = Scraper(port, 0.3)
    try:
        wait_for_steps(scraper)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == exit_code
    finally:
        scraper.stop()
        process.kill()
    assert process.stdout is not None
    assert said in process.stdout.read()
    assert 'ml_training_jobs_by_status{status="stopped"} 1.0' in scraper.bodies[-1]


def test_the_flush_fits_the_grace_period_when_nobody_scrapes_any_more():
    # Scraped, then the scraper goes away: the server would wait the 60 s configured for one more
    # scrape, but the flush must end within the 4-second grace period.
    process, port = start("default", {FINAL_SCRAPE_WAIT_ENV: "60", TERMINATION_GRACE_ENV: "4"})
    scraper = Scraper(port, 0.3)
    try:
        wait_for_steps(scraper)
        scraper.stop()
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM
        assert time.monotonic() - sent < 4
    finally:
        process.kill()


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "100000"])
def test_a_bad_grace_period_is_named_with_what_is_expected(value):
    with pytest.raises(ValueError, match=f"{TERMINATION_GRACE_ENV}=.*expected the grace period"):
        termination.grace_period_from_env({TERMINATION_GRACE_ENV: value})


def test_the_flush_leaves_part_of_the_grace_period_for_what_runs_after_it():
    assert termination.grace_period_from_env({}) == termination.DEFAULT_GRACE_SECONDS
    assert termination.grace_period_from_env({TERMINATION_GRACE_ENV: " 120 "}) == 120
    assert termination.flush_budget(120) == pytest.approx(108)
    assert termination.flush_budget(3) == 2
    assert termination.flush_budget(0.5) == 0
