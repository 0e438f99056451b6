"""Critical-failure detection latency on a real Prometheus (the 30-second promise for critical failures).

`python -m bench detection` (part of `make bench`): a tiny exporter on 127.0.0.1 serves NaN
counters, GPU memory and XID counters; Prometheus 2.42 scrapes it as the stack scrapes the
critical alerts' sources (their interval and timeout, as the pod annotations set them) and
evaluates the stack's rendered rules file (each group at its own interval). At random moments a
failure is injected on its own series (a NaN, memory at 98.75%, an XID) and the alert API is
polled every 50 ms. For every injection the benchmark reports

- event -> firing: wall time from the injection to the alert being `firing` (what the promise
  bounds, with Alertmanager's page group_wait added: `observability.rules.detection`), and
- first bad sample -> firing: from the timestamp of the first scraped sample that shows the
  failure to firing.

Every stack file's intervals are measured side by side (stacks with equal intervals share a run).
The section "Rule evaluation" of BENCHMARKS.md is rewritten with the figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench import write_section
from foxhunt_trainer.contract import catalog
from harness.prometheus import PrometheusServer, config_yaml
from infra.settings import available_stacks
from infra.settings.stack_files import read_stack_config, validate_stack
from observability.config import ObservabilityConfig
from observability.rules import CRITICAL_DETECTION_ALERTS, alert_rules, rules_file_yaml
from observability.rules.detection import detection_budget
from observability.scrape_config import critical_scrape_timeout_seconds

BEGIN = "<!-- bench.detection: begin -->"
END = "<!-- bench.detection: end -->"
GPU_TOTAL_BYTES = 80e9


@dataclass
class Injection:
    alert: str
    config: str
    key: str  # job_id or gpu_id of the series that fails
    at: float = 0.0  # wall time of the injection
    fired: float | None = None
    first_bad_sample: float | None = None

    @property
    def event_to_firing(self) -> float:
        assert self.fired is not None
        return self.fired - self.at

    @property
    def sample_to_firing(self) -> float:
        assert self.fired is not None and self.first_bad_sample is not None
        return self.fired - self.first_bad_sample


@dataclass
class ExporterState:
    """What the exporter serves; failures flip values under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    nan: dict[str, int] = field(default_factory=dict)  # job_id -> count
    memory: dict[str, float] = field(default_factory=dict)  # gpu_id -> used bytes
    xid: dict[str, int] = field(default_factory=dict)  # gpu_id -> count

    def page(self, key: str) -> str:
        """The series of one injection slot (one scrape target each, so scrape phases differ)."""
        config = key.split("-")[0]
        gpu = 'node="bench-{c}",gpu_id="{g}",uuid="GPU-{c}-{g}",gpu_name="bench"'
        lines = []
        with self.lock:
            for job, count in self.nan.items():
                if job == key:
                    labels = f'model_type="dqn",job_id="{job}",tensor_type="loss"'
                    lines.append(f"{catalog.TRAINING_NAN_COUNT.name}{{{labels}}} {count}")
            for name, used in self.memory.items():
                if name == key:
                    labels = gpu.format(c=config, g=name)
                    lines.append(f"{catalog.GPU_MEMORY_USED_BYTES.name}{{{labels}}} {used}")
                    lines.append(f"{catalog.GPU_MEMORY_TOTAL_BYTES.name}{{{labels}}} {GPU_TOTAL_BYTES}")
            for name, count in self.xid.items():
                if name == key:
                    # As the poller exports an XID: the error counter by type (what the alert reads)
                    # and the per-code counter (what the runbook reads).
                    labels = gpu.format(c=config, g=name)
                    lines.append(f'{catalog.GPU_ERRORS_TOTAL.name}{{{labels},error_type="xid"}} {count}')
                    lines.append(f'{catalog.GPU_XID_ERRORS_TOTAL.name}{{{labels},xid="79"}} {count}')
        return "\n".join(lines) + "\n"


@contextmanager
def exporter(state: ExporterState) -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            key = self.path.strip("/").split("/")[0]
            body = state.page(key).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _prometheus_config(cfg: ObservabilityConfig, port: int, keys: list[str]) -> str:
    # One target per injection slot: Prometheus spreads targets' scrape phases, so the first bad
    # sample lands at a different point of the evaluation cycle for each.
    scrapes = [
        {
            "job_name": f"bench-{key}",
            # what the critical sources' annotations set (prometheus.io/interval and /timeout)
            "scrape_interval": f"{cfg.critical_scrape_interval_seconds}s",
            "scrape_timeout": f"{critical_scrape_timeout_seconds(cfg)}s",
            "metrics_path": f"/{key}/metrics",
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        }
        for key in keys
    ]
    return config_yaml(
        scrapes,
        ["rules.yaml"],
        scrape_interval=f"{cfg.scrape_interval_seconds}s",
        evaluation_interval=f"{cfg.evaluation_interval_seconds}s",
    )


def _inject(state: ExporterState, injection: Injection) -> None:
    with state.lock:
        injection.at = time.time()
        if injection.alert == "TrainingNaNDetected":
            state.nan[injection.key] += 1
        elif injection.alert == "GPUMemoryExhausted":
            state.memory[injection.key] = 0.9875 * GPU_TOTAL_BYTES
        else:
            state.xid[injection.key] += 1


def _alert_key(alert: dict[str, object]) -> str | None:
    labels = alert["labels"]
    assert isinstance(labels, dict)
    return labels.get("job_id") or labels.get("gpu_id")


def _first_bad_sample(server: PrometheusServer, injection: Injection) -> float:
    if injection.alert == "TrainingNaNDetected":
        selector = f'{catalog.TRAINING_NAN_COUNT.name}{{job_id="{injection.key}"}}'
        bad = 1.0
    elif injection.alert == "GPUMemoryExhausted":
        selector = f'{catalog.GPU_MEMORY_USED_BYTES.name}{{gpu_id="{injection.key}"}}'
        bad = 0.9875 * GPU_TOTAL_BYTES
    else:
        selector = f'{catalog.GPU_ERRORS_TOTAL.name}{{gpu_id="{injection.key}",error_type="xid"}}'
        bad = 1.0
    result = server.api.query(f"{selector}[10m]")
    samples = [(float(ts), float(v)) for ts, v in result[0]["values"]]
    return min(ts for ts, v in samples if v >= bad)


@dataclass(frozen=True)
class ConfigRun:
    name: str
    cfg: ObservabilityConfig
    injections: list[Injection]


def measure(configs: dict[str, ObservabilityConfig], per_alert: int, spread: float, seed: int) -> list[ConfigRun]:
    rng = random.Random(seed)
    state = ExporterState()
    runs = []
    for c, (name, cfg) in enumerate(configs.items()):
        injections = [
            Injection(alert, name, f"c{c}-a{a}n{i}")
            for a, alert in enumerate(CRITICAL_DETECTION_ALERTS)
            for i in range(per_alert)
        ]
        for injection in injections:
            state.nan[injection.key] = 0
            state.memory[injection.key] = 0.5 * GPU_TOTAL_BYTES
            state.xid[injection.key] = 0
        runs.append(ConfigRun(name, cfg, injections))
    with exporter(state) as port, tempfile.TemporaryDirectory(prefix="bench-detection-") as tmp:
        servers = {
            run.name: PrometheusServer(
                Path(tmp) / f"config-{c}",
                _prometheus_config(run.cfg, port, [i.key for i in run.injections]),
                {"rules.yaml": rules_file_yaml(run.cfg)},
            )
            for c, run in enumerate(runs)
        }
        try:
            for server in servers.values():
                server.start()
            # let every series get a few clean samples (and the event windows fill) first
            warmup = 3 * max(run.cfg.scrape_interval_seconds for run in runs) + 2
            time.sleep(warmup)
            schedule = sorted(
                ((rng.uniform(0, spread), run.name, injection) for run in runs for injection in run.injections),
                key=lambda item: item[0],
            )
            started = time.time()
            pending = {id(i): i for run in runs for i in run.injections}
            deadline = started + spread + 3 * max(detection_budget(r.cfg).budget_seconds for r in runs) + 30
            while pending and time.time() < deadline:
                now = time.time() - started
                while schedule and schedule[0][0] <= now:
                    _, _, injection = schedule.pop(0)
                    _inject(state, injection)
                for run in runs:
                    firing = {
                        (a["labels"]["alertname"], _alert_key(a))
                        for a in servers[run.name].api.get("/api/v1/alerts")["alerts"]
                        if a["state"] == "firing"
                    }
                    for injection in run.injections:
                        if injection.fired is None and injection.at and (injection.alert, injection.key) in firing:
                            injection.fired = time.time()
                            pending.pop(id(injection), None)
                time.sleep(0.05)
            for run in runs:
                for injection in run.injections:
                    if injection.fired is not None:
                        injection.first_bad_sample = _first_bad_sample(servers[run.name], injection)
        finally:
            for server in servers.values():
                server.stop()
    return runs


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def render(runs: list[ConfigRun], command: str) -> str:
    lines = [
        BEGIN,
        "## Rule evaluation",
        "",
        "Critical-failure detection on a real Prometheus 2.42 scraping a local exporter as the stack scrapes",
        "the critical alerts' sources (GPU poller, training pods, training service: their own interval and",
        "timeout) and evaluating the stack's rendered rules file (the groups holding the critical alerts at",
        "the critical evaluation interval); failures injected at random moments, alert API polled every 50 ms.",
        f"Command: `{command}`. The machine was shared with other jobs (load varies); the promtool unit tests",
        "prove the same bounds in simulated time with the failure at its worst moment. The page leaves",
        "Alertmanager the page route's group_wait after firing; the bound counts it.",
        "",
        "| stacks | intervals (scrape/eval; critical) | alert | `for` | injections | fired "
        "| event -> firing s (min/median/max) | first bad sample -> firing s (min/median/max) "
        "| bound event -> firing | worst measured event -> page | budget (event -> page) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        cfg = run.cfg
        bound = detection_budget(cfg)
        fors = {a.name: a.for_seconds for a in alert_rules(cfg)}
        for alert in CRITICAL_DETECTION_ALERTS:
            injections = [i for i in run.injections if i.alert == alert]
            fired = [i for i in injections if i.fired is not None]
            worst = max((i.event_to_firing for i in fired), default=float("nan"))
            lines.append(
                f"| {run.name} | {cfg.scrape_interval_seconds}s/{cfg.evaluation_interval_seconds}s; "
                f"{cfg.critical_scrape_interval_seconds}s/{cfg.critical_evaluation_interval_seconds}s | {alert} "
                f"| {fors[alert]}s | {len(injections)} | {len(fired)} "
                f"| {_stats([i.event_to_firing for i in fired])} "
                f"| {_stats([i.sample_to_firing for i in fired if i.first_bad_sample is not None])} "
                f"| {bound.worst_event_to_firing_seconds(fors[alert])}s "
                f"| {worst + bound.group_wait_seconds:.1f}s | {cfg.critical_detection_seconds}s |"
            )
    worst = max((i.event_to_firing for r in runs for i in r.injections if i.fired), default=float("nan"))
    missed = sum(1 for r in runs for i in r.injections if i.fired is None)
    lines += [
        "",
        f"Worst event-to-firing latency over all injections: {worst:.1f} s ({missed} injections never fired).",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def stack_configs() -> dict[str, ObservabilityConfig]:
    """Every stack file's config, stacks with equal intervals together (`dev, staging`)."""
    by_intervals: dict[tuple[int, ...], tuple[list[str], ObservabilityConfig]] = {}
    for stack in available_stacks():
        cfg = validate_stack(read_stack_config(stack)).observability_config()
        key = (
            cfg.scrape_interval_seconds,
            cfg.evaluation_interval_seconds,
            cfg.critical_scrape_interval_seconds,
            cfg.critical_evaluation_interval_seconds,
            cfg.critical_detection_seconds,
        )
        by_intervals.setdefault(key, ([], cfg))[0].append(stack)
    return {", ".join(names): cfg for names, cfg in by_intervals.values()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--per-alert", type=int, default=20, help="injections per alert and config")
    parser.add_argument("--spread", type=float, default=60.0, help="seconds over which injections are spread")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md alone")
    args = parser.parse_args(argv or [])
    runs = measure(stack_configs(), args.per_alert, args.spread, args.seed)
    section = render(runs, "python -m bench detection")
    print(section)
    if not args.no_write:
        write_section(section, BEGIN, END)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
