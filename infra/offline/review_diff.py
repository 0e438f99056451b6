"""Review diff: `make diff STACK=dev [BASE=<git ref>]` (what a pull request's comment shows).

Renders the stack twice, offline and without credentials: from the commit `BASE` (default `HEAD`,
i.e. what the working tree changes) and from the working tree, then prints a per-file unified diff
of `rendered/<stack>/`. Both sides are normalised so that only meaning shows: YAML and JSON are
re-emitted with sorted keys, multi-line strings (embedded rules, dashboards, scrape configs) as
literal blocks, one line per line; secrets are the render's fixed placeholders on both sides.

Exit status: 0 with or without differences; 2 when the working tree does not render (its error is
printed). A base that does not render, or has no such stack, counts as empty (a new stack).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
COMMENT_LIMIT = 60_000  # GitHub comments hold 65,536 characters


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and all(line == line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _expand(value: Any) -> Any:
    """Embedded JSON documents (dashboards in ConfigMaps) become structure, so they diff by line."""
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, str) and value.lstrip().startswith("{") and "\n" in value:
        try:
            return _expand(json.loads(value))
        except json.JSONDecodeError:
            return value
    return value


def normalise(name: str, text: str) -> list[str]:
    """The file's lines as the diff compares them."""
    try:
        if name.endswith(".json"):
            document: Any = json.loads(text)
            return json.dumps(_expand(document), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
        if name.endswith((".yaml", ".yml")):
            documents = [_expand(d) for d in yaml.safe_load_all(text)]
            dumped = yaml.dump_all(documents, Dumper=_Dumper, sort_keys=True, width=1_000, allow_unicode=True)
            return dumped.splitlines()
    except (json.JSONDecodeError, yaml.YAMLError):
        pass
    return text.splitlines()


def read_tree(directory: Path) -> dict[str, str]:
    if not directory.is_dir():
        return {}
    return {str(p.relative_to(directory)): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class Side:
    label: str
    files: dict[str, str]
    note: str = ""


def render_tree(source: Path, stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`python -m infra.offline.render` of the checkout at `source` (offline checks skipped: this is a view)."""
    return subprocess.run(
        [sys.executable, "-m", "infra.offline.render", "--stack", stack, "--out", str(out), "--no-check"],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def export_commit(ref: str, target: Path, repo: Path) -> str:
    """The tracked files of commit `ref` into `target`; returns the full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=repo, capture_output=True, text=True, check=False
    )
    if commit.returncode != 0:
        raise SystemExit(f"make diff: BASE={ref!r} is not a commit of this repository: {commit.stderr.strip()}")
    sha = commit.stdout.strip()
    archive = target / "base.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), sha], cwd=repo, check=True)
    tree = target / "base"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        # Committed symlinks (a linked virtualenv, say) are not part of what renders: skip them.
        tar.extractall(tree, members=[m for m in tar.getmembers() if not (m.issym() or m.islnk())], filter="data")
    return sha


def base_side(ref: str, stack: str, work: Path, repo: Path) -> Side:
    sha = export_commit(ref, work, repo)
    label = f"{ref} ({sha[:12]})" if ref != sha else sha[:12]
    if not (work / "base" / f"Pulumi.{stack}.yaml").is_file():
        return Side(label, {}, f"the stack {stack!r} does not exist at {label}: every file is new")
    proc = render_tree(work / "base", stack, work / "base-out")
    if proc.returncode != 0:
        return Side(label, {}, f"{label} does not render (compared as empty): {proc.stderr.strip()[-2000:]}")
    return Side(label, read_tree(work / "base-out" / stack))


def file_diffs(base: Side, head: Side) -> list[tuple[str, str, list[str]]]:
    """(path, status, unified diff lines) for every file that differs."""
    out = []
    for name in sorted(set(base.files) | set(head.files)):
        old = normalise(name, base.files[name]) if name in base.files else []
        new = normalise(name, head.files[name]) if name in head.files else []
        if old == new:
            continue
        status = "added" if name not in base.files else "removed" if name not in head.files else "changed"
        lines = list(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", n=3, lineterm=""))
        out.append((name, status, lines))
    return out


def report(stack: str, base: Side, head: Side, diffs: list[tuple[str, str, list[str]]], fmt: str) -> str:
    counts = {s: sum(1 for _, st, _ in diffs if st == s) for s in ("changed", "added", "removed")}
    title = (
        f"rendered/{stack}: {counts['changed']} changed, {counts['added']} added, {counts['removed']} removed "
        f"({base.label} -> {head.label})"
    )
    notes = [n for n in (base.note, head.note) if n]
    if fmt == "markdown":
        parts = [f"### `make diff STACK={stack}`", "", title, ""]
        parts += [f"> {n}" for n in notes]
        if not diffs:
            parts.append("No difference in the rendered output.")
        used = sum(len(p) for p in parts)
        for name, status, lines in diffs:
            block = f"<details><summary><code>{name}</code> ({status})</summary>\n\n```diff\n"
            block += "\n".join(lines) + "\n```\n</details>\n"
            if used + len(block) > COMMENT_LIMIT:
                parts.append(f"... cut here (comment limit); run `make diff STACK={stack}` for the rest.")
                break
            parts.append(block)
            used += len(block)
        return "\n".join(parts) + "\n"
    parts = [title, *notes]
    if not diffs:
        parts.append("no difference in the rendered output")
    for name, status, lines in diffs:
        parts += [f"=== {name} ({status})", *lines]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.offline.review_diff", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--base", default="HEAD", help="git ref to compare with (default HEAD)")
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    args = parser.parse_args(argv)
    repo = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="foxhunt-diff-") as tmp:
        work = Path(tmp)
        head_proc = render_tree(repo, args.stack, work / "head-out")
        if head_proc.returncode != 0:
            print(f"make diff: the working tree does not render:\n{head_proc.stderr.strip()}", file=sys.stderr)
            return 2
        head = Side("working tree", read_tree(work / "head-out" / args.stack))
        base = base_side(args.base, args.stack, work, repo)
        sys.stdout.write(report(args.stack, base, head, file_diffs(base, head), args.format))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
