"""Benchmark of the deployment side: offline render of each stack and the strict schema check.

`python -m bench deployment` (part of `make bench`) prints the figures and writes them into the
"Deployment render and schema check" section of BENCHMARKS.md (between its markers).

- render: `render_stack(stack)` in-process (program under the Pulumi mocks, every manifest and
  file built), median of repeated runs after one warm-up; plus the cold CLI
  (`python -m infra.offline.render --stack X --out <tmp>`: interpreter start, imports, render, checks, write).
- schema check: per manifest with the cached validators (warm), the first validation of each kind
  (compiling its validator), and, side by side, `kubernetes_validate.validate(..., strict=True)`,
  the library call that loads and compiles the schema on every call.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import kubernetes_validate

from bench import write_section
from infra import REPO_ROOT
from infra.offline import render, schema_check
from infra.offline.result import RenderResult, kubernetes_manifest
from infra.settings import available_stacks

STACKS = available_stacks()
START, END = "<!-- deployment:start -->", "<!-- deployment:end -->"


def _median_seconds(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _builtin_objects(result: RenderResult) -> list[tuple[dict[str, Any], bool]]:
    out = []
    for resource in result.run.resources:
        manifest = kubernetes_manifest(resource)
        if manifest is not None:
            out.append((manifest, resource.type.endswith("Patch")))
    return out


def _cli_seconds(stack: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "infra.offline.render", "--stack", stack, "--out", out],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - started


def measure() -> dict[str, Any]:
    rows = []
    results = {}
    for stack in STACKS:
        results[stack] = render.render_stack(stack)  # warm-up (imports, generators' caches)

        def render_once(name: str = stack) -> None:
            render.render_stack(name)

        in_process = _median_seconds(render_once, 5)
        rows.append(
            {
                "stack": stack,
                "resources": len(results[stack].run.resources),
                "objects": len(results[stack].manifests),
                "files": len(results[stack].files),
                "render_ms": in_process * 1000,
                "cli_s": _cli_seconds(stack),
            }
        )

    result = results["prod"]
    version = result.settings.kubernetes_version
    objects = _builtin_objects(result)

    schema_check.validator.cache_clear()
    started = time.perf_counter()
    for manifest, patch in objects:
        schema_check.validate_manifest(manifest, version, patch=patch)
    cold_ms = (time.perf_counter() - started) * 1000

    rounds = 50
    warm = _median_seconds(
        lambda: [schema_check.validate_manifest(m, version, patch=p) for m, p in objects], rounds
    ) / len(objects)

    library = [m for m, patch in objects if not patch and "." not in m["apiVersion"].split("/")[0]]
    library_per = _median_seconds(
        lambda: [kubernetes_validate.validate(m, version, strict=True) for m in library], 3
    ) / len(library)
    ours_same = _median_seconds(lambda: [schema_check.validate_manifest(m, version) for m in library], rounds) / len(
        library
    )
    return {
        "rows": rows,
        "objects": len(objects),
        "cold_ms": cold_ms,
        "warm_ms": warm * 1000,
        "library_count": len(library),
        "library_ms": library_per * 1000,
        "ours_same_ms": ours_same * 1000,
        "load": os.getloadavg()[0],
        "version": version,
    }


def section(figures: dict[str, Any]) -> str:
    lines = [
        START,
        "## Deployment render and schema check",
        "",
        "Command: `.venv/bin/python -m bench deployment` (part of `make bench`). Machine: 2 CPU cores shared "
        f"with other work (load average at start {figures['load']:.1f}), Python {sys.version.split()[0]}.",
        "",
        "**Render** of each stack: the Pulumi program under the mock engine, every manifest, dashboard, rules, "
        "scrape-config, datasource and Job file built in memory (median of 5 after a warm-up), and the whole "
        "CLI once (`python -m infra.offline.render --stack X`: interpreter start, imports, render, schema check, "
        "write).",
        "",
        "| stack | Pulumi resources | Kubernetes objects | files | render in-process | CLI end to end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in figures["rows"]:
        lines.append(
            f"| {row['stack']} | {row['resources']} | {row['objects']} | {row['files']} | "
            f"{row['render_ms']:.0f} ms | {row['cli_s']:.2f} s |"
        )
    ratio = figures["library_ms"] / figures["ours_same_ms"]
    lines += [
        "",
        f"**Strict schema check** (`infra/offline/schema_check.py`, prod stack, Kubernetes {figures['version']}, "
        f"{figures['objects']} objects incl. patches and custom resources):",
        "",
        "| what | per manifest |",
        "|---|---:|",
        f"| cached validators (warm): mean over the objects, median of 50 rounds | {figures['warm_ms']:.2f} ms |",
        f"| first round, compiling one validator per kind (cold) | {figures['cold_ms'] / figures['objects']:.1f} ms |",
        f"| `kubernetes_validate.validate(strict=True)`, {figures['library_count']} built-in objects | "
        f"{figures['library_ms']:.1f} ms |",
        f"| cached validators on the same {figures['library_count']} objects | {figures['ours_same_ms']:.2f} ms |",
        "",
        f"The cached validators are **{ratio:.0f}x** faster than the library call, which loads and compiles "
        "the schema (1.2 MB of definitions) on every call.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    figures = measure()
    text = section(figures)
    print(text)
    write_section(text, START, END)


if __name__ == "__main__":
    main()
