"""Flags and environment of the poller, validated into `PollerSettings`.

Every setting is a flag; each has an environment variable as its default (flags win), so the
DaemonSet can set them either way. Errors name the flag or variable and what was wrong.
"""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_LISTEN = "0.0.0.0:9400"
DEFAULT_MIN_INTERVAL_SECONDS = 5.0  # the poll period of the nvidia-smi poller this replaces
MAX_MIN_INTERVAL_SECONDS = 3600.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

ENV_LISTEN = "POLLER_LISTEN"
ENV_MIN_INTERVAL = "POLLER_MIN_INTERVAL"
ENV_LOG_LEVEL = "POLLER_LOG_LEVEL"
ENV_NODE_NAME = "NODE_NAME"  # set by the Kubernetes downward API (spec.nodeName)
ENV_WEB_CONFIG_FILE = "POLLER_WEB_CONFIG_FILE"
ENV_MAX_REQUESTS = "POLLER_MAX_REQUESTS"
ENV_READ_HEADER_TIMEOUT = "POLLER_READ_HEADER_TIMEOUT"
DEFAULT_MAX_REQUESTS = 64
DEFAULT_READ_HEADER_TIMEOUT_SECONDS = 10.0


class SettingsError(ValueError):
    """A flag or environment variable has a bad value."""


@dataclass(frozen=True)
class PollerSettings:
    host: str
    port: int
    min_interval_seconds: float
    node_name: str
    log_level: str = "INFO"
    web_config_file: str | None = None  # TLS and authentication (foxhunt_trainer.contract.web_config)
    max_requests: int = DEFAULT_MAX_REQUESTS
    read_header_timeout_seconds: float = DEFAULT_READ_HEADER_TIMEOUT_SECONDS


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::]:PORT`) into (host, port); port 1-65535."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise SettingsError(f"{value!r} is not HOST:PORT (for example 0.0.0.0:9400 or [::]:9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise SettingsError(f"{value!r}: write an IPv6 host in brackets, like [::]:9400")
    if not host:
        raise SettingsError(f"{value!r}: empty host")
    if not port_text.isdigit():
        raise SettingsError(f"{value!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise SettingsError(f"{value!r}: port {port} is outside 1-65535")
    return host, port


def parse_interval(value: str) -> float:
    """Seconds between NVML passes: a finite number from 0 to 3600."""
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_MIN_INTERVAL_SECONDS:
        raise SettingsError(f"{value!r}: must be between 0 and {MAX_MIN_INTERVAL_SECONDS:g} seconds")
    return seconds


def parse_max_requests(value: str) -> int:
    """Requests served at once: a whole number from 1 to 10000."""
    if not value.strip().isdigit() or not 1 <= int(value) <= 10_000:
        raise SettingsError(f"{value!r}: expected a whole number from 1 to 10000")
    return int(value)


def parse_timeout(value: str) -> float:
    """Seconds: a finite number above 0, at most 3600."""
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or not 0 < seconds <= 3600:
        raise SettingsError(f"{value!r}: must be above 0 and at most 3600 seconds")
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m poller",
        description="NVML GPU poller: a Prometheus exporter of the catalog's ml_gpu_* metrics.",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address to serve /metrics and /healthz on (env {ENV_LISTEN}; default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--min-interval",
        metavar="SECONDS",
        help="serve the last NVML pass to scrapes that come sooner than this after it; 0 = a pass per "
        f"scrape (env {ENV_MIN_INTERVAL}; default {DEFAULT_MIN_INTERVAL_SECONDS:g})",
    )
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help=f"value of the `node` label (env {ENV_NODE_NAME}, from the downward API; default: host name)",
    )
    parser.add_argument(
        "--web-config-file",
        metavar="PATH",
        help="TLS and authentication of /metrics, exporter-toolkit style (tls_server_config, "
        f"basic_auth_users, bearer_token_hashes) (env {ENV_WEB_CONFIG_FILE}; default: plain HTTP, open)",
    )
    parser.add_argument(
        "--max-requests",
        metavar="N",
        help="requests served at once; more are answered 503 at once "
        f"(env {ENV_MAX_REQUESTS}; default {DEFAULT_MAX_REQUESTS})",
    )
    parser.add_argument(
        "--read-header-timeout",
        metavar="SECONDS",
        help="a connection must send a complete request header (and TLS handshake) within this long "
        f"(env {ENV_READ_HEADER_TIMEOUT}; default {DEFAULT_READ_HEADER_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--log-level", metavar="LEVEL", help=f"one of {', '.join(LOG_LEVELS)} (env {ENV_LOG_LEVEL}; default INFO)"
    )
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> PollerSettings:
    """Settings from flags, then environment, then defaults; SettingsError names the culprit."""
    args = _parser().parse_args(list(argv))

    def pick(flag_value: str | None, flag: str, env: str, default: str) -> tuple[str, str]:
        if flag_value is not None:
            return flag_value, flag
        if environ.get(env, "") != "":
            return environ[env], f"environment variable {env}"
        return default, f"default of {flag}"

    listen, source = pick(args.listen, "--listen", ENV_LISTEN, DEFAULT_LISTEN)
    try:
        host, port = parse_listen(listen)
    except SettingsError as err:
        raise SettingsError(f"{source}: {err}") from None

    interval_text, source = pick(
        args.min_interval, "--min-interval", ENV_MIN_INTERVAL, str(DEFAULT_MIN_INTERVAL_SECONDS)
    )
    try:
        min_interval = parse_interval(interval_text)
    except SettingsError as err:
        raise SettingsError(f"{source}: {err}") from None

    node, _ = pick(args.node_name, "--node-name", ENV_NODE_NAME, "")
    node = node.strip() or socket.gethostname()

    level, source = pick(args.log_level, "--log-level", ENV_LOG_LEVEL, "INFO")
    if level.upper() not in LOG_LEVELS:
        raise SettingsError(f"{source}: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    web_config, _ = pick(args.web_config_file, "--web-config-file", ENV_WEB_CONFIG_FILE, "")
    text, source = pick(args.max_requests, "--max-requests", ENV_MAX_REQUESTS, str(DEFAULT_MAX_REQUESTS))
    try:
        max_requests = parse_max_requests(text)
    except SettingsError as err:
        raise SettingsError(f"{source}: {err}") from None
    text, source = pick(
        args.read_header_timeout,
        "--read-header-timeout",
        ENV_READ_HEADER_TIMEOUT,
        str(DEFAULT_READ_HEADER_TIMEOUT_SECONDS),
    )
    try:
        read_header_timeout = parse_timeout(text)
    except SettingsError as err:
        raise SettingsError(f"{source}: {err}") from None
    return PollerSettings(
        host=host,
        port=port,
        min_interval_seconds=min_interval,
        node_name=node,
        log_level=level.upper(),
        web_config_file=web_config.strip() or None,
        max_requests=max_requests,
        read_header_timeout_seconds=read_header_timeout,
    )
