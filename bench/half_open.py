"""Half-open connections against a metrics server, as a noisy or hostile client in the cluster
would hold them: connect, send `GET /metrics HTTP/1.1` without the blank line, wait.

`measure(...)` opens them in batches against a server process (by PID), scrapes between batches and
while they are held, and reads the process's resident memory, threads and open files from /proc;
then closes them and waits for the thread count to come back. The tests use it with a few hundred
connections, `python -m bench.http_limits` with 5,000.
"""

from __future__ import annotations

import http.client
import resource
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HALF_OPEN_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nUser-Agent: half-open\r\n"


@dataclass(frozen=True)
class ProcessFigures:
    rss_kib: int
    threads: int
    open_files: int


def process_figures(pid: int) -> ProcessFigures:
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return ProcessFigures(rss, threads, len(list(Path(f"/proc/{pid}/fd").iterdir())))


def raise_own_open_files_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def timed_scrape(
    host: str,
    port: int,
    *,
    timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, float]:
    """(status, seconds) of one GET /metrics on a new connection; status 0 when it failed."""
    started = time.monotonic()
    connection: http.client.HTTPConnection
    if tls is not None:
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", "/metrics", headers=headers or {})
        response = connection.getresponse()
        response.read()
        status = response.status
    except OSError:
        status = 0
    finally:
        connection.close()
    return status, time.monotonic() - started


@dataclass(frozen=True)
class HalfOpenFigures:
    connections: int  # half-open connections held at once
    baseline: ProcessFigures
    peak: ProcessFigures  # the highest RSS, threads and open files seen while they were held
    after: ProcessFigures  # once they were closed and the threads came back (or the wait ran out)
    scrapes: int
    failed_scrapes: int
    max_scrape_seconds: float
    open_seconds: float  # to open them all


def _peak(a: ProcessFigures, b: ProcessFigures) -> ProcessFigures:
    return ProcessFigures(max(a.rss_kib, b.rss_kib), max(a.threads, b.threads), max(a.open_files, b.open_files))


def measure(
    pid: int,
    host: str,
    port: int,
    count: int,
    *,
    batch: int = 500,
    hold_seconds: float = 1.0,
    scrape: Callable[[], tuple[int, float]] | None = None,
    settle_seconds: float = 10.0,
) -> HalfOpenFigures:
    """Hold `count` half-open connections against the server process `pid` on host:port."""
    raise_own_open_files_limit(count + 256)
    scrape = scrape or (lambda: timed_scrape(host, port))
    scrape()
    baseline = process_figures(pid)
    peak = baseline
    held: list[socket.socket] = []
    statuses: list[int] = []
    slowest = 0.0

    def probe() -> None:
        nonlocal peak, slowest
        status, seconds = scrape()
        statuses.append(status)
        slowest = max(slowest, seconds)
        peak = _peak(peak, process_figures(pid))

    started = time.monotonic()
    try:
        while len(held) < count:
            for _ in range(min(batch, count - len(held))):
                sock = socket.create_connection((host, port), timeout=10)
                sock.sendall(HALF_OPEN_REQUEST)
                held.append(sock)
            probe()
        opened = time.monotonic() - started
        hold_until = time.monotonic() + hold_seconds
        while time.monotonic() < hold_until:
            probe()
            time.sleep(0.1)
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + settle_seconds
    after = process_figures(pid)
    while time.monotonic() < deadline and (after.threads > baseline.threads or after.open_files > baseline.open_files):
        time.sleep(0.1)
        after = process_figures(pid)
    probe()
    failed = sum(1 for s in statuses if s != 200)
    return HalfOpenFigures(count, baseline, peak, after, len(statuses), failed, slowest, opened)
