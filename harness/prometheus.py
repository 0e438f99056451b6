"""Run Debian's Prometheus on 127.0.0.1 for tests and benchmarks, and talk to its HTTP API.

`PrometheusServer` writes a config (and rule files) into a work directory, starts `prometheus`
on a free port with its TSDB there, waits until it is ready, and stops it by PID. The API helpers
return the `data` of a successful reply and raise `PrometheusError` with Prometheus' own error
text otherwise. The leading underscore keeps `python -m bench` from taking this for a benchmark.
"""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from harness.ports import free_port


class PrometheusError(RuntimeError):
    pass


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} not found on PATH (Debian package `prometheus`; .ci/run installs it)")
    return path


def config_yaml(
    scrape_configs: list[dict[str, Any]],
    rule_files: list[str],
    *,
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
    alertmanagers: Sequence[str] = (),
) -> str:
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": rule_files,
    }
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    config["scrape_configs"] = scrape_configs
    return yaml.safe_dump(config, sort_keys=False)


class PrometheusApi:
    """A keep-alive client of one Prometheus' HTTP API."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port = port
        self._timeout = timeout
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        url = path + ("?" + urllib.parse.urlencode(params) if params else "")
        for attempt in (1, 2):
            try:
                self._conn.request("GET", url)
                response = self._conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                self._conn.close()
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self._timeout)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def post_raw(self, path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        """POST a form (a query: safe to repeat); (status, body). The connection is reopened after any
        failure, and the request sent once more when the kept-alive connection had been closed by the
        server while idle (Prometheus closes idle connections), not when it timed out."""
        body = urllib.parse.urlencode(params)
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        for attempt in (1, 2):
            try:
                self._conn.request("POST", path, body=body, headers=headers)
                response = self._conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as error:
                self._conn.close()
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self._timeout)
                stale = isinstance(error, (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected))
                if attempt == 2 or not stale:
                    raise
        raise AssertionError("unreachable")

    def post_form(self, path: str, params: Mapping[str, str]) -> Any:
        status, body = self.post_raw(path, params)
        return _data(status, body, path)

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        status, body = self.get_raw(path, params)
        return _data(status, body, path)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.post_form("/api/v1/query", params)
        return _result(data)

    def query_range(self, expr: str, start: float, end: float, step: str) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        return _result(self.post_form("/api/v1/query_range", params))

    def close(self) -> None:
        self._conn.close()


def _data(status: int, body: bytes, path: str) -> Any:
    try:
        reply = json.loads(body)
    except ValueError:
        raise PrometheusError(f"{path}: HTTP {status}: {body[:500]!r}") from None
    if reply.get("status") != "success":
        raise PrometheusError(f"{path}: HTTP {status}: {reply.get('errorType')}: {reply.get('error')}")
    return reply["data"]


def _result(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    result = data["result"]
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": result}]
    return list(result)


class PrometheusServer:
    """One `prometheus` process on 127.0.0.1 with its config, rules and TSDB under `workdir`."""

    def __init__(
        self,
        workdir: Path,
        config_text: str,
        rule_files: Mapping[str, str] | None = None,
        *,
        data_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
        ready_timeout: float = 60.0,
        log_level: str = "warn",
        api_timeout: float = 60.0,
        port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.data_dir = data_dir or workdir / "data"
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self.port = port or free_port()
        self._port_given = port is not None
        self._ran = False
        self._api_timeout = api_timeout
        self._config_text = config_text
        self._rule_files = dict(rule_files or {})
        self._extra_args = extra_args
        self._log_level = log_level
        self._ready_timeout = ready_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.api = PrometheusApi(self.port, api_timeout)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for name, text in self._rule_files.items():
            (self.workdir / name).write_text(text, encoding="utf-8")
        self.config_path.write_text(self._config_text, encoding="utf-8")
        command = [
            binary("prometheus"),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            f"--log.level={self._log_level}",
            *self._extra_args,
        ]
        for attempt in range(3):
            command[3] = f"--web.listen-address=127.0.0.1:{self.port}"
            with self.log_path.open("ab") as log:
                self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
            try:
                self.wait_ready()
            except PrometheusError:
                self.stop()
                # Another process took the free port before this one bound it: a server that has
                # never run takes another (one that ran keeps its address: others point at it).
                taken = "address already in use" in self.log_tail(5)
                if not taken or self._ran or self._port_given or attempt == 2:
                    raise
                self.port = free_port()
                self.api = PrometheusApi(self.port, self._api_timeout)
                continue
            except BaseException:
                self.stop()  # `with` never reaches __exit__ when __enter__ fails: no orphaned server
                raise
            self._ran = True
            return self
        raise AssertionError("unreachable")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self._ready_timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self._process.returncode}:\n{self.log_tail()}")
            try:
                status, _ = self.api.get_raw("/-/ready")
                if status == 200:
                    # Still ours: a process that failed to bind leaves another server answering there.
                    time.sleep(0.3)
                    if self._process is not None and self._process.poll() is not None:
                        raise PrometheusError(f"prometheus exited with {self._process.returncode}:\n{self.log_tail()}")
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise PrometheusError(f"prometheus not ready after {self._ready_timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        self.api.close()
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL, as a crashed or OOM-killed Prometheus dies: no stale markers, no WAL flush."""
        self.api.close()
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
