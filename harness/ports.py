"""TCP ports for the servers the tests and benchmarks start on loopback, picked so that no two are
handed the same one while they run side by side:

- below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768 and up by default):
  the kernel takes the local port of every outgoing connection (a scrape, an HTTP client) and of a
  `bind(("127.0.0.1", 0))` from that range, so a port found free there can be taken by one of them
  between the pick and the server's own bind (seen: "Address already in use" with three test
  processes on two cores);
- a slice of the span below it for each pytest-xdist worker (`PYTEST_XDIST_WORKER`), walked in
  order from a random start, so two workers, or two picks in one process, never hand out the same
  port, and two sessions at once rarely meet;
- each port bound once before it is handed out, so one that another program holds is skipped.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

LOWEST = 10000  # the span starts here (well above the ports of system services)
SLICES = 16  # workers beyond this share slices (still bound before they are handed out)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_lock = threading.Lock()
_next: list[int] = []  # the offset in this process's slice to try next


def ephemeral_low(path: Path = EPHEMERAL_RANGE) -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def worker_slice(worker: str | None = None, high: int | None = None) -> range:
    """This process's ports: the slice of [LOWEST, ephemeral low) of its pytest-xdist worker
    ("gw0", "gw1", ...; the last slice without one)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    index = int(name[2:]) % SLICES if name.startswith("gw") and name[2:].isdigit() else SLICES - 1
    width = ((ephemeral_low() if high is None else high) - LOWEST) // SLICES
    if width < 64:
        raise RuntimeError(
            f"the ports below the kernel's ephemeral range ({EPHEMERAL_RANGE}) leave {width} per test "
            f"process from {LOWEST}: expected at least 64 (the range starts at 32768 by default)"
        )
    start = LOWEST + index * width
    return range(start, start + width)


def _all_free(base: int, count: int, host: str) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.ExitStack() as stack:
        try:
            for port in range(base, base + count):
                sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
                sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port_range(count: int, host: str = "127.0.0.1") -> int:
    """A port p such that p .. p+count-1 are free on `host` now and handed to no one else (a pod's
    rank ports)."""
    ports = worker_slice()
    span = len(ports) - count + 1
    with _lock:
        if not _next:
            _next.append(random.randrange(span))
        for _ in range(span):
            base = ports.start + _next[0]
            _next[0] = (_next[0] + count) % span
            if _all_free(base, count, host):
                return base
    raise RuntimeError(f"no {count} consecutive free ports in {ports.start}-{ports.stop - 1} on {host}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now and handed to no one else."""
    return free_port_range(1, host)
