"""The stacks are the `Pulumi.<stack>.yaml` files present: a new stack is one new file.

Standard library only, so CI can list the stacks before any virtualenv exists:

    python3 -m infra.stacks                 # one stack per line, in deployment order
    python3 -m infra.stacks --github-matrix # JSON for a workflow matrix: [{"stack", "kubeconfigSecret"}]

Deployment order (main's `pulumi up`, one stack at a time): stacks whose name says production
(`prod`, `production`) last, `staging` before them, every other stack first, by name within each.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STACK_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label
_LAST = {"staging": 1, "prod": 2, "production": 2}


def available_stacks(root: Path = REPO_ROOT) -> list[str]:
    """Every `Pulumi.<stack>.yaml` in `root`, sorted by name."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


STACKS: tuple[str, ...] = tuple(available_stacks())


def deployment_order(stacks: list[str]) -> list[str]:
    return sorted(stacks, key=lambda s: (_LAST.get(s, 0), s))


def kubeconfig_secret(stack: str) -> str:
    """The GitHub secret with the read-only kubeconfig a pull request's preview of `stack` uses."""
    return "KUBECONFIG_" + re.sub(r"[^A-Z0-9]", "_", stack.upper())


def bad_stack_names(stacks: list[str]) -> list[str]:
    return [s for s in stacks if not STACK_NAME.match(s)]


def github_matrix(root: Path = REPO_ROOT) -> list[dict[str, str]]:
    stacks = available_stacks(root)
    bad = bad_stack_names(stacks)
    if bad:
        raise SystemExit(f"stack names must be DNS labels (lower-case letters, digits, '-'): {', '.join(bad)}")
    return [{"stack": s, "kubeconfigSecret": kubeconfig_secret(s)} for s in deployment_order(stacks)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m infra.stacks", description=__doc__.splitlines()[0])
    parser.add_argument("--github-matrix", action="store_true", help="print the workflow matrix as JSON")
    args = parser.parse_args(argv)
    if args.github_matrix:
        print(json.dumps(github_matrix(), separators=(",", ":")))
    else:
        print("\n".join(deployment_order(available_stacks())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
