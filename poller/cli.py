"""`python -m poller`: validate the flags and environment, then serve (NVML is touched only after
the settings are valid, so a bad flag exits 2 at once)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from poller.server import serve
from poller.settings import SettingsError, parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as err:
        print(f"poller: error: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return serve(settings)
