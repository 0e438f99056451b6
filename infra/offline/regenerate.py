"""`python -m infra.offline.regenerate` (what `make generate` runs): rewrite every committed generated file
from the code. Never edit these files by hand; `make check` fails when one differs from what
this writes.

- docs/runbooks.md: one section per alert, from the rule definitions (observability.rules);
- dashboards/README.md: every dashboard's rows, panels and the series they read (dashboards);
- foxhunt_trainer/contract/verdict_thresholds.py: the bottleneck verdict's thresholds of
  observability/thresholds.yaml, for the trainer's end-of-run summary (the wheel reads no YAML).

The CrossGuard pack's stack context is not among them: the render writes it from the stack's own
settings (rendered/<stack>/policy/pack-config.json), so there is no committed copy to go stale.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dashboards import readme
from infra import REPO_ROOT
from observability.config import ObservabilityConfig
from observability.rules import goodput
from observability.rules.runbooks import render_runbooks


def generators() -> dict[str, Callable[[], str]]:
    """Path relative to the repository root -> the function that writes its text."""
    return {
        "docs/runbooks.md": lambda: render_runbooks(ObservabilityConfig()),
        "dashboards/README.md": readme.render,
        goodput.VERDICT_THRESHOLDS_MODULE: lambda: goodput.render_verdict_thresholds(ObservabilityConfig()),
    }


def generated_files() -> dict[str, str]:
    return {path: generate() for path, generate in generators().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.offline.regenerate", description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the generated files' paths, write nothing")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(generators()))
        return 0
    for path, text in generated_files().items():
        target = REPO_ROOT / path
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
