"""Offline render: `python -m infra.render --stack dev` (what `make render` runs).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.mock_engine import MockRun, RecordedResource, run_program
from infra.settings import PROJECT, SECRET_KEYS, DictConfigSource, Settings, SettingsError, load_settings
from infra.stacks import available_stacks

REPO_ROOT = Path(__file__).resolve().parent.parent
RENDERED = REPO_ROOT / "rendered"


class StackFileError(ValueError):
    pass


STACKS: tuple[str, ...] = tuple(available_stacks())


def placeholder_secret(stack: str, key: str) -> str:
    """What a secret holds in an offline render: it cannot be decrypted, and must not be real."""
    if key.endswith("Url"):
        return f"https://alerts.invalid/{stack}/{key}"
    return f"offline-placeholder-{key}"


@dataclass(frozen=True)
class StackConfig:
    stack: str
    values: Mapping[str, str]  # key without project prefix -> config string (JSON for objects)
    secret_keys: frozenset[str]
    default_kube_context: str | None = None  # `kubernetes:context` (the default provider's), if set

    def source(self) -> DictConfigSource:
        return DictConfigSource(self.stack, self.values, self.secret_keys)

    def pulumi_config(self) -> dict[str, str]:
        return {f"{PROJECT}:{k}": v for k, v in self.values.items()}


def yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """`Pulumi.x.yaml, line 3, column 1: <what is wrong>`: the file and place, not "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else path.name
    problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
    return f"{where} is not valid YAML: {problem or exc}"


def read_stack_config(stack: str, root: Path = REPO_ROOT, overrides: Mapping[str, Any] | None = None) -> StackConfig:
    """Read `Pulumi.<stack>.yaml` the way the Pulumi CLI hands config to a program.

    Objects and lists become JSON strings, scalars strings. `secure:` values (encrypted by
    `pulumi config set --secret`) cannot be decrypted offline: they, and secret keys the file
    does not set, get an obviously fake placeholder that is still marked secret.
    """
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackFileError(
            f"unknown stack {stack!r}: no {path.name}; expected one of {', '.join(available_stacks(root))}"
        )
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise StackFileError(yaml_error(path, exc)) from exc
    raw = document.get("config") or {}
    if not isinstance(raw, Mapping):
        raise StackFileError(f"{path.name}: `config` must be a mapping of {PROJECT}:<key> to values")
    entries: dict[str, Any] = {}
    default_kube_context = raw.get("kubernetes:context")
    for full_key, value in raw.items():
        namespace, _, key = str(full_key).partition(":")
        if namespace != PROJECT or not key:
            continue  # provider config (kubernetes:..., pulumi:...) is not the program's
        entries[key] = value
    entries.update(overrides or {})

    values: dict[str, str] = {}
    secret_keys: set[str] = set()
    for key, value in entries.items():
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            values[key] = placeholder_secret(stack, key)
            secret_keys.add(key)
        elif isinstance(value, str):
            values[key] = value
        else:
            values[key] = json.dumps(value)
    for key in SECRET_KEYS:
        if key not in values:
            values[key] = placeholder_secret(stack, key)
            secret_keys.add(key)
    return StackConfig(
        stack, values, frozenset(secret_keys), str(default_kube_context) if default_kube_context else None
    )


def validate_stack(config: StackConfig) -> Settings:
    """Settings as the program will see them (placeholders for secrets); raises SettingsError."""
    from infra.kube_provider import default_provider_conflict

    settings = load_settings(config.source(), lambda key: config.values.get(key))
    conflict = default_provider_conflict(config.stack, settings.kubernetes, config.default_kube_context)
    if conflict:
        raise SettingsError(config.stack, [conflict])
    return settings


# ------------------------------------------------------------------------------------------------
# From recorded resources to files
# ------------------------------------------------------------------------------------------------

KUBERNETES_PREFIX = "kubernetes:"
STACK_OUTPUTS_PATH = "pulumi/stack-outputs.json"


def kubernetes_manifest(resource: RecordedResource) -> dict[str, Any] | None:
    """The object a Kubernetes resource sends to the API server (patches: the patch object)."""
    if not resource.type.startswith(KUBERNETES_PREFIX) or not resource.custom:
        return None
    _, group_version, kind = resource.type.split(":")
    group, _, version = group_version.rpartition("/")
    if group == "core":
        group = ""
    kind = kind.removesuffix("Patch")
    api_version = f"{group}/{version}" if group else version
    manifest = {k: v for k, v in resource.inputs.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **manifest}


def manifest_filename(resource: RecordedResource, manifest: Mapping[str, Any]) -> str:
    kind = resource.type.rsplit(":", 1)[-1].lower()
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or "cluster"
    return f"kubernetes/{kind}_{namespace}_{meta.get('name', resource.name)}.yaml"


def dump_yaml(document: Any) -> str:
    """Deterministic YAML; libyaml's emitter (40x faster than PyYAML's pure-Python one)."""
    return yaml.dump(
        document, Dumper=yaml.CSafeDumper, sort_keys=True, default_flow_style=False, width=120, allow_unicode=True
    )


@dataclass
class RenderResult:
    stack: str
    settings: Settings
    run: MockRun
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)  # relative path -> object
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text (all files)


def render_stack(stack: str, root: Path = REPO_ROOT, overrides: Mapping[str, Any] | None = None) -> RenderResult:
    """Validate the stack's config, run the program under mocks, build every output file in memory."""
    from infra import artifacts, program

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


Check = Callable[[RenderResult], list[str]]


def offline_checks() -> list[tuple[str, Check]]:
    from infra import checks

    return checks.ALL_CHECKS


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
    parser = argparse.ArgumentParser(prog="python -m infra.render", description=__doc__.splitlines()[0])
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
        for check_name, check in offline_checks():
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
