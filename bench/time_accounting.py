"""The cost of the trainer library's time accounting in a real PyTorch training loop.

`python -m bench time_accounting [--rounds N] [--steps N]` (part of `make bench`; take the bench
lock: `flock /tmp/foxhunt-bench.lock .venv/bin/python -m bench time_accounting`). One process,
one thread for PyTorch, a CPU MLP (512 -> 1024 -> 1024 -> 10, batches of 128 from a DataLoader
over in-memory tensors) trained with SGD. Two loops run side by side in the same run, alternating
in blocks of `--steps` steps so that drift in the machine's load hits both alike:

- plain: `next(loader)`, forward, loss, backward, optimizer step;
- accounted: the same, with `job.phase("data_wait")` around the loader, `job.phase("compute")`
  around the step, `job.record_step(samples=...)` after it (steps, samples, the model FLOPs
  measured by PyTorch's FLOP counter, the last-step time), and the job's `/metrics` page scraped
  once a second by a client thread, as Prometheus would.

Reported: the median step time of each loop, the overhead as the median of the paired blocks'
ratios (accounted / plain - 1), and the instrumentation's own cost per step (the phase blocks and
record_step timed alone, without the model) as a share of the plain step. The goal: at most 0.5 %.
The section "Time accounting" of BENCHMARKS.md is rewritten with the figures.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bench._report import write_section
from observability.instrument import JobMetrics, TrainingMetrics

BEGIN = "<!-- bench.time_accounting: begin -->"
END = "<!-- bench.time_accounting: end -->"
GOAL = 0.005
BATCH = 128


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def _batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    data = TensorDataset(torch.randn(BATCH * 64, 512), torch.randint(0, 10, (BATCH * 64,)))
    while True:
        yield from DataLoader(data, batch_size=BATCH, shuffle=True)


class Loop:
    def __init__(self, job: JobMetrics | None) -> None:
        torch.manual_seed(0)
        self.model = _model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.batches = _batches()
        self.job = job

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        nn.functional.cross_entropy(self.model(x), y).backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()

    def run(self, steps: int) -> float:
        """Seconds per step over `steps` steps."""
        job = self.job
        start = time.perf_counter()
        if job is None:
            for _ in range(steps):
                x, y = next(self.batches)
                self._step(x, y)
        else:
            for _ in range(steps):
                with job.phase("data_wait"):
                    x, y = next(self.batches)
                with job.phase("compute"):
                    self._step(x, y)
                job.record_step(samples=BATCH)
        return (time.perf_counter() - start) / steps


def _scraper(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            response.read()


def _instrumentation_alone(job: JobMetrics, calls: int) -> float:
    """Seconds per step of the accounting calls alone (two phase blocks and record_step)."""
    start = time.perf_counter()
    for _ in range(calls):
        with job.phase("data_wait"):
            pass
        with job.phase("compute"):
            pass
        job.record_step(samples=BATCH)
    return (time.perf_counter() - start) / calls


def measure(rounds: int, steps: int, warmup: int = 20) -> dict[str, float]:
    torch.set_num_threads(1)
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    job = metrics.start_job("mlp", "bench-time-accounting", gpu_uuids=[])
    plain, accounted = Loop(None), Loop(job)
    x, y = next(accounted.batches)
    job.measure_model_flops(accounted._step, x, y, model=accounted.model)
    stop = threading.Event()
    scraper = threading.Thread(target=_scraper, args=(server.port, stop), daemon=True)
    scraper.start()
    try:
        plain.run(warmup)
        accounted.run(warmup)
        pairs: list[tuple[float, float]] = []
        for i in range(rounds):
            first, second = (plain, accounted) if i % 2 == 0 else (accounted, plain)
            a, b = first.run(steps), second.run(steps)
            pairs.append((a, b) if first is plain else (b, a))
        alone = statistics.median(_instrumentation_alone(job, 2000) for _ in range(5))
    finally:
        stop.set()
        scraper.join(5)
        job.finish()
        server.close(final_scrape_wait=0)
    plain_step = statistics.median(p for p, _ in pairs)
    accounted_step = statistics.median(a for _, a in pairs)
    return {
        "plain_step": plain_step,
        "accounted_step": accounted_step,
        "overhead": statistics.median(a / p - 1 for p, a in pairs),
        "alone": alone,
        "alone_share": alone / plain_step,
        "rounds": rounds,
        "steps": steps,
    }


def section(r: dict[str, float], command: str) -> str:
    def verdict(share: float) -> str:
        return "met" if share <= GOAL else "NOT met"

    return "\n".join(
        [
            BEGIN,
            "## Time accounting",
            "",
            f"`{command}`: a CPU MLP (512 -> 1024 -> 1024 -> 10, batches of {BATCH}, one PyTorch thread) trained "
            f"plain and with the trainer library's time accounting (`job.phase` around the loader and the step, "
            f"`job.record_step` with measured model FLOPs, `/metrics` scraped once a second), side by side in one run: "
            f"{int(r['rounds'])} alternating blocks of {int(r['steps'])} steps each.",
            "",
            "| loop | median step |",
            "| --- | --- |",
            f"| plain | {r['plain_step'] * 1e3:.3f} ms |",
            f"| with time accounting | {r['accounted_step'] * 1e3:.3f} ms |",
            "",
            f"- Overhead, median of the paired blocks (accounted / plain - 1): **{r['overhead'] * 100:+.2f} %** "
            f"(goal at most {GOAL * 100:g} %: {verdict(r['overhead'])}); the blocks' noise on a shared machine is of "
            "the same order, so the direct measure below is the sharper one.",
            f"- The accounting calls alone (two phase blocks and `record_step`, no model): "
            f"{r['alone'] * 1e6:.1f} µs per step, **{r['alone_share'] * 100:.3f} %** of the plain step "
            f"({verdict(r['alone_share'])}).",
            END,
        ]
    )


def main(argv: list[str] | None = None, write: Callable[[str, str, str], None] = write_section) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench time_accounting")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv if argv is not None else [])
    result = measure(args.rounds, args.steps)
    command = f"python -m bench.time_accounting --rounds {args.rounds} --steps {args.steps}"
    text = section(result, command)
    print(text)
    write(text, BEGIN, END)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
