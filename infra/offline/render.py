"""Offline render: `python -m infra.offline.render --stack dev` (what `make render` runs).

Runs the Pulumi program in-process under the mock engine (no CLI, cluster or credentials) and
writes every Kubernetes object, dashboard, rules file, scrape config and datasource file to
`rendered/<stack>/` in the layout of ARCHITECTURE.md, then runs the offline checks over them.
Output is deterministic. Bad config or an unknown stack exits non-zero and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra import REPO_ROOT, program
from infra.offline import artifacts, checks
from infra.offline.mock_engine import run_program
from infra.offline.policy_context import PACK_CONFIG_PATH, pack_config_json
from infra.offline.result import RenderResult, dump_yaml, kubernetes_manifest, manifest_filename
from infra.settings import PROJECT, SettingsError, StackFileError, read_stack_config, validate_stack

RENDERED = REPO_ROOT / "rendered"
STACK_OUTPUTS_PATH = "pulumi/stack-outputs.json"


def render_stack(stack: str, root: Path = REPO_ROOT, overrides: Mapping[str, Any] | None = None) -> RenderResult:
    """Validate the stack's config, run the program under mocks, build every output file in memory."""
    config = read_stack_config(stack, root, overrides)
    settings = validate_stack(config)  # fails before any resource is registered
    run = run_program(
        program.main,
        project=PROJECT,
        stack=stack,
        config=config.pulumi_config(),
        secret_keys=[f"{PROJECT}:{k}" for k in sorted(config.secret_keys)],
    )
    result = RenderResult(stack=stack, settings=settings, run=run)
    for resource in run.resources:
        manifest = kubernetes_manifest(resource)
        if manifest is None:
            continue
        name = manifest_filename(resource, manifest)
        if name in result.manifests:
            raise RuntimeError(f"two Kubernetes objects render to {name}: names must be unique per kind and namespace")
        result.manifests[name] = manifest
        result.files[name] = dump_yaml(manifest)
    for name, text in sorted(artifacts.artifact_files(settings).items()):
        result.files[name] = text
    result.files[PACK_CONFIG_PATH] = pack_config_json(settings)
    # What `pulumi stack output --json` shows after `pulumi up` (see infra/outputs.py).
    result.files[STACK_OUTPUTS_PATH] = json.dumps(run.outputs, indent=2, sort_keys=True) + "\n"
    return result


def write_rendered(result: RenderResult, out_root: Path = RENDERED) -> Path:
    """Write atomically: build the tree next to the target, then swap it in."""
    out_root.mkdir(parents=True, exist_ok=True)
    target = out_root / result.stack
    staging = Path(tempfile.mkdtemp(prefix=f".{result.stack}-", dir=out_root))
    try:
        for name, text in sorted(result.files.items()):
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def kubernetes_kinds(result: RenderResult) -> Counter[str]:
    """Kinds of the files under kubernetes/ (patches as `<Kind> patch`): what the summary counts."""
    kinds: Counter[str] = Counter()
    for name, text in result.files.items():
        if not name.startswith("kubernetes/"):
            continue
        document = result.manifests.get(name) or yaml.safe_load(text)
        patch = Path(name).name.split("_", 1)[0].endswith("patch")
        kinds[f"{document['kind']} patch" if patch else str(document["kind"])] += 1
    return kinds


def summary(result: RenderResult, seconds: float, target: Path, check_lines: list[str]) -> str:
    kinds = kubernetes_kinds(result)
    lines = [
        f"stack {result.stack}: {len(result.run.resources)} Pulumi resources, "
        f"{sum(kinds.values())} Kubernetes objects (one file each under kubernetes/)"
    ]
    lines += [f"  {count:3d}  {kind}" for kind, count in sorted(kinds.items())]
    by_dir = Counter(name.split("/", 1)[0] for name in result.files)
    lines.append(
        f"files written to {target.relative_to(REPO_ROOT) if target.is_relative_to(REPO_ROOT) else target}: "
        + ", ".join(f"{d}/ {n}" for d, n in sorted(by_dir.items()))
        + f" ({len(result.files)} in all)"
    )
    lines += check_lines
    lines.append(f"rendered in {seconds:.2f}s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.offline.render", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default dev)")
    parser.add_argument("--out", type=Path, default=RENDERED, help="output root (default rendered/)")
    parser.add_argument("--no-check", action="store_true", help="skip the offline checks after rendering")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    try:
        result = render_stack(args.stack)
    except (StackFileError, SettingsError) as exc:
        print(f"render failed, nothing written: {exc}", file=sys.stderr)
        return 2
    check_lines: list[str] = []
    failures: list[str] = []
    if not args.no_check:
        for check_name, check in checks.ALL_CHECKS:
            problems = check(result)
            failures += [f"{check_name}: {p}" for p in problems]
            check_lines.append(f"check {check_name}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    if failures:
        print("\n".join(check_lines), file=sys.stderr)
        print("render failed its checks, nothing written:\n" + "\n".join(f"  - {f}" for f in failures), file=sys.stderr)
        return 1
    target = write_rendered(result, args.out)
    print(summary(result, time.perf_counter() - started, target, check_lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
