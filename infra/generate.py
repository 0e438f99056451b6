"""`python -m infra.generate` (what `make generate` runs): rewrite every committed generated file
from the code. Never edit these files by hand; `make check` fails when one differs from what
this writes.

- docs/runbooks.md: one section per alert, from the rule definitions (observability.rules);
- dashboards/README.md: every dashboard's rows, panels and the series they read (dashboards);
- policy/config/<stack>.json: the stack context the CrossGuard pack reads for each stack, from
  the stack's settings (infra.policy_context).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

from dashboards import readme
from infra import REPO_ROOT
from infra.policy_context import context_from_settings
from infra.settings import available_stacks, read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.rules.runbooks import render_runbooks
from policy.pack_config import context_to_config


def pack_config(stack: str) -> str:
    settings = validate_stack(read_stack_config(stack))
    return json.dumps(context_to_config(context_from_settings(settings)), indent=2, sort_keys=True) + "\n"


def generators() -> dict[str, Callable[[], str]]:
    """Path relative to the repository root -> the function that writes its text."""
    files: dict[str, Callable[[], str]] = {
        "docs/runbooks.md": lambda: render_runbooks(ObservabilityConfig()),
        "dashboards/README.md": readme.render,
    }
    for stack in available_stacks():
        files[f"policy/config/{stack}.json"] = functools.partial(pack_config, stack)
    return files


def generated_files() -> dict[str, str]:
    return {path: generate() for path, generate in generators().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.generate", description=__doc__.splitlines()[0])
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
