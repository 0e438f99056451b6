"""The job's own log answers "was my GPU maxed out?": progress lines while it runs, a summary at its end.

Every job (`TrainingMetrics.start_job`: the job block, `watch()`, the framework callbacks and the
auto-instrumentation all start one) gets a `RunReporter`. Its timer thread, not the training loop,
reads the job's clock and tallies every `FOXHUNT_PROGRESS_SECONDS` (60 by default; `0` or `off`:
no progress lines) and logs one line: step, epoch or fold with the planned total where the job
knows it, samples per second and time left at the pace of the last interval, goodput so far. A step
pays nothing for it: the thread reads what the step already counts.

When the job finishes, rank 0 logs the summary: wall time, goodput and badput by cause (the phase
shares of its whole life, `model_type_job_id_phase:ml_training_phase_seconds:ratio` of the rules),
the verdict and the one thing to change (`foxhunt_trainer.contract.verdicts`, the rules' own
definitions and thresholds), MFU where the peak of its GPUs is known (the rules' peak-FLOPs table;
the GPU model from NVML, else `FOXHUNT_GPU_MODEL`), NaN events, rollbacks, lost work, checkpoint
time and bytes. Every other rank logs its phases at debug level.

Where the figures can differ from the rules': the rules judge the verdict over the last 5 minutes
and sum the time of every rank; the summary judges this rank's whole life. The GPUs' own evidence
(how busy they are) is NVML's utilization sampled by the timer thread where NVML is available; the
rules prefer GPM SM activity from the poller. A job without GPU evidence is judged on its time split
alone, as the rules judge a job without GPUs.

The records go to the `foxhunt_trainer.summary` logger (the trainer's log format, `init_observability`);
in a process that configured no logging they are written to stderr, so a notebook or a terminal
still shows them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from foxhunt_trainer.contract import verdicts
from foxhunt_trainer.contract.peak_flops import DEFAULT_PEAK_FLOPS, PeakFlopsTable
from foxhunt_trainer.phases import PHASES
from foxhunt_trainer.trainer_env import DEFAULT_PROGRESS_SECONDS, GPU_MODEL_ENV, PROGRESS_SECONDS_ENV

LOG = logging.getLogger(__name__)
OFF = frozenset({"0", "off"})
MAX_PROGRESS_SECONDS = 86400.0
# The timer thread samples the GPUs' utilization at least this often (NVML, where available).
GPU_SAMPLE_SECONDS = 10.0
BADPUT_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p != verdicts.GOOD_PHASE)


class ProgressSettingsError(ValueError):
    """A bad FOXHUNT_PROGRESS_SECONDS."""


def progress_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between progress lines (`FOXHUNT_PROGRESS_SECONDS`, default 60); None: off."""
    env = os.environ if environ is None else environ
    raw = env.get(PROGRESS_SECONDS_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_PROGRESS_SECONDS
    text = raw.strip().lower()
    if text in OFF:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_PROGRESS_SECONDS:
        raise ProgressSettingsError(
            f"{PROGRESS_SECONDS_ENV}={raw!r}: expected seconds between progress lines (above 0, at most "
            f"{MAX_PROGRESS_SECONDS:g}), or 0 / off for none"
        )
    return seconds


@dataclass(frozen=True)
class RunState:
    """What a job has counted so far (read under its locks by `JobMetrics.run_state`)."""

    at: float  # monotonic seconds when read
    wall: float
    phases: Mapping[str, float]
    steps: int
    samples: int
    flops: Mapping[str, float]
    epoch: int | None = None
    epochs_planned: int | None = None
    steps_planned: int | None = None
    progress_percent: float | None = None
    fold: int | None = None
    folds_planned: int = 1
    folds_done: int = 0
    nan_events: Mapping[str, int] = field(default_factory=dict)
    rollbacks: int = 0
    checkpoints_saved: int = 0
    checkpoint_failures: int = 0
    checkpoint_bytes: int = 0
    checkpoint_seconds: float = 0.0  # the good saves' durations

    @property
    def shares(self) -> dict[str, float] | None:
        """Share (0-1) of the time in each phase; None before any time was counted."""
        total = sum(self.phases.values())
        return {p: s / total for p, s in self.phases.items()} if total > 0 else None

    @property
    def goodput(self) -> float | None:
        shares = self.shares
        return None if shares is None else shares.get(verdicts.GOOD_PHASE, 0.0)


def duration_text(seconds: float) -> str:
    """2h03m, 4m12s, 37s, 0.4s."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def bytes_text(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def time_left(previous: RunState | None, now: RunState) -> float | None:
    """Seconds left at the pace of the interval since `previous` (else of the whole run so far)."""
    start = previous if previous is not None and previous.at < now.at else None
    span = now.at - start.at if start is not None else now.wall
    if span <= 0:
        return None
    if now.steps_planned is not None:
        done = now.steps - (start.steps if start is not None else 0)
        return (now.steps_planned - now.steps) * span / done if done > 0 else None
    if now.epochs_planned is not None and now.epoch is not None and now.epoch > 0:
        return max(now.epochs_planned - now.epoch, 0) * now.wall / now.epoch
    if now.progress_percent is not None and now.progress_percent > 0:
        return now.wall * (100 - now.progress_percent) / now.progress_percent
    if now.folds_planned > 1 and now.folds_done > 0:
        return max(now.folds_planned - now.folds_done, 0) * now.wall / now.folds_done
    return None


def progress_record(previous: RunState | None, now: RunState) -> tuple[str, dict[str, Any]]:
    """The progress line: (message, fields)."""
    since = previous if previous is not None and previous.at < now.at else None
    span = now.at - since.at if since is not None else now.wall
    samples = now.samples - (since.samples if since is not None else 0)
    rate = samples / span if span > 0 else 0.0
    fields: dict[str, Any] = {"step": now.steps, "samples_per_second": round(rate, 3)}
    where = [f"step {now.steps}" + (f"/{now.steps_planned}" if now.steps_planned is not None else "")]
    if now.steps_planned is not None:
        fields["steps_planned"] = now.steps_planned
    if now.epoch is not None:
        fields["epoch"] = now.epoch
        where.append(f"epoch {now.epoch}" + (f"/{now.epochs_planned}" if now.epochs_planned is not None else ""))
        if now.epochs_planned is not None:
            fields["epochs_planned"] = now.epochs_planned
    if now.folds_planned > 1:
        fields.update(folds_done=now.folds_done, folds_planned=now.folds_planned)
        where.append(f"fold {now.folds_done}/{now.folds_planned} done")
    words = [", ".join(where), f"{rate:.1f} samples/s"]
    left = time_left(previous, now)
    if left is not None:
        fields["seconds_left"] = round(left, 1)
        words.append(f"{duration_text(left)} left")
    good = now.goodput
    if good is not None:
        fields["goodput"] = round(good, 4)
        words.append(f"goodput {percent(good)} so far")
    return "progress: " + "; ".join(words), fields


@dataclass(frozen=True)
class Mfu:
    """The job's MFU over its life, or why there is none."""

    value: float | None
    reason: str


def mfu(state: RunState, gpu_names: Sequence[str | None], table: PeakFlopsTable = DEFAULT_PEAK_FLOPS) -> Mfu:
    """Achieved model FLOP/s over the summed dense peak of the GPUs held, per precision the job
    reports (the rules' MFU, over the whole run): only where every GPU has a peak at every precision."""
    if not state.flops:
        return Mfu(None, "the job reports no model FLOPs (job.set_model_flops or job.measure_model_flops)")
    if not gpu_names:
        return Mfu(None, "the job holds no GPU")
    if any(name is None for name in gpu_names):
        return Mfu(None, f"the GPU model is not known (no NVML; set {GPU_MODEL_ENV})")
    if state.wall <= 0:
        return Mfu(None, "no time has passed")
    total = 0.0
    for precision, flops in state.flops.items():
        peaks = [table.peak(str(name), precision) for name in gpu_names]
        if any(p is None for p in peaks):
            unknown = sorted({str(n) for n, p in zip(gpu_names, peaks, strict=True) if p is None})
            return Mfu(None, f"the peak-FLOPs table has no {precision} peak for {', '.join(unknown)}")
        total += flops / state.wall / sum(p for p in peaks if p is not None)
    names = sorted(set(map(str, gpu_names)))
    precisions = "/".join(sorted(state.flops))
    return Mfu(total, f"{precisions} peak of {len(gpu_names)} x {', '.join(names)}")


def summary_records(
    state: RunState,
    status: str,
    *,
    gpu_busy_percent: float | None = None,
    gpu_names: Sequence[str | None] = (),
    thresholds: verdicts.VerdictThresholds = verdicts.DEFAULT_THRESHOLDS,
    table: PeakFlopsTable = DEFAULT_PEAK_FLOPS,
) -> list[tuple[str, dict[str, Any]]]:
    """The summary's records (message, fields), in the order they are logged."""
    shares = state.shares
    good = state.goodput
    badput = sorted(
        ((p, shares.get(p, 0.0)) for p in BADPUT_PHASES if shares is not None and shares.get(p, 0.0) > 0),
        key=lambda pair: -pair[1],
    )
    head: dict[str, Any] = {
        "status": status,
        "wall_seconds": round(state.wall, 3),
        "steps": state.steps,
        "samples": state.samples,
    }
    if good is not None:
        head["goodput"] = round(good, 6)
    for phase in BADPUT_PHASES:
        if shares is not None:
            head[f"badput_{phase}"] = round(shares.get(phase, 0.0), 6)
    if shares is None:
        goodput_words = "no time counted"
    else:
        causes = ", ".join(f"{phase} {percent(share)}" for phase, share in badput) or "none"
        goodput_words = f"goodput {percent(good or 0.0)}, badput {percent(1 - (good or 0.0))} ({causes})"
    records = [(f"run summary: {status} after {duration_text(state.wall)}; {goodput_words}", head)]

    verdict = verdicts.judge(shares, gpu_busy_percent, thresholds)
    judged: dict[str, Any] = {"verdict": verdict.name if verdict else "none"}
    if gpu_busy_percent is not None:
        judged["gpu_busy_percent"] = round(gpu_busy_percent, 1)
    if verdict is None:
        records.append(("verdict: none (no time counted and no GPU evidence)", judged))
    else:
        evidence = (
            "on its time split alone" if gpu_busy_percent is None else f"with its GPUs {gpu_busy_percent:.0f}% busy"
        )
        meaning = verdict.meaning_for(holds_gpus=bool(gpu_names))
        records.append((f"verdict: {verdict.name}: {meaning} (judged {evidence})", judged))
        records.append((f"to change: {verdict.change}", {}))

    efficiency = mfu(state, gpu_names, table)
    if efficiency.value is None:
        records.append((f"MFU: not known: {efficiency.reason}", {"mfu": "unknown"}))
    else:
        shown = f"{efficiency.value * 100:.3g}%"
        records.append((f"MFU: {shown} ({efficiency.reason})", {"mfu": float(f"{efficiency.value:.6g}")}))

    nans = sum(state.nan_events.values())
    lost = state.phases.get("lost_work", 0.0)
    checkpoint_seconds = state.checkpoint_seconds
    events: dict[str, Any] = {
        "nan_events": nans,
        "rollbacks": state.rollbacks,
        "lost_work_seconds": round(lost, 3),
        "checkpoints_saved": state.checkpoints_saved,
        "checkpoint_failures": state.checkpoint_failures,
        "checkpoint_seconds": round(checkpoint_seconds, 3),
        "checkpoint_bytes": state.checkpoint_bytes,
    }
    by_type = ", ".join(f"{kind} {count}" for kind, count in sorted(state.nan_events.items()) if count)
    records.append(
        (
            f"events: NaN {nans}" + (f" ({by_type})" if by_type else "") + f", rollbacks {state.rollbacks}, "
            f"lost work {duration_text(lost)}; checkpoints {state.checkpoints_saved} saved"
            + (f", {state.checkpoint_failures} failed" if state.checkpoint_failures else "")
            + f" in {duration_text(checkpoint_seconds)}, {bytes_text(state.checkpoint_bytes)}",
            events,
        )
    )
    return records


def emit(level: int, message: str, fields: Mapping[str, Any], labels: Mapping[str, str]) -> None:
    """One record: to the trainer's logging, or to stderr in a process that configured none."""
    if logging.getLogger().hasHandlers() or LOG.hasHandlers():
        LOG.log(level, message, extra={**labels, **fields})
    elif level >= logging.INFO:
        job = " ".join(f"{k}={v}" for k, v in labels.items())
        print(f"foxhunt {job}: {message}", file=sys.stderr, flush=True)


class GpuSampler:
    """NVML utilization of the job's GPUs (the rules' fallback evidence), averaged over samples,
    and their model names; does nothing where NVML is unavailable."""

    def __init__(self, uuids: Sequence[str]) -> None:
        self.uuids = tuple(uuids)
        self._handles: list[Any] = []
        self._nvml: Any = None
        self.names: list[str | None] = [None] * len(self.uuids)
        self._total, self._count = 0.0, 0
        if self.uuids:
            self._open()
        model = os.environ.get(GPU_MODEL_ENV, "").strip()
        if model:
            self.names = [name or model for name in self.names]

    def _open(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no nvidia-ml-py, no driver: no GPU evidence
            return
        self._nvml = pynvml
        try:
            self._handles = [pynvml.nvmlDeviceGetHandleByUUID(uuid) for uuid in self.uuids]
            names = [pynvml.nvmlDeviceGetName(handle) for handle in self._handles]
            self.names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        except Exception:
            self._handles = []

    def sample(self) -> None:
        if not self._handles:
            return
        try:
            rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
        except Exception:
            return
        self._total += sum(rates) / len(rates)
        self._count += 1

    @property
    def busy_percent(self) -> float | None:
        return self._total / self._count if self._count else None

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None


class RunReporter:
    """The job's progress lines (a timer thread) and its end-of-run summary (`finish`)."""

    def __init__(
        self,
        state: Callable[[], RunState],
        labels: Mapping[str, str],
        *,
        rank: int,
        gpu_uuids: Sequence[str] = (),
        interval: float | None = DEFAULT_PROGRESS_SECONDS,
    ) -> None:
        self._state, self.labels, self.rank, self.interval = state, dict(labels), rank, interval
        self._stop = threading.Event()
        self._gpus = GpuSampler(gpu_uuids)
        self._previous: RunState | None = None
        self._thread: threading.Thread | None = None
        self.progress_lines = 0
        if interval is not None or self._gpus.uuids:
            self._thread = threading.Thread(target=self._run, name=f"foxhunt-progress-{labels.get('job_id')}")
            self._thread.daemon = True
            self._thread.start()

    def _run(self) -> None:
        tick = min(self.interval or GPU_SAMPLE_SECONDS, GPU_SAMPLE_SECONDS)
        started = time.monotonic()
        due = started + self.interval if self.interval is not None else math.inf
        while not self._stop.wait(max(min(tick, due - time.monotonic()), 0.0)):
            self._gpus.sample()
            now = time.monotonic()
            if now >= due:
                self.progress()
                while due <= now:  # a late tick (a suspended process) does not burst
                    due += self.interval or math.inf

    def progress(self) -> None:
        """Log one progress line now (rank 0 at info, every other rank at debug)."""
        try:
            now = self._state()
            message, fields = progress_record(self._previous, now)
        except Exception as error:  # the training goes on; what is lost is one line
            LOG.debug("progress line failed: %r", error)
            return
        self._previous = now
        self.progress_lines += 1
        emit(logging.INFO if self.rank == 0 else logging.DEBUG, message, fields, self.labels)

    def finish(self, status: str) -> None:
        """Stop the progress lines; rank 0 logs the summary, every other rank its phases (debug)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        try:
            self._gpus.sample()
            state = self._state()
            if self.rank != 0:
                phases = {f"{p}_seconds": round(s, 3) for p, s in state.phases.items()}
                emit(logging.DEBUG, f"rank {self.rank} phases", phases, self.labels)
                return
            records = summary_records(
                state, status, gpu_busy_percent=self._gpus.busy_percent, gpu_names=self._gpus.names
            )
            for message, fields in records:
                emit(logging.INFO, message, fields, self.labels)
        except Exception as error:  # a summary that fails must not fail the job's finish
            LOG.warning("the run summary failed: %r", error)
        finally:
            self._gpus.close()
