"""`foxhunt-report JOB_ID [JOB_ID2]`: a training job's run report from the stack's Prometheus.

Reads one job's series (or two, to compare) over its life and writes (a) a summary on the
terminal: wall time, goodput and badput by cause, the verdict and the one thing to change, MFU,
GPUs busy, samples/s, events and the alerts that fired; (b) a self-contained HTML page
(`--output`, default `foxhunt-report-<job>.html`) with plots: loss and validation loss, the phase
split over time, GPUs busy, MFU, samples/s, the ranks' compute per step, and the alerts on a
timeline. The plots of the phase split, GPUs busy and MFU and the verdict are the recording rules'
own records (`foxhunt_trainer.contract.records`); the goodput and badput of the job's life are the
rules' so-far definition (each phase's seconds summed over the ranks, over all their seconds) on
each rank's final counters; the verdict's advice is `foxhunt_trainer.contract.verdicts`, as in the
job's own log. Standard library only: the page's plots are inline SVG
(`foxhunt_trainer.report_svg`), no plotting dependency.

Prometheus: `--url` or `FOXHUNT_PROMETHEUS_URL` (http:// or https://). Over TLS, `--ca-file`
(`FOXHUNT_PROMETHEUS_CA_FILE`) verifies the server, `--cert-file`/`--key-file` give a client
certificate; credentials come from files or the environment, never the command line: a bearer token
(`--bearer-token-file`, `FOXHUNT_PROMETHEUS_BEARER_TOKEN_FILE`, or `FOXHUNT_PROMETHEUS_BEARER_TOKEN`)
or basic auth (`--username` / `FOXHUNT_PROMETHEUS_USERNAME` with `--password-file` /
`FOXHUNT_PROMETHEUS_PASSWORD_FILE`). Basic auth or a token over plain HTTP is refused.

A wrong URL, a job Prometheus does not have (or no longer has: `--lookback`, 30 days by default),
credentials refused: one line on stderr and a non-zero exit status (2: Prometheus or the job could
not be read; 3: credentials refused; 1: bad arguments), never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foxhunt_trainer.contract import catalog, records, verdicts
from foxhunt_trainer.phases import PHASES
from foxhunt_trainer.report_svg import Plot, Series, Span, line_plot, page, timeline
from foxhunt_trainer.summary import bytes_text, duration_text, percent

URL_ENV = "FOXHUNT_PROMETHEUS_URL"
CA_FILE_ENV = "FOXHUNT_PROMETHEUS_CA_FILE"
CERT_FILE_ENV = "FOXHUNT_PROMETHEUS_CERT_FILE"
KEY_FILE_ENV = "FOXHUNT_PROMETHEUS_KEY_FILE"
TOKEN_FILE_ENV = "FOXHUNT_PROMETHEUS_BEARER_TOKEN_FILE"
TOKEN_ENV = "FOXHUNT_PROMETHEUS_BEARER_TOKEN"
USERNAME_ENV = "FOXHUNT_PROMETHEUS_USERNAME"
PASSWORD_FILE_ENV = "FOXHUNT_PROMETHEUS_PASSWORD_FILE"
EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_CREDENTIALS = 1, 2, 3
MAX_POINTS = 400  # per series and plot
BADPUT = tuple(p for p in PHASES if p != verdicts.GOOD_PHASE)


class ReportError(Exception):
    """A one-line error for the terminal, with the exit status."""

    def __init__(self, message: str, status: int = EXIT_UNAVAILABLE) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Prometheus:
    """Prometheus' HTTP API at `url`, over TLS with `context` where https, with `headers`."""

    url: str
    context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0

    def get(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        request = urllib.request.Request(f"{self.url.rstrip('/')}{path}?{query}", headers=dict(self.headers))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):
                raise ReportError(
                    f"Prometheus at {self.url} refused the credentials (HTTP {error.code}): check or renew the "
                    f"token or password ({TOKEN_FILE_ENV}, {PASSWORD_FILE_ENV})",
                    EXIT_CREDENTIALS,
                ) from None
            detail = _api_error(error.read())
            raise ReportError(f"Prometheus at {self.url} answered HTTP {error.code}{detail}") from None
        except urllib.error.URLError as error:
            reason = error.reason
            if isinstance(reason, ssl.SSLError):
                raise ReportError(
                    f"TLS with Prometheus at {self.url} failed: {getattr(reason, 'reason', None) or reason} "
                    f"(the server's CA: --ca-file or {CA_FILE_ENV})"
                ) from None
            raise ReportError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        except (TimeoutError, OSError) as error:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {error}") from None
        try:
            document = json.loads(body)
        except ValueError:
            raise ReportError(f"{self.url} does not answer as Prometheus' HTTP API does (no JSON at {path})") from None
        if not isinstance(document, dict) or document.get("status") != "success":
            refusal = document.get("error") if isinstance(document, dict) else None
            raise ReportError(f"Prometheus at {self.url} refused the query: {refusal or 'no success status'}")
        return document.get("data")

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return list(self.get("/api/v1/query", params).get("result", []))

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return list(self.get("/api/v1/query_range", params).get("result", []))


def _api_error(body: bytes) -> str:
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    return f": {document.get('error')}" if isinstance(document, dict) and document.get("error") else ""


def _read_secret(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ReportError(f"cannot read the {what} file {path}: {error.strerror}", EXIT_USAGE) from None


def connect(args: argparse.Namespace, environ: Mapping[str, str]) -> Prometheus:
    """The Prometheus the flags and the environment name, with its TLS and credentials."""
    url = args.url or environ.get(URL_ENV, "")
    if not url:
        raise ReportError(f"no Prometheus URL: give --url or set {URL_ENV}", EXIT_USAGE)
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ReportError(f"Prometheus URL {url!r}: expected http://HOST:PORT or https://HOST:PORT", EXIT_USAGE)
    headers: dict[str, str] = {"Accept": "application/json"}
    token_file = args.bearer_token_file or environ.get(TOKEN_FILE_ENV)
    token = _read_secret(token_file, "bearer token") if token_file else environ.get(TOKEN_ENV, "")
    username = args.username or environ.get(USERNAME_ENV, "")
    password_file = args.password_file or environ.get(PASSWORD_FILE_ENV)
    if token and username:
        raise ReportError("give a bearer token or a username and password, not both", EXIT_USAGE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif username:
        if not password_file:
            raise ReportError(f"basic auth needs a password file: --password-file or {PASSWORD_FILE_ENV}", EXIT_USAGE)
        secret = _read_secret(password_file, "password")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{username}:{secret}".encode()).decode()
    context = None
    if parsed.scheme == "https":
        ca_file = args.ca_file or environ.get(CA_FILE_ENV)
        try:
            context = ssl.create_default_context(cafile=ca_file)
            cert, key = args.cert_file or environ.get(CERT_FILE_ENV), args.key_file or environ.get(KEY_FILE_ENV)
            if cert:
                context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            raise ReportError(f"cannot load the TLS files: {error}", EXIT_USAGE) from None
    elif "Authorization" in headers:
        raise ReportError(f"credentials over plain HTTP are refused: use https:// for {url}", EXIT_USAGE)
    return Prometheus(url, context, headers)


# --- one job's data ---------------------------------------------------------------------------------
@dataclass
class JobData:
    job_id: str
    model_type: str
    start: float
    end: float
    finished: bool
    ranks: list[str]
    plots: list[Plot]
    alerts: list[Span]
    final: dict[str, Any]

    @property
    def verdict(self) -> verdicts.Verdict | None:
        name = self.final.get("verdict")
        return verdicts.BY_NAME.get(name) if isinstance(name, str) else None


def _matcher(job_id: str) -> str:
    return '{job_id="' + job_id.replace("\\", "\\\\").replace('"', '\\"') + '"}'


def _points(result: dict[str, Any]) -> list[tuple[float, float]]:
    points = []
    for t, v in result.get("values", []):
        value = float(v)
        if math.isfinite(value):
            points.append((float(t), value))
    return points


def _last(results: Sequence[dict[str, Any]]) -> float | None:
    latest = [p[-1] for r in results if (p := _points(r))]
    return max(latest)[1] if latest else None


def load_job(prom: Prometheus, job_id: str, lookback: str, now: float | None = None) -> JobData:
    """The job's series over its life, from its start (and end) timestamps."""
    now = time.time() if now is None else now
    m = _matcher(job_id)
    started = prom.instant(
        f"max by (model_type) (last_over_time({catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS.name}{m}[{lookback}]))",
        now,
    )
    if not started:
        raise ReportError(
            f"job {job_id!r} is not in Prometheus at {prom.url} (no {catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS.name}"
            f" for it in the last {lookback}: a wrong job ID, or its series have expired)"
        )
    model_type = started[0]["metric"].get("model_type", "")
    start = min(float(s["value"][1]) for s in started)
    ended = prom.instant(f"max(last_over_time({catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS.name}{m}[{lookback}]))", now)
    finished = bool(ended)
    end = float(ended[0]["value"][1]) if ended else now
    step = max(1.0, math.ceil((end - start) / MAX_POINTS))
    window = f"{int(max(4 * step, 30))}s"
    t0, t1 = start - step, min(now, end + max(2 * step, 30.0))

    def series(expr: str, label: str | None = None) -> list[Series]:
        out = []
        for r in prom.range(expr, t0, t1, step):
            metric = r.get("metric", {})
            text = label if label is not None else ", ".join(f"{v}" for k, v in sorted(metric.items())) or "value"
            out.append(Series(text, _points(r)))
        return out

    raw = {
        "loss": prom.range(f"{catalog.TRAINING_LOSS.name}{m}", t0, t1, step),
        "validation": prom.range(f"{catalog.TRAINING_VALIDATION_LOSS.name}{m}", t0, t1, step),
        "step_loss": prom.range(f"{catalog.TRAINING_STEP_LOSS.name}{m}", t0, t1, step),
    }
    loss = Plot("loss", "Loss and validation loss", "")
    for key, label in (("loss", "loss"), ("validation", "validation loss"), ("step_loss", "step loss")):
        # Each process of the job exports the job's loss: one line per pod (or instance) where several do.
        where = [r["metric"].get("pod") or r["metric"].get("instance", "") for r in raw[key]]
        for r, source in zip(raw[key], where, strict=True):
            loss.series.append(Series(f"{label} ({source})" if len(raw[key]) > 1 else label, _points(r)))
    loss.empty_reason = "the job recorded no loss (record_training_iteration, watch().record_loss)"
    phases = Plot("phases", f"Phase split over time (share of the time, {records.WINDOW} window)", "ratio")
    for r in prom.range(f"{records.PHASE_SHARE}{m}", t0, t1, step):
        phases.series.append(Series(r["metric"].get("phase", "?"), _points(r)))
    phases.series.sort(key=lambda s: PHASES.index(s.label) if s.label in PHASES else len(PHASES))
    phases.empty_reason = f"no {records.PHASE_SHARE} (the rules are not evaluated, or no phases)"
    busy = Plot("gpu_busy", "GPUs busy", "percent", series(f"{records.GPU_BUSY}{m}", None))
    for s in busy.series:
        s.label = s.label.split(", ")[-1] if s.label else "busy"
    busy.empty_reason = "no GPU evidence (the job holds no GPU the poller reports)"
    mfu = Plot("mfu", f"MFU ({records.WINDOW} window)", "ratio", series(f"{records.MFU}{m}", "MFU"))
    mfu.empty_reason = "no MFU (no model FLOPs, or a GPU whose peak the table does not know)"
    samples = Plot(
        "samples_per_second",
        "Samples per second",
        "per_second",
        series(f"sum(rate({catalog.TRAINING_SAMPLES_TOTAL.name}{m}[{window}]))", "samples/s"),
    )
    samples.empty_reason = "the job counted no samples (record_step(samples=...))"
    compute, steps = catalog.TRAINING_PHASE_SECONDS_TOTAL.name, catalog.TRAINING_STEPS_TOTAL.name
    per_step = (
        f'sum by (rank) (rate({compute}{{job_id="{job_id}", phase="compute"}}[{window}]))\n'
        f"/ sum by (rank) (rate({steps}{m}[{window}]) > 0)"
    )
    ranks_plot = Plot("rank_compute", "Ranks' compute per step", "seconds")
    for r in prom.range(per_step, t0, t1, step):
        ranks_plot.series.append(Series(f"rank {r['metric'].get('rank', '?')}", _points(r)))
    ranks_plot.series.sort(key=lambda s: s.label)
    ranks = sorted(
        {r["metric"].get("rank", "0") for r in prom.instant(f"last_over_time({steps}{m}[{lookback}])", now)},
        key=lambda r: int(r) if r.isdigit() else 0,
    )
    ranks_plot.empty_reason = "no steps counted"

    alerts: list[Span] = []
    for r in prom.range(f'ALERTS{{job_id="{job_id}", alertstate="firing"}}', t0, t1, step):
        name = r["metric"].get("alertname", "?")
        points = [t for t, _ in _points(r)]
        begin = previous = points[0] if points else None
        for t in points[1:]:
            if previous is not None and t - previous > 1.5 * step:
                alerts.append(Span(name, begin or t, previous + step))
                begin = t
            previous = t
        if begin is not None and previous is not None:
            alerts.append(Span(name, begin, previous + step))

    # Counters: each series' last value, summed (the ranks stop at different scrapes, so the last
    # point of a sum over them would count only the rank scraped last).
    totals: dict[str, float] = {}
    for r in prom.range(f"{compute}{m}", t0, t1, step):
        if stored := _points(r):
            phase = r["metric"].get("phase", "?")
            totals[phase] = totals.get(phase, 0.0) + stored[-1][1]
    life = sum(totals.values())
    shares = {phase: seconds / life for phase, seconds in totals.items()} if life > 0 else {}

    def summed(metric: str) -> float | None:
        last = [p[-1][1] for r in prom.range(f"{metric}{m}", t0, t1, step) if (p := _points(r))]
        return sum(last) if last else None

    final: dict[str, Any] = {
        "goodput": shares.get(verdicts.GOOD_PHASE, 0.0) if shares else None,
        "shares": shares,
        "mfu": _last([{"values": [[t, v] for t, v in s.points]} for s in mfu.series]),
        "gpu_busy": _last([{"values": [[t, v] for t, v in s.points]} for s in busy.series]),
        "steps": summed(steps),
        "samples": summed(catalog.TRAINING_SAMPLES_TOTAL.name),
        "nan": summed(catalog.TRAINING_NAN_COUNT.name),
        "rollbacks": summed(catalog.TRAINING_ROLLBACKS_TOTAL.name),
        "checkpoint_bytes": summed(catalog.CHECKPOINT_WRITTEN_BYTES_TOTAL.name),
    }
    judged = [(p[-1][0], r["metric"].get("verdict")) for r in prom.range(f"{records.VERDICT}{m}", t0, t1, step)
              if (p := _points(r))]  # fmt: skip
    final["verdict"] = max(judged)[1] if judged else None
    if final["samples"] is not None and end > start:
        final["samples_per_second"] = final["samples"] / (end - start)
    plots = [loss, phases, busy, mfu, samples, ranks_plot]
    return JobData(job_id, model_type, start, end, finished, ranks, plots, alerts, final)


# --- the terminal summary ---------------------------------------------------------------------------
def summary_lines(job: JobData) -> list[str]:
    f = job.final
    state = "finished" if job.finished else "still running (or stopped without finishing)"
    ranks = f", {len(job.ranks)} ranks" if len(job.ranks) > 1 else ""
    lines = [f"job {job.job_id} ({job.model_type}){ranks}: {duration_text(job.end - job.start)}, {state}"]
    good, shares = f.get("goodput"), f.get("shares") or {}
    if good is None:
        lines.append(f"  goodput: not recorded (no {catalog.TRAINING_PHASE_SECONDS_TOTAL.name})")
    else:
        causes = sorted(((p, s) for p, s in shares.items() if p in BADPUT and s > 0), key=lambda ps: -ps[1])
        text = ", ".join(f"{p} {percent(s)}" for p, s in causes) or "none"
        lines.append(f"  goodput {percent(good)}, badput {percent(1 - good)} ({text})")
    verdict = job.verdict
    if verdict is None:
        lines.append("  verdict: none recorded")
    else:
        lines.append(f"  verdict: {verdict.name}: {verdict.meaning}")
        lines.append(f"  to change: {verdict.change}")
    figures = []
    if f.get("mfu") is not None:
        figures.append(f"MFU {f['mfu'] * 100:.3g}%")
    if f.get("gpu_busy") is not None:
        figures.append(f"GPUs {f['gpu_busy']:.0f}% busy")
    if f.get("samples_per_second") is not None:
        figures.append(f"{f['samples_per_second']:.1f} samples/s")
    if f.get("steps") is not None:
        figures.append(f"{f['steps']:.0f} steps")
    lines.append("  " + (", ".join(figures) or "no throughput recorded"))
    lines.append(
        f"  NaN events {f.get('nan') or 0:.0f}, rollbacks {f.get('rollbacks') or 0:.0f}, "
        f"checkpoints {bytes_text(f.get('checkpoint_bytes') or 0)}"
    )
    if job.alerts:
        by_name: dict[str, list[Span]] = {}
        for alert in sorted(job.alerts, key=lambda a: a.start):
            by_name.setdefault(alert.label, []).append(alert)

        def clock(t: float) -> str:
            return time.strftime("%H:%M:%S", time.gmtime(t))

        fired = ", ".join(
            f"{name} ({clock(spans[0].start)}-{clock(max(a.end for a in spans))}"
            + (f", {len(spans)} times)" if len(spans) > 1 else ")")
            for name, spans in by_name.items()
        )
        lines.append(f"  alerts fired: {fired}")
    else:
        lines.append("  alerts fired: none")
    return lines


def comparison_lines(jobs: Sequence[JobData]) -> list[str]:
    """Which of the runs was input-bound, and how their figures compare."""
    if len(jobs) < 2:
        return []
    lines = []
    bound = [j for j in jobs if j.verdict is verdicts.INPUT_BOUND]
    others = [j for j in jobs if j.verdict is not verdicts.INPUT_BOUND]
    wait = {j.job_id: (j.final.get("shares") or {}).get("data_wait", 0.0) for j in jobs}
    if bound:
        named = " and ".join(f"{j.job_id} (data wait {percent(wait[j.job_id])} of its time)" for j in bound)
        rest = "; ".join(f"{j.job_id} was {j.verdict.name if j.verdict else 'not judged'}" for j in others)
        lines.append(f"input-bound: {named}" + (f"; {rest}" if rest else ""))
    else:
        lines.append("neither run was input-bound: " + "; ".join(
            f"{j.job_id} was {j.verdict.name if j.verdict else 'not judged'}" for j in jobs))  # fmt: skip
    rates = [(j.final.get("samples_per_second"), j.job_id) for j in jobs]
    if all(r is not None for r, _ in rates):
        (fast, fast_id), (slow, slow_id) = max(rates), min(rates)
        if slow and slow_id != fast_id:
            lines.append(f"{fast_id} trained {fast / slow:.1f}x the samples per second of {slow_id}")
    goods = ", ".join(f"{j.job_id} {percent(j.final['goodput'])}" for j in jobs if j.final.get("goodput") is not None)
    if goods:
        lines.append(f"goodput: {goods}")
    return lines


def render_html(jobs: Sequence[JobData]) -> str:
    sections = []
    for job in jobs:
        t0, t1 = job.start, job.end
        plots = [line_plot(plot, t0, t1) for plot in job.plots]
        plots.append(timeline("alerts", "Alerts that fired", job.alerts, t0, t1, "no alert fired for this job"))
        sections.append((f"{job.job_id} ({job.model_type})", summary_lines(job), plots))
    title = "Run report: " + " vs ".join(j.job_id for j in jobs)
    return page(title, sections, comparison_lines(jobs))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="foxhunt-report",
        description="A training job's run report (terminal summary and an HTML page with plots) from Prometheus.",
    )
    p.add_argument("job_ids", nargs="+", metavar="JOB_ID", help="the job, or two jobs to compare")
    p.add_argument("--url", help=f"Prometheus' base URL (else ${URL_ENV})")
    p.add_argument("--output", "-o", help="the HTML file (default foxhunt-report-<job>[-vs-<job>].html)")
    p.add_argument("--lookback", default="30d", help="how far back to look for the job (PromQL duration; 30d)")
    p.add_argument("--ca-file", help=f"CA certificate verifying an https Prometheus (else ${CA_FILE_ENV})")
    p.add_argument("--cert-file", help=f"client certificate for mutual TLS (else ${CERT_FILE_ENV})")
    p.add_argument("--key-file", help=f"its key (else ${KEY_FILE_ENV})")
    p.add_argument("--bearer-token-file", help=f"file with a bearer token (else ${TOKEN_FILE_ENV} or ${TOKEN_ENV})")
    p.add_argument("--username", help=f"basic auth user (else ${USERNAME_ENV})")
    p.add_argument("--password-file", help=f"file with the basic auth password (else ${PASSWORD_FILE_ENV})")
    return p


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parser().parse_args(argv)
    env = os.environ if environ is None else environ
    try:
        if len(args.job_ids) > 2:
            raise ReportError("give one job, or two to compare", EXIT_USAGE)
        if not all(c.isdigit() or c.isalpha() for c in args.lookback[-1:]) or not args.lookback[:1].isdigit():
            raise ReportError(f"--lookback {args.lookback!r}: expected a PromQL duration such as 30d", EXIT_USAGE)
        prom = connect(args, env)
        jobs = [load_job(prom, job_id, args.lookback) for job_id in args.job_ids]
        output = Path(args.output or "foxhunt-report-" + "-vs-".join(args.job_ids) + ".html")
        text = render_html(jobs)
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as error:
            raise ReportError(f"cannot write {output}: {error.strerror}", EXIT_USAGE) from None
    except ReportError as error:
        print(f"foxhunt-report: {error}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        print("foxhunt-report: interrupted", file=sys.stderr)
        return 130
    for job in jobs:
        print("\n".join(summary_lines(job)))
    for line in comparison_lines(jobs):
        print(line)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
