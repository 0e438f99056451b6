"""The trainer's metrics server flushes before it stops: one more scrape whenever something changed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from foxhunt_trainer import TrainingMetrics

from ..e2e.conftest import http_get


class Scraper:
    """Scrapes a port every `interval` seconds until stopped or refused; keeps every body."""

    def __init__(self, port: int, interval: float) -> None:
        self.port, self.interval = port, interval
        self.bodies: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.bodies.append(http_get(self.port, "/metrics", timeout=2)[1].decode())
            except OSError:
                if self.bodies:
                    return  # the server went away
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_nothing_changed_since_the_last_scrape_closes_at_once():
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    metrics.start_job("mlp", "j", gpu_uuids=[]).finish("completed")
    http_get(server.port, "/metrics")
    started = time.monotonic()
    assert server.close(final_scrape_wait=30) is True
    assert time.monotonic() - started < 1


def test_a_change_after_the_last_scrape_waits_for_the_next_one_at_the_learned_interval():
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    job = metrics.start_job("mlp", "j", gpu_uuids=[])
    scraper = Scraper(server.port, 0.3)
    try:
        deadline = time.monotonic() + 10
        while server.page.scrapes_seen < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        job.record_nan_detection("loss")
        job.finish("failed")
        assert 0 < server.flush_wait() < 5  # twice the scrape interval it saw, no env needed
        assert server.close() is True
    finally:
        scraper.stop()
    assert 'tensor_type="loss"} 1.0' in scraper.bodies[-1]
    assert 'status="failed"} 1.0' in scraper.bodies[-1]


def test_a_process_nobody_scrapes_exits_without_waiting():
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    metrics.start_job("mlp", "j", gpu_uuids=[]).finish("completed")
    started = time.monotonic()
    assert server.close() is False
    assert time.monotonic() - started < 1


CRASHING_SCRIPT = """
import sys, time
from foxhunt_trainer import TrainingMetrics
metrics = TrainingMetrics()
server = metrics.serve(0, "127.0.0.1")
print(server.port, flush=True)
sys.stdin.readline()  # scraped by now
with metrics.job("mlp", "crash", gpu_uuids=[]) as job:
    job.record_training_iteration(1, float("nan"), None, 0.01)
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
"""


def test_a_crashing_script_that_never_closes_its_server_is_still_scraped_once_more():
    """The issue's case: a NaN and a crash a moment before exit, no close() in the script."""
    process = subprocess.Popen(
        [sys.executable, "-c", CRASHING_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert process.stdout is not None and process.stdin is not None
    port = int(process.stdout.readline())
    scraper = Scraper(port, 0.4)
    try:
        deadline = time.monotonic() + 10
        while len(scraper.bodies) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.wait(timeout=20) == 1
    finally:
        scraper.stop()
        process.kill()
    last = scraper.bodies[-1]
    assert 'ml_training_nan_count{job_id="crash",model_type="mlp",tensor_type="loss"} 1.0' in last
    assert 'ml_training_failures_total{error_type="exception",job_id="crash",model_type="mlp"} 1.0' in last
    assert 'ml_training_jobs_by_status{status="failed"} 1.0' in last
