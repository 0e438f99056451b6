"""The container HEALTHCHECK: GET /healthz on the port the poller listens on; exit 0 when it answers.

The image has no shell or curl, so the probe is this module: `python3 -m poller.healthcheck`.
It reads the same `POLLER_LISTEN` the poller does (the Dockerfile sets it), and probes loopback.
"""

from __future__ import annotations

import os
import sys
import urllib.request

from poller.settings import DEFAULT_LISTEN, ENV_LISTEN, SettingsError, parse_listen


def probe_url(listen: str) -> str:
    host, port = parse_listen(listen)
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def main() -> int:
    try:
        url = probe_url(os.environ.get(ENV_LISTEN) or DEFAULT_LISTEN)
    except SettingsError as err:
        print(f"healthcheck: {ENV_LISTEN}: {err}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return 0 if response.status == 200 else 1
    except OSError as err:
        print(f"healthcheck: {url}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
