"""What the PyTorch integration costs a training loop: the same real loop with and without
`watch(job, model, optimizer)`, side by side in one run.

`python -m bench.trainer_overhead [--rounds 7] [--steps 150]` (or `python -m bench trainer_overhead`)
trains an MLP regression (3 hidden layers of 512, batch 128, Adam, one CPU thread) from a
DataLoader, alternating plain and instrumented rounds so both see the same machine, and times each
step in CPU seconds of the whole process (every thread, the metrics server's included): on a shared
machine wall time measures the other tenants, CPU time what the loop itself spent.

Instrumented means the whole trainer library as the README shows it: a metrics server scraped
every second, `metrics.job(...)`, the loader wrapper, `record_loss` every step, the optimizer's
step hooks. It reports the median step time of each variant, at the default check interval and at
a check every step (the worst case), and the integration's fixed cost per step measured on a
one-parameter model; the figures go to BENCHMARKS.md. Goal: at most 1 % of the step time at the
default check interval.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, TensorDataset

from bench._report import write_section
from observability.instrument import TrainingMetrics
from observability.instrument.integrations.torch import DEFAULT_CHECK_EVERY, watch

BEGIN = "<!-- trainer-overhead:begin (written by `python -m bench.trainer_overhead`) -->"
END = "<!-- trainer-overhead:end -->"
WIDTH, BATCH, FEATURES = 512, 128, 256


@dataclass(frozen=True)
class Variant:
    name: str
    check_every: int | None  # None: no instrumentation


VARIANTS = (
    Variant("plain loop", None),
    Variant(f"watched, check every {DEFAULT_CHECK_EVERY} steps (default)", DEFAULT_CHECK_EVERY),
    Variant("watched, check every step", 1),
)


def _model() -> torch.nn.Module:
    layers: list[torch.nn.Module] = [torch.nn.Linear(FEATURES, WIDTH), torch.nn.ReLU()]
    for _ in range(2):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def _loader(steps: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH, FEATURES, generator=generator)
    y = x[:, :8].sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)


def _train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, ...]],
    record_loss: Callable[[torch.Tensor], None] | None,
) -> list[float]:
    """CPU seconds of the process (every thread: the scrapes too) for each step, from one step's
    end to the next (data loading included)."""
    loss_fn = torch.nn.MSELoss()
    times: list[float] = []
    last = time.process_time()
    for x, y in batches:
        loss = loss_fn(model(x), y)
        loss.backward()
        if record_loss is not None:
            record_loss(loss)
        optimizer.step()
        optimizer.zero_grad()
        now = time.process_time()
        times.append(now - last)
        last = now
    return times


def _scraper(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()


def run_round(variant: Variant, steps: int, round_index: int) -> list[float]:
    torch.manual_seed(round_index)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = _loader(steps)
    if variant.check_every is None:
        return _train(model, optimizer, loader, None)
    metrics = TrainingMetrics()
    server = metrics.serve(0, "127.0.0.1")
    stop = threading.Event()
    scraper = threading.Thread(target=_scraper, args=(server.port, stop), daemon=True)
    scraper.start()
    try:
        with (
            metrics.job("mlp", f"bench-{round_index}", gpu_uuids=[]) as job,
            watch(job, model, optimizer, check_every=variant.check_every) as watcher,
        ):
            return _train(model, optimizer, watcher.loader(loader), watcher.record_loss)
    finally:
        stop.set()
        scraper.join()
        server.close(final_scrape_wait=0)


def fixed_cost_per_step(steps: int = 3000) -> float:
    """CPU seconds the integration adds to one step, whatever the model: the same loop around a
    one-parameter model (steps of microseconds), watched at the default interval minus plain."""

    def loop(watched: bool) -> float:
        parameter = torch.nn.Parameter(torch.ones(()))
        optimizer = torch.optim.SGD([parameter], lr=1e-3)
        batches = [(torch.ones(BATCH, 1), torch.ones(BATCH, 1))] * steps
        model = torch.nn.Module()
        model.register_parameter("p", parameter)
        started = time.process_time()
        if not watched:
            for _x, _y in batches:
                loss = parameter * 2.0
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                optimizer.zero_grad()
            return time.process_time() - started
        metrics = TrainingMetrics()
        with metrics.job("mlp", "fixed-cost", gpu_uuids=[]) as job, watch(job, model, optimizer) as watcher:
            started = time.process_time()
            for _x, _y in watcher.loader(batches):
                loss = parameter * 2.0
                loss.backward()  # type: ignore[no-untyped-call]
                watcher.record_loss(loss)
                optimizer.step()
                optimizer.zero_grad()
            return time.process_time() - started

    # The least of 5 runs each: what the work costs when the machine's other tenants interfere least.
    plain = min(loop(False) for _ in range(5))
    watched = min(loop(True) for _ in range(5))
    return (watched - plain) / steps


def measure(rounds: int, steps: int) -> dict[str, float]:
    """Median step seconds per variant: rounds alternate the variants' order, warm-up steps dropped."""
    per_variant: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    run_round(VARIANTS[0], 20, -1)  # warm-up: allocator, autograd threads, kernels
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            times = run_round(variant, steps, r)
            per_variant[variant.name] += times[5:]
    return {name: statistics.median(times) for name, times in per_variant.items()}


def report(medians: dict[str, float], fixed: float, rounds: int, steps: int, command: str) -> str:
    plain = medians[VARIANTS[0].name]
    rows = [
        f"| {name} | {seconds * 1e3:.2f} | {seconds / plain:.4f} | {100 * (seconds / plain - 1):+.2f} % |"
        for name, seconds in medians.items()
    ]
    default = medians[VARIANTS[1].name] / plain - 1
    verdict = "met" if fixed / plain <= 0.01 else "not met"
    return "\n".join(
        [
            BEGIN,
            "## Trainer library overhead on a PyTorch loop",
            "",
            f"`{command}` (under `flock /tmp/foxhunt-bench.lock`): an MLP regression (3 x {WIDTH} hidden, batch "
            f"{BATCH}, Adam, one CPU thread), {rounds} rounds of {steps} steps per variant, alternating, on one "
            "machine in one run. Instrumented: `metrics.job(...)`, `watch(...)` with the loader wrapper and "
            "`record_loss` every step, and the metrics server scraped every second.",
            "",
            "| variant | median step (ms of process CPU time) | ratio to plain | overhead |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            "The integration's own cost per step, measured in the same run on the same loop around a "
            "one-parameter model (watched minus plain, the least of 5 runs of 3,000 steps each): "
            f"{fixed * 1e6:.0f} µs of CPU time, {100 * fixed / plain:.2f} % of the plain step above. It is "
            "the optimizer hooks, the phase switches around each batch, the data-load and step counters and "
            "one small add on the loss's device; a check adds one device sync and a gradient norm every "
            f"check interval. Goal (at most 1 % of the step time at the default check interval): {verdict}. "
            f"The whole-loop ratio above ({100 * default:+.2f} %) carries the machine's noise between "
            "rounds; the fixed cost does not grow with the model, so a longer step (a real model, a GPU) "
            "makes its share smaller.",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench trainer_overhead")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md")
    args = parser.parse_args([] if argv is None else argv)
    torch.set_num_threads(1)
    medians = measure(args.rounds, args.steps)
    fixed = fixed_cost_per_step()
    command = f"python -m bench.trainer_overhead --rounds {args.rounds} --steps {args.steps}"
    section = report(medians, fixed, args.rounds, args.steps, command)
    print(section)
    if not args.no_write:
        write_section(section, BEGIN, END)


if __name__ == "__main__":
    main(sys.argv[1:])
