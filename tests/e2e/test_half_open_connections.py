"""Half-open connections (`GET /metrics HTTP/1.1` without the blank line) held against the GPU
poller (fake NVML, 8 GPUs) and a trainer: the process's memory stays within the poller's limit,
no thread is added per connection, scrapes answer within a second throughout, and after the
connections close the threads and open files come back to their baseline. 1,000 connections
here; `python -m bench.http_limits` holds 5,000 (BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import half_open
from harness.trainer_process import TrainerProcess

from .conftest import load_harness

CONNECTIONS = 1_000
POLLER_MEMORY_LIMIT_KIB = 64 * 1024  # the DaemonSet's memory limit (every stack)
# What an idle connection may cost the server process at most (a socket object, a small buffer and
# the selector's entry; a thread per connection cost about 27 KiB).
MAX_KIB_PER_CONNECTION = 6


def check(figures: half_open.HalfOpenFigures) -> None:
    assert figures.failed_scrapes == 0, figures
    assert figures.max_scrape_seconds < 1.0, figures
    assert figures.peak.threads == figures.baseline.threads, figures
    assert figures.peak.open_files >= figures.baseline.open_files + CONNECTIONS, figures  # they were all held
    grown = figures.peak.rss_kib - figures.baseline.rss_kib
    assert grown < MAX_KIB_PER_CONNECTION * CONNECTIONS, figures
    assert figures.after.threads == figures.baseline.threads, figures
    assert figures.after.open_files <= figures.baseline.open_files, figures


def test_the_poller_holds_a_thousand_half_open_connections_within_its_memory_limit(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    harness = load_harness()
    lib_dir = harness.build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))
    config = tmp_path / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu() for _ in range(8)]).write(config)
    args = ("--min-interval", "0", "--read-header-timeout", "60")
    with harness.PollerProcess(lib_dir, config, tmp_path, args=args) as poller:
        figures = half_open.measure(poller.process.pid, poller.host, poller.port, CONNECTIONS)
    check(figures)
    assert figures.peak.rss_kib < POLLER_MEMORY_LIMIT_KIB, figures


def test_the_trainer_holds_a_thousand_half_open_connections(tmp_path: Path) -> None:
    trainer = TrainerProcess(tmp_path, "--epoch-seconds", "0.05", "--linger", "-1")
    try:
        trainer.wait_ready()
        check(half_open.measure(trainer.process.pid, trainer.host, trainer.port, CONNECTIONS))
    finally:
        trainer.stop()
