"""A real Alertmanager 0.25 for tests: `prometheus-alertmanager` (Debian's package) on a free
loopback port, its data and log in a temp dir, ready before it is returned, stopped by PID.
Also the path of its tools (`alertmanager_tool("amtool")`)."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.ports import free_port

READY_TIMEOUT_SECONDS = 30.0


def alertmanager_tool(name: str) -> str:
    """The path of `prometheus-alertmanager` or `amtool`; a clear error when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        raise RuntimeError(f"{name} not found: install the Debian package prometheus-alertmanager (.ci/run does)")
    return path


class AlertmanagerServer:
    """An Alertmanager serving `config_file` (templates it names are read relative to it), with its
    storage and log under `work`. The constructor returns once `/-/ready` answers 200; if the
    process exits or is not ready in time, it is stopped and the error carries its log."""

    def __init__(self, config_file: Path, work: Path, *, ready_timeout: float = READY_TIMEOUT_SECONDS) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work / "alertmanager.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                alertmanager_tool("prometheus-alertmanager"),
                f"--config.file={config_file}",
                f"--storage.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url={self.url}",
                "--cluster.listen-address=",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._log.flush()
                state = f"exited with {self.process.returncode}" if self.process.poll() is not None else "not ready"
                raise RuntimeError(
                    f"Alertmanager on port {self.port} {state} after {timeout:g} s:\n"
                    f"{self.log_path.read_text(errors='replace')}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self._log.closed:
            self._log.close()


@contextmanager
def running_alertmanager(config_file: Path, work: Path) -> Iterator[AlertmanagerServer]:
    """An `AlertmanagerServer` for the length of a `with` block (a fixture's `yield`)."""
    server = AlertmanagerServer(config_file, work)
    try:
        yield server
    finally:
        server.stop()
