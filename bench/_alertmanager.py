"""Run Debian's Alertmanager (`prometheus-alertmanager`) on 127.0.0.1, alone or as a gossip cluster.

`AlertmanagerPeer` starts one peer with its web and cluster listeners on free ports, its storage
under a work directory, and the other peers' cluster addresses as `--cluster.peer`; it waits until
`/-/ready` answers and stops (or kills) the process by PID. The gossip timings are shortened so a
cluster of three settles in seconds; the peer timeout (how long a peer waits for those before it in
the cluster's order to notify) stays long enough that a peer never notifies before the previous
one's notification log has reached it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from harness.ports import free_port

GOSSIP_FLAGS = (
    "--cluster.gossip-interval=200ms",
    "--cluster.pushpull-interval=2s",
    "--cluster.settle-timeout=5s",
    "--cluster.peer-timeout=5s",
)


def alertmanager_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        raise FileNotFoundError("prometheus-alertmanager not found (Debian package prometheus-alertmanager)")
    return path


class AlertmanagerPeer:
    """One Alertmanager; `cluster_port` is its gossip listener (0: no cluster)."""

    def __init__(self, work: Path, config_file: Path, *, clustered: bool = True) -> None:
        self.work = work
        self.config_file = config_file
        self.port = free_port()
        self.cluster_port = free_port() if clustered else 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work / "alertmanager.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def cluster_address(self) -> str:
        return f"127.0.0.1:{self.cluster_port}"

    def start(self, peers: Sequence[str] = (), ready_timeout: float = 60.0) -> AlertmanagerPeer:
        self.work.mkdir(parents=True, exist_ok=True)
        cluster = (
            [f"--cluster.listen-address={self.cluster_address}", f"--cluster.advertise-address={self.cluster_address}",
             *GOSSIP_FLAGS, *(f"--cluster.peer={p}" for p in peers)]
            if self.cluster_port
            else ["--cluster.listen-address="]
        )  # fmt: skip
        command = [
            alertmanager_binary(),
            f"--config.file={self.config_file}",
            f"--storage.path={self.work / 'data'}",
            f"--web.listen-address={self.address}",
            f"--web.external-url={self.url}",
            "--log.level=warn",
            *cluster,
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Alertmanager {self.address} did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def cluster_size(self) -> int:
        import json

        with urllib.request.urlopen(f"{self.url}/api/v2/status", timeout=5) as response:
            status = json.loads(response.read())
        return len(status.get("cluster", {}).get("peers") or [])

    def kill(self) -> None:
        """SIGKILL: no chance to leave the cluster or flush anything."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
