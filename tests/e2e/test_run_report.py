"""The answer where the ML engineer looks, on real runs: the job's own log and `foxhunt-report`.

Two real PyTorch CPU runs of `tests/e2e/goodput_runs.py`, scraped every second by Debian's
Prometheus 2.42 evaluating the rendered rules (the efficiency alerts' `for` cut to 3 seconds), the
GPU poller on the fake NVML library giving each rank a busy H100:
- `report-input`: a loader that sleeps per sample, two ranks (two processes): input-bound;
- `report-compute`: large matrix multiplies fed by a prefetching loader worker: compute-saturated.
Each runs `RUN_SECONDS` and finishes by itself; the trainer logs progress every `PROGRESS_SECONDS`.

Proven here: each rank-0 log ends with a summary whose verdict is the rules' verdict and whose
goodput and badput shares are the recorded shares of the same run (the job's life so far: within
0.01 of this rank's own counters as Prometheus stored them, within 0.05 of the job's record, which
sums both ranks; the rules' 5-minute window covers the whole run, so the windowed shares differ only
by the first scrape's start-up, within 0.05); progress lines at the interval, none after the summary.
`foxhunt-report` against that Prometheus writes the comparison page; headless Chromium (Debian's
package) loads it with no network (its net log has no request but Chromium's own background ones,
which a control page proves it would show) and every plot has data; the comparison names the
input-bound run. A wrong URL, an unknown job and refused credentials (a TLS proxy with a bearer
token in front of the same Prometheus) each give one line and a non-zero exit, no traceback.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from foxhunt_trainer.contract import catalog, records, verdicts
from foxhunt_trainer.contract.peak_flops import DEFAULT_PEAK_FLOPS
from foxhunt_trainer.phases import PHASES
from foxhunt_trainer.trainer_env import GPU_MODEL_ENV, PROGRESS_SECONDS_ENV
from harness.ports import free_port
from harness.prometheus import PrometheusServer
from tests.tls_material import make_certificates

from .conftest import load_harness
from .test_goodput import CFG, rules_with_short_for
from .test_live_prometheus import annotated_pods_prometheus, pod_target, wait_until

pytestmark = pytest.mark.slow

RUN_SECONDS = 60.0
PROGRESS_SECONDS = 5.0
WAIT = 150.0
INPUT, COMPUTE = "report-input", "report-compute"
GPUS = {
    ("input", 0): "GPU-e2e00000-0000-0000-0000-0000000000c0",
    ("input", 1): "GPU-e2e00000-0000-0000-0000-0000000000c1",
    ("compute", 0): "GPU-e2e00000-0000-0000-0000-0000000000c2",
}
H100 = "NVIDIA H100 80GB HBM3"  # the fake NVML's default model
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
# What Chromium fetches for itself whatever the page (time, component and account services).
CHROMIUM_OWN_HOSTS = ("google.com", "googleapis.com", "gstatic.com", "gvt1.com")
REPO_ROOT = Path(__file__).resolve().parents[2]
FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def fields(line: str) -> dict[str, str]:
    return {k: json.loads(v) if v.startswith('"') else v for k, v in FIELD.findall(line)}


class Run(load_harness().ServedProcess):  # type: ignore[misc]
    READY_TIMEOUT = WAIT
    STOP_TIMEOUT = 30.0

    def __init__(self, work: Path, shape: str, job_id: str, rank: int, world: int) -> None:
        port = free_port()
        command = [sys.executable, "-m", "tests.e2e.goodput_runs", "--listen", f"127.0.0.1:{port}"]
        command += ["--run", f"{shape}:{job_id}:{GPUS[(shape, rank)]}", "--seconds", f"{RUN_SECONDS:g}"]
        command += ["--epoch-steps", "25", "--rank", str(rank), "--world-size", str(world), "--log", "--flush"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_"))}
        env.update({"LD_LIBRARY_PATH": "", PROGRESS_SECONDS_ENV: f"{PROGRESS_SECONDS:g}", GPU_MODEL_ENV: H100})
        super().__init__(f"{job_id}-rank{rank}", command, work, env, port)
        self.job_id, self.rank = job_id, rank

    def records(self) -> list[dict[str, Any]]:
        return [fields(line) for line in self.log().splitlines() if "logger=foxhunt_trainer.summary" in line]


@dataclass
class Reported:
    prometheus: PrometheusServer
    runs: list[Run]
    work: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus.port}"

    def rank0(self, job_id: str) -> Run:
        return next(r for r in self.runs if r.job_id == job_id and r.rank == 0)

    def last(self, expr: str, job_id: str) -> list[tuple[dict[str, str], float]]:
        """Each series' last value over the job's life (after it stopped being scraped too)."""
        return [(metric, value) for metric, _, value in self.last_at(expr, job_id)]

    def last_at(self, expr: str, job_id: str) -> list[tuple[dict[str, str], float, float]]:
        """Each series' last (labels, time, value) over the job's life."""
        end = self.end(job_id)
        answer = self.prometheus.api.get(
            "/api/v1/query_range",
            {"query": expr, "start": str(end - RUN_SECONDS - 30), "end": str(end + 10), "step": "1"},
        )["result"]
        return [(r["metric"], float(r["values"][-1][0]), float(r["values"][-1][1])) for r in answer if r["values"]]

    def end(self, job_id: str) -> float:
        (row,) = self.prometheus.api.query(
            f'max(last_over_time({catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS.name}{{job_id="{job_id}"}}[10m]))'
        )
        return float(row["value"][1])


def summary(run: Run) -> dict[str, dict[str, Any]]:
    return {r["msg"].split(":")[0]: r for r in run.records() if not r["msg"].startswith("progress:")}


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reported]:
    work = tmp_path_factory.mktemp("e2e-report")
    harness = load_harness()
    stoppers: list[Any] = []
    try:
        lib = harness.build_fake_nvml(work / "nvml-lib")
        busy = {"sm_util": 96.0, "sm_occupancy": 60.0, "any_tensor_util": 85.0}
        gpus = [harness.FakeGpu(uuid=u, util_gpu=100, gpm={**harness.DEFAULT_GPM_RATES, **busy}) for u in GPUS.values()]
        harness.FakeNvml(gpus=gpus).write(work / "nvml.conf")
        poller = harness.PollerProcess(lib, work / "nvml.conf", work, node="e2e-report-node")
        stoppers.append(poller.stop)
        runs = [Run(work, "input", INPUT, rank, 2) for rank in (0, 1)] + [Run(work, "compute", COMPUTE, 0, 1)]
        stoppers += [run.stop for run in runs]
        targets = [pod_target(poller.port, "monitoring", "gpu-poller-e2e", CFG.gpu_poller_service)]
        targets += [pod_target(r.port, "training", r.name, CFG.training_job_service) for r in runs]
        prometheus = annotated_pods_prometheus(work, targets, rules_with_short_for())
        stoppers.append(prometheus.stop)
        prometheus.start()  # before the runs answer: every scrape of their lives is stored
        poller.wait_ready()
        for run in runs:
            run.wait_ready()
        for run in runs:
            run.process.wait(RUN_SECONDS + WAIT)
            assert run.process.returncode == 0, run.log()[-3000:]
        result = Reported(prometheus, runs, work)
        for job_id in (INPUT, COMPUTE):  # the final scrape and the rules' evaluation after it
            wait_until(f"{job_id}'s end in Prometheus", lambda j=job_id: prometheus.api.query(
                f'last_over_time({catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS.name}{{job_id="{j}"}}[10m])'), WAIT)  # fmt: skip
        time.sleep(3)
        yield result
    finally:
        for stop in reversed(stoppers):
            stop()


@pytest.mark.parametrize(("job_id", "verdict"), [(INPUT, verdicts.INPUT_BOUND), (COMPUTE, verdicts.COMPUTE_SATURATED)])
def test_each_log_ends_with_the_rules_verdict_goodput_and_badput(reported: Reported, job_id, verdict) -> None:
    run = reported.rank0(job_id)
    records_ = run.records()
    assert records_[-1]["msg"].startswith("events:"), records_[-6:]
    got = summary(run)
    head = got["run summary"]
    assert head["status"] == "completed"
    assert got["verdict"]["verdict"] == verdict.name
    assert got["to change"]["msg"] == f"to change: {verdict.change}"
    m = f'{{job_id="{job_id}"}}'
    judged = reported.last_at(f"{records.VERDICT}{m}", job_id)
    assert judged, f"no verdict recorded for {job_id}"
    latest = max(judged, key=lambda row: row[1])  # the verdict the rules gave last
    assert latest[0]["verdict"] == verdict.name, judged

    # This rank's own shares as Prometheus stored its counters: the summary's, to rounding.
    own = {
        row[0]["phase"]: row[1]
        for row in reported.last(f'{catalog.TRAINING_PHASE_SECONDS_TOTAL.name}{{job_id="{job_id}", rank="0"}}', job_id)
    }
    total = sum(own.values())
    assert float(head["goodput"]) == pytest.approx(own["compute"] / total, abs=0.01)
    for phase in PHASES:
        if phase != "compute":
            assert float(head[f"badput_{phase}"]) == pytest.approx(own.get(phase, 0) / total, abs=0.01), phase
    # The job's record (both ranks of the input run summed) and the 5-minute windowed shares.
    so_far = {row[0]["phase"]: row[1] for row in reported.last(f"{records.PHASE_SHARE_SO_FAR}{m}", job_id)}
    (goodput_so_far,) = [v for _, v in reported.last(f"{records.GOODPUT_SO_FAR}{m}", job_id)]
    assert float(head["goodput"]) == pytest.approx(goodput_so_far, abs=0.05)
    windowed = {row[0]["phase"]: row[1] for row in reported.last(f"{records.PHASE_SHARE}{m}", job_id)}
    for phase, share in so_far.items():
        key = "goodput" if phase == "compute" else f"badput_{phase}"
        assert float(head[key]) == pytest.approx(share, abs=0.05), phase
        assert float(head[key]) == pytest.approx(windowed.get(phase, 0.0), abs=0.05), phase
    assert float(head["wall_seconds"]) == pytest.approx(RUN_SECONDS, abs=5)
    mfu = got["MFU"]
    assert float(mfu["mfu"]) > 0 and H100 in mfu["msg"]
    # The rules' MFU (model FLOPs over the summed peak of the GPUs held) over the job's life: its
    # ranks' stored FLOPs (each series' last value: the ranks stop at different scrapes) over its duration. The rules' own record divides by their 5-minute window, which a
    # 1-minute job fills a fifth of.
    flops = sum(v for _, v in reported.last(f"{catalog.TRAINING_MODEL_FLOPS_TOTAL.name}{m}", job_id))  # every rank
    (started,) = [v for _, v in reported.last(f"min({catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS.name}{m})", job_id)]
    held = sum(1 for (shape, _), _ in GPUS.items() if shape == ("input" if job_id == INPUT else "compute"))
    peak = DEFAULT_PEAK_FLOPS.peak(H100, "fp32")
    assert peak is not None
    life = flops / (reported.end(job_id) - started) / (held * peak)
    assert float(mfu["mfu"]) == pytest.approx(life, rel=0.1)


@pytest.mark.parametrize("job_id", [INPUT, COMPUTE])
def test_progress_lines_come_at_the_interval_and_stop_at_the_end(reported: Reported, job_id) -> None:
    records_ = reported.rank0(job_id).records()
    progress = [r for r in records_ if r["msg"].startswith("progress:")]
    first_summary = next(i for i, r in enumerate(records_) if r["msg"].startswith("run summary:"))
    assert all(r["msg"].startswith("progress:") for r in records_[:first_summary])
    assert not any(r["msg"].startswith("progress:") for r in records_[first_summary:])
    stamps = [
        time.mktime(time.strptime(r["time"][:19], "%Y-%m-%dT%H:%M:%S")) + float(r["time"][19:-1]) for r in progress
    ]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(progress) in (int(RUN_SECONDS / PROGRESS_SECONDS) - 1, int(RUN_SECONDS / PROGRESS_SECONDS)), stamps
    assert all(abs(gap - PROGRESS_SECONDS) < 1.0 for gap in gaps), gaps
    assert all(float(r["samples_per_second"]) > 0 and "goodput" in r and "epoch" in r for r in progress[1:])
    # rank 1 logs its phases at debug only (the run's level is info): nothing from it
    if job_id == INPUT:
        assert not next(r for r in reported.runs if r.job_id == INPUT and r.rank == 1).records()


def report(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "foxhunt_trainer.report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("FOXHUNT_")},
            "PYTHONPATH": str(REPO_ROOT),
            **(env or {}),
        },
        cwd=cwd,
    )


def chromium(work: Path, page: Path, *args: str) -> tuple[str, list[str]]:
    """Headless Chromium on `page` (a fresh profile): its stdout and the URLs its net log saw."""
    profile, netlog = work / f"profile-{time.monotonic_ns()}", work / f"netlog-{time.monotonic_ns()}.json"
    done = subprocess.run(
        ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--log-net-log={netlog}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    urls = re.findall(r'"url":\s*"([^"]+)"', netlog.read_text()) if netlog.exists() else []
    return done.stdout, urls


def foreign(urls: list[str]) -> list[str]:
    return [
        u
        for u in urls
        if u.startswith(("http://", "https://", "ws://", "wss://"))
        and not any(re.match(rf"^\w+://([^/]*\.)?{re.escape(host)}(:\d+)?(/|$)", u) for host in CHROMIUM_OWN_HOSTS)
    ]


def test_the_report_page_shows_every_plot_with_data_and_fetches_nothing(reported: Reported) -> None:
    assert shutil.which("chromium"), "Debian's chromium: scripts/install-system-packages.sh installs it"
    out = reported.work / "report.html"
    done = report(INPUT, COMPUTE, "--url", reported.url, "-o", str(out))
    assert done.returncode == 0, done.stderr
    (reported.work / "report-stdout.txt").write_text(done.stdout)
    assert f"input-bound: {INPUT} (data wait" in done.stdout and f"{COMPUTE} was compute-saturated" in done.stdout
    assert f"wrote {out}" in done.stdout
    text = out.read_text()
    assert "default-src 'none'" in text  # the page may fetch nothing
    assert set(re.findall(r"\w+://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}  # a namespace, never fetched

    dom, urls = chromium(reported.work, out, "--dump-dom")
    assert foreign(urls) == [], foreign(urls)
    sections = dom.split('<section class="job">')[1:]
    assert len(sections) == 2 and INPUT in sections[0] and COMPUTE in sections[1]
    wanted = ("loss", "phases", "gpu_busy", "mfu", "samples_per_second", "rank_compute", "alerts")
    for section, job_id in zip(sections, (INPUT, COMPUTE), strict=True):
        plots = dict(re.findall(r'data-plot="(\w+)" data-points="(\d+)"', section))
        assert set(plots) == set(wanted), plots
        empty = [p for p in wanted if int(plots[p]) == 0 and not (job_id == COMPUTE and p == "alerts")]
        assert empty == [], f"{job_id}: plots without data {empty}"
        svgs = re.findall(r'<svg[^>]*data-plot="(\w+)"[^>]*>(.*?)</svg>', section, re.S)
        for name, body in svgs:
            if int(plots[name]):
                assert re.search(r"<polyline[^>]*points=\"[\d.]+,[\d.]+ [\d.]+,[\d.]+|<rect class=\"span\"", body), name
    ranks = re.search(r'data-plot="rank_compute".*?</svg>', sections[0], re.S)
    assert ranks and "rank 0" in ranks.group(0) and "rank 1" in ranks.group(0)
    alerts = re.search(r'data-plot="alerts".*?</svg>', sections[0], re.S)
    assert alerts and "TrainingInputBound" in alerts.group(0)

    shot = reported.work / "report.png"
    chromium(reported.work, out, f"--screenshot={shot}", "--window-size=1400,2400", "--hide-scrollbars")
    assert shot.stat().st_size > 20_000  # plots drawn, not a blank page


def test_the_net_log_check_sees_a_page_that_fetches(tmp_path) -> None:
    """The control for the check above: a page that loads an image from a local server shows it."""
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = tmp_path / "fetches.html"
        page.write_text(f'<html><body><img src="http://127.0.0.1:{server.server_port}/pixel.png"></body></html>')
        _, urls = chromium(tmp_path, page, "--dump-dom")
    finally:
        server.shutdown()
        server.server_close()
    assert f"http://127.0.0.1:{server.server_port}/pixel.png" in foreign(urls) and served == ["/pixel.png"]


def test_a_wrong_url_is_one_line_and_a_non_zero_exit(tmp_path) -> None:
    done = report(INPUT, "--url", f"http://127.0.0.1:{free_port()}", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("foxhunt-report: cannot reach Prometheus at http://")
    done = report(INPUT, env={}, cwd=tmp_path)
    assert (
        done.returncode == 1
        and done.stderr == "foxhunt-report: no Prometheus URL: give --url or set FOXHUNT_PROMETHEUS_URL\n"
    )


def test_an_unknown_job_is_one_line_and_a_non_zero_exit(reported: Reported, tmp_path) -> None:
    done = report("no-such-job", env={"FOXHUNT_PROMETHEUS_URL": reported.url}, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert done.stderr.startswith("foxhunt-report: job 'no-such-job' is not in Prometheus at ")
    assert not list(tmp_path.glob("*.html"))


class AuthProxy:
    """TLS in front of the Prometheus, accepting one bearer token (as a stack's auth proxy would)."""

    def __init__(self, upstream: str, token: str, work: Path) -> None:
        certs = make_certificates(work, "prometheus.test")
        self.ca = certs.ca_cert
        expected = f"Bearer {token}"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Bearer")
                    self.end_headers()
                    return
                with urllib.request.urlopen(upstream + self.path, timeout=30) as answer:
                    body = answer.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.server_cert, certs.server_key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_over_tls_with_a_token_the_report_works_and_refused_credentials_are_one_line(
    reported: Reported, tmp_path
) -> None:
    proxy = AuthProxy(reported.url, "current-token", tmp_path)
    try:
        (tmp_path / "token").write_text("current-token\n")
        (tmp_path / "expired").write_text("expired-token\n")
        env = {"FOXHUNT_PROMETHEUS_URL": proxy.url, "FOXHUNT_PROMETHEUS_CA_FILE": str(proxy.ca)}
        good = report(COMPUTE, "--bearer-token-file", str(tmp_path / "token"), "-o", str(tmp_path / "c.html"), env=env)
        assert good.returncode == 0 and "verdict: compute-saturated" in good.stdout, good.stderr
        refused = report(COMPUTE, "--bearer-token-file", str(tmp_path / "expired"), env=env, cwd=tmp_path)
        assert refused.returncode == 3 and "Traceback" not in refused.stderr and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(
            f"foxhunt-report: Prometheus at {proxy.url} refused the credentials (HTTP 401)"
        )
        unverified = report(COMPUTE, "--bearer-token-file", str(tmp_path / "token"), cwd=tmp_path,
                            env={"FOXHUNT_PROMETHEUS_URL": proxy.url})  # fmt: skip
        assert unverified.returncode == 2 and "Traceback" not in unverified.stderr
        assert unverified.stderr.startswith(f"foxhunt-report: TLS with Prometheus at {proxy.url} failed")
    finally:
        proxy.close()
