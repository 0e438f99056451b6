"""Fixtures for the infra tests: rendered stacks (cached per session), small /metrics servers
and a real Prometheus (Debian's 2.42) on 127.0.0.1, each stopped by PID in teardown."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ports import free_port
from infra.offline import render
from infra.offline.result import RenderResult
from tests.infra.support import STACKS


@pytest.fixture(scope="session")
def rendered() -> dict[str, RenderResult]:
    """Every stack rendered once under the mock engine (renders are deterministic)."""
    return {stack: render.render_stack(stack) for stack in STACKS}


@dataclass
class MetricsServer:
    """An HTTP server answering `path` with a Prometheus text page; records every request path."""

    host: str
    path: str
    body: str
    requests: list[str] = field(default_factory=list)
    port: int = 0
    _server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> MetricsServer:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append(self.path)
                if self.path.split("?", 1)[0] != owner.path:
                    self.send_error(404)
                    return
                data = owner.body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            daemon_threads = True

        self._server = Server((self.host, 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def metrics_servers() -> Iterator[Callable[..., MetricsServer]]:
    started: list[MetricsServer] = []

    def start(path: str = "/metrics", body: str = "", host: str = "127.0.0.1") -> MetricsServer:
        server = MetricsServer(host, path, body).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            document = json.load(response)
        assert document["status"] == "success", document
        return document["data"]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Prometheus]]:
    """Start Debian's prometheus with a given config on a free 127.0.0.1 port (tmp data dir)."""
    running: list[Prometheus] = []

    def start(config: dict[str, Any]) -> Prometheus:
        workdir = tmp_path / f"prometheus-{len(running)}"
        workdir.mkdir()
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        log = workdir / "prometheus.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Prometheus(f"http://127.0.0.1:{port}", process, log)
        running.append(server)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(server.url + "/-/ready", timeout=1) as response:
                if response.status == 200:
                    return server
            time.sleep(0.1)
        raise AssertionError(f"prometheus did not become ready:\n{log.read_text()}")

    yield start
    for server in running:
        if server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGTERM)
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=10)
