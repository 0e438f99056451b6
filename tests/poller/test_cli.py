"""Flags and environment: defaults, precedence, and clear errors for bad values."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from poller.healthcheck import probe_url
from poller.settings import DEFAULT_MIN_INTERVAL_SECONDS, SettingsError, parse_settings


def test_defaults() -> None:
    settings = parse_settings([], {"NODE_NAME": "gpu-node-7"})
    assert (settings.host, settings.port) == ("0.0.0.0", 9400)
    assert settings.min_interval_seconds == DEFAULT_MIN_INTERVAL_SECONDS == 5.0
    assert settings.node_name == "gpu-node-7"
    assert settings.log_level == "INFO"


def test_node_name_falls_back_to_the_host_name() -> None:
    assert parse_settings([], {}).node_name


def test_environment_then_flags_win() -> None:
    env = {
        "POLLER_LISTEN": "127.0.0.1:9500",
        "POLLER_MIN_INTERVAL": "2.5",
        "NODE_NAME": "a",
        "POLLER_LOG_LEVEL": "debug",
    }
    settings = parse_settings([], env)
    assert (settings.host, settings.port, settings.min_interval_seconds, settings.log_level) == (
        "127.0.0.1",
        9500,
        2.5,
        "DEBUG",
    )
    settings = parse_settings(["--listen", "[::1]:9601", "--min-interval", "0", "--node-name", "b"], env)
    assert (settings.host, settings.port, settings.min_interval_seconds, settings.node_name) == ("::1", 9601, 0.0, "b")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--listen", "0.0.0.0:http"], {}, r"--listen: '0.0.0.0:http': port 'http' is not a number"),
        (["--listen", "0.0.0.0:70000"], {}, r"--listen: .*port 70000 is outside 1-65535"),
        (["--listen", "0.0.0.0:0"], {}, r"port 0 is outside 1-65535"),
        (["--listen", "9400"], {}, r"is not HOST:PORT"),
        (["--listen", "::1:9400"], {}, r"IPv6 host in brackets"),
        ([], {"POLLER_LISTEN": "localhost:-1"}, r"environment variable POLLER_LISTEN: .*port '-1' is not a number"),
        (["--min-interval", "fast"], {}, r"--min-interval: 'fast' is not a number of seconds"),
        (["--min-interval", "-1"], {}, r"must be between 0 and 3600 seconds"),
        (["--min-interval", "nan"], {}, r"must be between 0 and 3600 seconds"),
        (["--min-interval", "inf"], {}, r"must be between 0 and 3600 seconds"),
        ([], {"POLLER_MIN_INTERVAL": "5s"}, r"environment variable POLLER_MIN_INTERVAL: '5s' is not a number"),
        (["--log-level", "chatty"], {}, r"--log-level: 'chatty' is not one of DEBUG, INFO, WARNING, ERROR"),
    ],
)
def test_bad_values_are_refused_with_the_culprit_named(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_settings(argv, env)


def run_poller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poller", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/nonexistent"},
    )


def test_bad_flag_exits_2_with_one_clear_line() -> None:
    result = run_poller("--listen", "0.0.0.0:99999")
    assert result.returncode == 2
    assert result.stderr.strip() == "poller: error: --listen: '0.0.0.0:99999': port 99999 is outside 1-65535"


def test_unknown_flag_exits_2_with_usage() -> None:
    result = run_poller("--interval", "5")
    assert result.returncode == 2
    assert "unrecognized arguments: --interval" in result.stderr


def test_port_in_use_exits_1_with_a_clear_error() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = run_poller("--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert re.search(rf"cannot listen on 127\.0\.0\.1:{port}: .*Address already in use", result.stderr)


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("0.0.0.0:9400", "http://127.0.0.1:9400/healthz"),
        ("[::]:9401", "http://[::1]:9401/healthz"),
        ("10.0.0.5:9402", "http://10.0.0.5:9402/healthz"),
    ],
)
def test_healthcheck_probes_the_listen_port_on_loopback(listen: str, url: str) -> None:
    assert probe_url(listen) == url
