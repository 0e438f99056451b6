"""`python -m bench [NAME ...]`: run every benchmark module's `main()` (or only those named)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

# Short names (`python -m bench autolog`) of modules named for what they measure.
ALIASES = {"autolog": "autolog_overhead"}


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def main(argv: list[str]) -> int:
    names = [ALIASES.get(name, name) for name in argv] or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"unknown benchmark(s) {unknown}; expected some of {available()}", file=sys.stderr)
        return 2
    for name in names:
        print(f"== bench.{name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
