"""`python -m poller`: run the NVML GPU poller."""

from __future__ import annotations

import sys

from poller.cli import main

if __name__ == "__main__":
    sys.exit(main())
