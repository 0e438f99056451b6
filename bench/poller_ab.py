"""Poller collection CPU time of two checkouts side by side in one run: a change to the poller
against the tree it started from (`git worktree add /tmp/base <ref>`).

Each round runs the CPU part of `python -m bench poller` (BENCH_POLLER_ONLY_CPU=1) once in each
tree, the trees taking turns going first; the median and p99 of every round are printed with the
ratio of the two trees, then the median over the rounds.

Run: `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench.poller_ab /tmp/base --rounds 3`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_FIGURES = re.compile(r"with GPM (\d+) µs median, (\d+) µs p99; without GPM (\d+) µs")


def cpu_figures(tree: Path) -> tuple[float, float, float]:
    """(median, p99 with GPM, median without GPM) in µs, from one CPU-only bench run in `tree`."""
    env = {**os.environ, "BENCH_POLLER_ONLY_CPU": "1", "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "poller"], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    match = _FIGURES.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"bench in {tree} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    median, p99, plain = (float(x) for x in match.groups())
    return median, p99, plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the checkout to compare with (a git worktree of the base ref)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"before": args.base.resolve(), "after": REPO}
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for i in range(args.rounds):
        order = list(trees) if i % 2 == 0 else list(trees)[::-1]
        for name in order:
            rounds[name].append(cpu_figures(trees[name]))
        b, a = rounds["before"][-1], rounds["after"][-1]
        print(
            f"round {i + 1}: with GPM median {b[0]:.0f} -> {a[0]:.0f} µs ({a[0] / b[0]:.2f}x), "
            f"p99 {b[1]:.0f} -> {a[1]:.0f} µs ({a[1] / b[1]:.2f}x); without GPM median {b[2]:.0f} -> {a[2]:.0f} µs"
        )
    print("| tree | with GPM, median | with GPM, p99 | without GPM, median |")
    print("| --- | --- | --- | --- |")
    for name, figures in rounds.items():
        med = [statistics.median(column) for column in zip(*figures, strict=True)]
        print(f"| {name} | {med[0]:.0f} µs | {med[1]:.0f} µs | {med[2]:.0f} µs |")


if __name__ == "__main__":
    main()
