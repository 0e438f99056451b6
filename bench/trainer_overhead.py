"""What the trainer library costs a real PyTorch training loop: the same loop plain, with the time
accounting alone, and with the PyTorch integration, side by side in one run.

`python -m bench.trainer_overhead [--rounds 15] [--steps 150]` (or `python -m bench trainer_overhead`,
part of `make bench`; take the bench lock: `flock /tmp/foxhunt-bench.lock ...`). One process, one
PyTorch thread, an MLP regression (256 inputs, 3 hidden layers of 512, batch 128, Adam) trained
from a DataLoader over in-memory tensors: a small real model whose CPU step takes about 11 ms.

Variants, each a block of `--steps` steps per round, the order alternating every round so drift in
the machine's load hits all alike:
- plain: the loop alone;
- time accounting: `with job.phase("data_wait")` around the loader's `next()`, `with
  job.phase("compute")` around the step and `job.record_step(samples=...)` after it (the
  documented calls a trainer without an integration makes);
- watched (default check, and a check every step): `watch(job, model, optimizer)` with the loader
  wrapper and `record_loss` every step, as docs/trainer.md shows it;
- time accounting with progress lines every second (60 times the default rate): the same calls, on
  a job of its own per block whose timer thread logs a progress line every second
  (`FOXHUNT_PROGRESS_SECONDS=1`, to a discarded stream); every other variant's job has progress
  off, so the thread's ticks count in this variant's blocks only.
Every instrumented block runs with its metrics server scraped once a second by another process, as
Prometheus would: rendering the page is part of the cost, the scraper's own work is not.

Cost is the process's CPU time per block (every thread: the server's renders included), divided by
its steps: on a shared machine wall time measures the other tenants. Per round each variant's ratio
to that round's plain block; the report gives the median ratio over rounds and its spread (least
and greatest). Because that spread on a shared machine is of the order of the goals, the same run
also measures each variant's fixed cost per step on a one-parameter model (steps of microseconds),
variant minus plain, the least of 15 interleaved runs of 1,000 steps: the sharper figure, set against the plain
step of the real model. Goals: the integration at the default check interval at most 1 % of the
step, the time accounting alone at most 0.5 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, TensorDataset

from bench import write_section
from foxhunt_trainer import JobMetrics, TrainingMetrics, configure_logging, render_openmetrics
from foxhunt_trainer.integrations.torch import DEFAULT_CHECK_EVERY, watch
from foxhunt_trainer.trainer_env import PROGRESS_SECONDS_ENV

BEGIN = "<!-- trainer-overhead:begin (written by `python -m bench.trainer_overhead`) -->"
END = "<!-- trainer-overhead:end -->"
WIDTH, BATCH, FEATURES = 512, 128, 256
FIXED_STEPS, FIXED_RUNS = 1000, 15

PLAIN, ACCOUNTED = "plain loop", "time accounting only (job.phase, record_step)"
PROGRESS = "time accounting, progress line every second"
DEFAULT_WATCH = f"watch(), check every {DEFAULT_CHECK_EVERY} steps (default)"
EVERY_STEP = "watch(), check every step"


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # "plain", "accounted" or "watched"
    check_every: int = DEFAULT_CHECK_EVERY
    goal: float | None = None  # the largest share of the plain step it may cost
    progress_seconds: float | None = None  # a job of its own per block with progress lines this often


VARIANTS = (
    Variant(PLAIN, "plain"),
    Variant(ACCOUNTED, "accounted", goal=0.005),
    Variant(DEFAULT_WATCH, "watched", goal=0.01),
    Variant(EVERY_STEP, "watched", check_every=1),
    Variant(PROGRESS, "accounted", goal=0.005, progress_seconds=1.0),
)


def start_job(metrics: TrainingMetrics, job_id: str, progress_seconds: float | None) -> JobMetrics:
    """A job whose progress lines come every `progress_seconds` (None: off)."""
    saved = os.environ.get(PROGRESS_SECONDS_ENV)
    os.environ[PROGRESS_SECONDS_ENV] = "off" if progress_seconds is None else f"{progress_seconds:g}"
    try:
        return metrics.start_job("mlp", job_id, gpu_uuids=[])
    finally:
        if saved is None:
            del os.environ[PROGRESS_SECONDS_ENV]
        else:
            os.environ[PROGRESS_SECONDS_ENV] = saved


def block_job(metrics: TrainingMetrics, variant: Variant, job: JobMetrics) -> JobMetrics:
    """The job `variant`'s block records into: its own, with progress lines, where it has them (on
    `metrics`, a registry nobody scrapes, so the scraped page keeps its one job)."""
    if variant.progress_seconds is None:
        return job
    return start_job(metrics, f"bench-progress-{time.monotonic_ns()}", variant.progress_seconds)


# One loop body for every variant: only what wraps it differs.
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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


def _timed(body: Callable[[], None], steps: int) -> float:
    started = time.process_time()
    body()
    return (time.process_time() - started) / steps


def _scraper(port: int) -> subprocess.Popen[bytes]:
    """Another process that fetches the page once a second (Prometheus' part, not counted)."""
    code = (
        "import time, urllib.request\n"
        "while True:\n"
        f"    urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read()\n"
        "    time.sleep(1)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_block(
    variant: Variant,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, ...]],
    steps: int,
    step: Step,
    job: JobMetrics | None,
) -> float:
    """CPU seconds per step of one block of `variant`."""
    if variant.kind == "plain" or job is None:

        def plain() -> None:
            for x, y in batches:
                step(x, y)

        return _timed(plain, steps)
    if variant.kind == "accounted":
        accounted_job = job

        def accounted() -> None:
            iterator: Iterator[tuple[torch.Tensor, ...]] = iter(batches)
            while True:
                with accounted_job.phase("data_wait"):
                    batch = next(iterator, None)
                if batch is None:
                    return
                with accounted_job.phase("compute"):
                    step(*batch)
                accounted_job.record_step(samples=BATCH)

        return _timed(accounted, steps)
    with watch(job, model, optimizer, check_every=variant.check_every) as watcher:

        def watched() -> None:
            for x, y in watcher.loader(batches):
                watcher.record_loss(step(x, y))

        return _timed(watched, steps)


def _training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Step:
    loss_fn = torch.nn.MSELoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = loss_fn(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step


def page_render_seconds(metrics: TrainingMetrics, renders: int = 50) -> float:
    """CPU seconds one scrape costs the trainer: rendering its page as OpenMetrics (what Prometheus
    asks for), the median of `renders`."""
    times = []
    for _ in range(renders):
        started = time.process_time()
        render_openmetrics(metrics.registry)
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure_blocks(rounds: int, steps: int) -> tuple[dict[str, list[float]], float]:
    """Seconds per step of every variant's block in every round (rounds alternate the order), and
    the CPU seconds of one scrape of the job's page after them."""
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = _training_step(model, optimizer)
    loader = _loader(steps)
    per_variant: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    with ExitStack() as stack:
        metrics = TrainingMetrics()
        server = metrics.serve(0, "127.0.0.1")
        stack.callback(server.close, final_scrape_wait=0)
        scraper = _scraper(server.port)
        stack.callback(scraper.wait, 10)
        stack.callback(scraper.terminate)
        job = stack.enter_context(start_job(metrics, "bench-overhead", None))
        unscraped = TrainingMetrics()
        for variant in VARIANTS:  # warm-up: allocator, autograd threads, kernels, first scrape
            with block_job(unscraped, variant, job) as ran:
                run_block(variant, model, optimizer, _loader(20), 20, step, ran)
        for r in range(rounds):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                ran = block_job(unscraped, variant, job)
                per_variant[variant.name].append(run_block(variant, model, optimizer, loader, steps, step, ran))
                if ran is not job:
                    ran.finish()
        render = page_render_seconds(metrics)
    return per_variant, render


def _fixed_loop(variant: Variant) -> float:
    """CPU seconds per step of `variant` around a one-parameter model (steps of microseconds)."""
    parameter = torch.nn.Parameter(torch.ones(()))
    model = torch.nn.Module()
    model.register_parameter("p", parameter)
    optimizer = torch.optim.SGD([parameter], lr=1e-3)
    batches = [(torch.ones(BATCH, 1), torch.ones(BATCH, 1))] * FIXED_STEPS

    def step(_x: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
        loss = parameter * 2.0
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad()
        return loss

    metrics = TrainingMetrics()
    with start_job(metrics, "fixed-cost", variant.progress_seconds) as job:
        return run_block(variant, model, optimizer, batches, FIXED_STEPS, step, job)


def fixed_costs() -> dict[str, float]:
    """CPU seconds each variant adds to one step whatever the model: variant minus plain around a
    one-parameter model, each the least of `FIXED_RUNS` runs, the variants interleaved run by run
    (the least is what the work costs when the machine's other tenants interfere least)."""
    runs: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    for _ in range(FIXED_RUNS):
        for variant in VARIANTS:
            runs[variant.name].append(_fixed_loop(variant))
    plain = min(runs[PLAIN])
    return {name: min(seconds) - plain for name, seconds in runs.items()}


@dataclass(frozen=True)
class Row:
    variant: Variant
    step: float  # median seconds per step over rounds
    ratios: list[float]  # per round, to that round's plain block
    fixed: float  # seconds per step on the one-parameter model, over plain


def summarize(blocks: dict[str, list[float]], fixed: dict[str, float]) -> list[Row]:
    plain = blocks[PLAIN]

    def ratios(name: str) -> list[float]:
        return [b / p for b, p in zip(blocks[name], plain, strict=True)]

    return [Row(v, statistics.median(blocks[v.name]), ratios(v.name), fixed[v.name]) for v in VARIANTS]


def report(rows: list[Row], rounds: int, steps: int, command: str, load: str, render: float) -> str:
    plain = rows[0].step
    table = []
    verdicts = []
    for row in rows:
        ratio = statistics.median(row.ratios)
        share = row.fixed / plain
        fixed = "" if row.variant.kind == "plain" else f"{row.fixed * 1e6:.1f} µs = {100 * share:.2f} %"
        table.append(
            f"| {row.variant.name} | {row.step * 1e3:.2f} | {ratio:.4f} ({100 * (ratio - 1):+.2f} %) | "
            f"{100 * (min(row.ratios) - 1):+.2f} % to {100 * (max(row.ratios) - 1):+.2f} % | {fixed} |"
        )
        if row.variant.goal is not None:
            met = share <= row.variant.goal
            verdicts.append(
                f"{row.variant.name}: goal at most {100 * row.variant.goal:g} % of the step, fixed cost "
                f"{100 * share:.2f} %: {'met' if met else 'NOT met'}; whole-loop median {100 * (ratio - 1):+.2f} %"
            )
    return "\n".join(
        [
            BEGIN,
            "## Trainer library overhead on a PyTorch loop",
            "",
            f"`{command}` (under `flock /tmp/foxhunt-bench.lock`; {load}): an MLP regression ({FEATURES} inputs, "
            f"3 x {WIDTH} hidden, batch {BATCH}, Adam, one CPU thread) from a DataLoader, {rounds} rounds of one "
            f"block of {steps} steps per variant, the order alternating every round, in one process. Every "
            "instrumented block has its metrics server scraped once a second by another process. Cost: the "
            "process's CPU time per step (its server thread included).",
            "",
            "| variant | median step (ms CPU) | median ratio to the round's plain block | spread over rounds "
            "(least to greatest) | fixed cost per step (one-parameter model) and its share of the plain step |",
            "| --- | --- | --- | --- | --- |",
            *table,
            "",
            f"Fixed cost: the same loop around a one-parameter model (steps of microseconds), variant minus plain, "
            f"the least of {FIXED_RUNS} runs of {FIXED_STEPS:,} steps each, the variants interleaved, in the same run: "
            "what the library adds "
            "to a step whatever the model (optimizer hooks, phase switches, the step and data-load tallies, "
            "keeping the loss tensor); a check adds one device sync and a gradient norm per check interval. "
            "The whole-loop ratios carry the machine's noise between blocks (the spread column), which on a "
            "shared machine is larger than the goals; the fixed cost is the figure the goals are judged on. "
            f"{PROGRESS}: each whole-loop block (about a second) carries about one progress line of its job's "
            "timer thread; its fixed-cost runs end before the first line, so they are what a step pays: the "
            "same calls as time accounting alone.",
            "",
            f"Scrapes are not in the fixed cost: one scrape of this job's page (rendered as OpenMetrics, the median "
            f"of 50) costs the trainer {render * 1e3:.2f} ms of CPU: {100 * render:.3f} % of one core at one scrape "
            f"a second (this benchmark's), {100 * render / 15:.4f} % at a 15-second scrape interval.",
            "",
            *(f"- {v}" for v in verdicts),
            END,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench trainer_overhead")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md")
    args = parser.parse_args([] if argv is None else argv)
    if args.rounds < 1 or args.steps < 10:
        parser.error("--rounds must be at least 1 and --steps at least 10")
    torch.set_num_threads(1)
    discarded = open(os.devnull, "w")  # noqa: SIM115 (the progress lines' stream, for the whole run)
    configure_logging("logfmt", "INFO", stream=discarded)
    load_before = os.getloadavg()
    blocks, render = measure_blocks(args.rounds, args.steps)
    fixed = fixed_costs()
    load_after = os.getloadavg()
    load = f"load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end, 2 CPU cores"
    command = f"python -m bench.trainer_overhead --rounds {args.rounds} --steps {args.steps}"
    section = report(summarize(blocks, fixed), args.rounds, args.steps, command, load, render)
    print(section)
    if not args.no_write:
        write_section(section, BEGIN, END)


if __name__ == "__main__":
    main(sys.argv[1:])
