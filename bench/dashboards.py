"""Dashboards: cost of building, serialising, linting and promtool-checking the four dashboards.

    python -m bench dashboards

Prints a Markdown table (medians of repeated runs) for the BENCHMARKS.md section "Dashboards".
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dashboards import build_all, lint, to_json
from dashboards.queries import panel_queries
from observability.config import ObservabilityConfig

REPEATS = 20
CONFIG = ObservabilityConfig(platform_services=tuple(f"service-{i}" for i in range(8)))


def _median_ms(action: Callable[[], object], repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _promtool_ms(rules_file: Path, repeats: int = 5) -> float:
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool not found (Debian package prometheus)")

    def check() -> None:
        subprocess.run([promtool, "check", "rules", str(rules_file)], check=True, capture_output=True)

    return _median_ms(check, repeats)


def _lint_ms(dashboard: dict[str, Any]) -> float:
    return _median_ms(lambda: lint.problems(dashboard))


def main() -> None:
    dashboards = build_all(CONFIG)
    rows = []
    for uid, dashboard in dashboards.items():
        panels = [p for p in dashboard["panels"] if p["type"] != "row"]
        size = len(to_json(dashboard).encode())
        rows.append((uid, len(panels), len(panel_queries(dashboard)), size, _lint_ms(dashboard)))
    build_ms = _median_ms(lambda: build_all(CONFIG))
    json_ms = _median_ms(lambda: [to_json(d) for d in dashboards.values()])
    queries = [q for d in dashboards.values() for q in panel_queries(d) if q.datasource_type == "prometheus"]
    rules = [{"record": f"bench:q{i}:query", "expr": q.substituted} for i, q in enumerate(queries)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.yaml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "bench", "rules": rules}]}), encoding="utf-8")
        promtool_ms = _promtool_ms(path)

    print("| dashboard | panels | queries | JSON bytes | lint (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for uid, n_panels, n_queries, size, lint_ms in rows:
        print(f"| `{uid}` | {n_panels} | {n_queries} | {size} | {lint_ms:.1f} |")
    print()
    print(f"- build_all (4 dashboards): {build_ms:.1f} ms, median of {REPEATS}")
    print(f"- to_json (4 dashboards): {json_ms:.1f} ms, median of {REPEATS}")
    print(f"- promtool check rules over all {len(rules)} PromQL queries: {promtool_ms:.0f} ms, median of 5")


if __name__ == "__main__":
    main()
