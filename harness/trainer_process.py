"""The synthetic trainer (`python -m examples.synthetic_trainer`) as a served process on a free
loopback port, stopped by PID: what the end-to-end tests and the HTTP-limits benchmark start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.fake_nvml import ServedProcess
from harness.ports import free_port


class TrainerProcess(ServedProcess):
    """`python -m examples.synthetic_trainer` on a free loopback port, stopped by PID."""

    READY_TIMEOUT = 30.0  # it imports OpenTelemetry's SDK first
    STOP_TIMEOUT = 15.0

    def __init__(self, work_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        port = free_port()
        command = [sys.executable, "-m", "examples.synthetic_trainer", "--listen", f"127.0.0.1:{port}", *args]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        environment.update(env or {})
        super().__init__("trainer", command, work_dir, environment, port)

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)
