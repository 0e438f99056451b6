"""Offline checks run after every render, before anything is written: Kubernetes schemas, the
policies (the same ones the CrossGuard pack enforces), and promtool over the rules file."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from infra import kube_validate

if TYPE_CHECKING:
    from infra.render import RenderResult

RULES_FILE = "prometheus/rules.yaml"


def check_policies(result: RenderResult) -> list[str]:
    """Mandatory policy violations in the rendered objects, files and the stack file."""
    from infra.policy_context import REPO_ROOT, context_from_settings, rendered_objects
    from policy.engine import check_files, check_stack_file, evaluate, mandatory

    violations = evaluate(rendered_objects(result), context_from_settings(result.settings))
    violations += check_files(result.files)
    stack_file = REPO_ROOT / f"Pulumi.{result.stack}.yaml"
    if stack_file.is_file():
        violations += check_stack_file(stack_file.name, stack_file.read_text())
    return [v.message() for v in mandatory(violations)]


def check_rules_with_promtool(result: RenderResult) -> list[str]:
    """`promtool check rules` on the rendered rules file (Debian's prometheus package)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ["promtool not found: install Debian's `prometheus` package (`sudo make sysdeps`)"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_text(result.files[RULES_FILE])
        proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    return []


def check_provider(result: RenderResult) -> list[str]:
    from infra.kube_provider import check_render

    return check_render(result)


ALL_CHECKS: list[tuple[str, Callable[[RenderResult], list[str]]]] = [
    ("kubernetes-provider", check_provider),
    ("kubernetes-schema", kube_validate.check_render),
    ("policies", check_policies),
    ("promtool-rules", check_rules_with_promtool),
]
