"""Logs, traces and metrics linked for real: every link Grafana's datasources and the traces dashboard
declare resolves on data the project's own instrumentation produces. No Grafana is needed:

- three synthetic trainers (logfmt, JSON and text logs) run as the rendered job template would run
  them (its env, with the downward API filled in for three pods) and send their spans to an
  in-process OTLP collector; their stdout is captured, as containerd would for the log shipper;
- logs -> trace: the Loki datasource's `matcherRegex`, read from the rendered datasources.yaml,
  extracts exactly the trace IDs the collector received, and finds the lines of every span that logs;
- trace -> logs: the LogQL the Tempo datasource's `tracesToLogsV2` link sends for a trace (as Grafana
  10 and Grafana 11/12 write it) and the one the traces dashboard's logs panel sends, parsed with
  Grafana's LogQL grammar and applied to the captured lines with the labels Promtail attaches
  (namespace, pod, container), select that trace's lines and no others;
- metric -> trace: a real Prometheus 2.42 with exemplar storage scrapes the trainers (OpenMetrics,
  negotiated), and `/api/v1/query_exemplars` of the iteration and checkpoint histograms returns
  trace IDs the collector received.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from dashboards.queries import builtin_values, substitute_variables
from foxhunt_trainer.contract import catalog
from harness.ports import free_port
from harness.prometheus import PrometheusServer, config_yaml
from infra import REPO_ROOT
from infra.offline import render
from observability.datasources import TRACE_ID_REGEX
from observability.scrape_config import EXEMPLAR_STORAGE_FEATURE, PROMETHEUS_REQUIRES_ANNOTATION
from tests.querylang.logql import log_queries

from .conftest import CollectorStub, http_get
from .test_live_prometheus import wait_until

pytestmark = pytest.mark.slow

STACK = "dev"
NODE = "gpu-node-1"
TRAINER_WAIT = 60.0  # seconds for the trainers to train, report and flush on a loaded 2-core machine
# The spans the synthetic trainer logs in (job start and end, fold finished, epoch done or NaN,
# checkpoint saved or failed); data_load spans log nothing.
LOGGING_SPANS = frozenset({"training_job", "fold", "epoch", "checkpoint_save"})
TRAINERS = (("logfmt", "dqn-training-a1b2c"), ("json", "dqn-training-d3e4f"), ("text", "dqn-training-g5h6i"))
TRAINER_ARGS = (
    "--folds", "2", "--epochs-per-fold", "3", "--epoch-seconds", "0.2", "--checkpoint-every", "2",
    "--nan-at-epochs", "2", "--fail-checkpoint-at-epochs", "4", "--linger", "-1",
)  # fmt: skip
SPAN_ID_FIELD = re.compile(r'span_id"?\s*[=:]\s*"?([0-9a-f]{16})')


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    name: str
    resource: dict[str, str]


def received_spans(collector: CollectorStub) -> list[Span]:
    spans: list[Span] = []
    for request in list(collector.requests):
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                spans.extend(Span(s.trace_id.hex(), s.span_id.hex(), s.name, resource) for s in scope_spans.spans)
    return spans


@dataclass(frozen=True)
class Rendered:
    """What the test reads from the rendered dev stack."""

    job: dict[str, Any]
    datasources: dict[str, Any]
    traces_dashboard: dict[str, Any]
    scrape_config: str
    dashboards: dict[str, dict[str, Any]]

    @property
    def namespace(self) -> str:
        return str(self.job["metadata"]["namespace"])

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.job["spec"]["template"]["spec"]["containers"]
        return dict(container)

    def datasource(self, kind: str) -> dict[str, Any]:
        (source,) = (d for d in self.datasources["datasources"] if d["type"] == kind)
        return dict(source)


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    result = render.render_stack(STACK)
    (job_path,) = (p for p in result.files if p.startswith("kubernetes/job_"))
    return Rendered(
        job=yaml.safe_load(result.files[job_path]),
        datasources=yaml.safe_load(result.files["grafana/datasources.yaml"]),
        traces_dashboard=json.loads(result.files["dashboards/foxhunt-traces.json"]),
        scrape_config=result.files["prometheus/scrape-config.yaml"],
        dashboards={p: json.loads(t) for p, t in result.files.items() if p.startswith("dashboards/")},
    )


def undo_grafana_escaping(text: str) -> str:
    """Grafana's provisioning reads `$$` as a literal `$` (and would expand `$VAR`: none is used here)."""
    assert not re.search(r"(?<!\$)\$(?!\$)", text.replace("$$", "")), f"unescaped $ in {text!r}"
    return text.replace("$$", "$")


def exemplar_panel_queries(rendered: Rendered) -> list[str]:
    """The PromQL of every dashboard target that asks for exemplars, with every template variable
    at "All" (`.*`) and Grafana's built-ins at their defaults."""
    queries = []
    for dashboard in rendered.dashboards.values():
        variables = {v["name"]: ".*" for v in dashboard.get("templating", {}).get("list", [])}
        panels = [p for top in dashboard["panels"] for p in (top, *top.get("panels", []))]
        for target in (t for p in panels for t in p.get("targets", []) if t.get("exemplar")):
            queries.append(substitute_variables(target["expr"], {**variables, **builtin_values()}))
    return queries


def pod_env(rendered: Rendered, pod: str, collector_port: int) -> dict[str, str]:
    """The trainer container's env as the kubelet sets it for `pod`: the downward API filled in,
    `$(VAR)` references expanded; the OTLP endpoint points at the test's collector."""
    downward = {
        "metadata.name": pod,
        "metadata.namespace": rendered.namespace,
        "spec.nodeName": NODE,
        "metadata.labels['batch.kubernetes.io/job-name']": pod.rsplit("-", 1)[0],
    }
    env: dict[str, str] = {}
    for entry in rendered.container["env"]:
        if "valueFrom" in entry:
            env[entry["name"]] = downward[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), entry["value"])
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector_port}"
    return env


@dataclass
class Trainer:
    log_format: str
    pod: str
    port: int
    process: subprocess.Popen[bytes]
    stdout: Path

    def lines(self) -> list[str]:
        return self.stdout.read_text().splitlines()


@dataclass(frozen=True)
class Run:
    trainers: tuple[Trainer, ...]
    spans: tuple[Span, ...]
    exemplars: dict[str, set[str]]  # PromQL (a bucket series or a panel's query) -> exemplar trace IDs
    container: str
    namespace: str


@pytest.fixture(scope="module")
def run(rendered: Rendered, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:

    work = tmp_path_factory.mktemp("links")
    collector = CollectorStub()
    receiver = grpc.server(ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, receiver)  # type: ignore[no-untyped-call]
    collector_port = receiver.add_insecure_port("127.0.0.1:0")
    receiver.start()
    trainers: list[Trainer] = []
    prometheus: PrometheusServer | None = None
    try:
        for log_format, pod in TRAINERS:
            port = free_port()
            env = {"PATH": "/usr/bin:/bin", "LOG_FORMAT": log_format, **pod_env(rendered, pod, collector_port)}
            stdout = work / f"{pod}.stdout"
            with stdout.open("wb") as out, (work / f"{pod}.stderr").open("wb") as err:
                process = subprocess.Popen(
                    [sys.executable, "-m", "examples.synthetic_trainer", "--listen", f"127.0.0.1:{port}",
                     "--job-id", f"run-{pod}", *TRAINER_ARGS],
                    cwd=REPO_ROOT, env=env, stdout=out, stderr=err,
                )  # fmt: skip
            trainers.append(Trainer(log_format, pod, port, process, stdout))
        scrape = {
            "job_name": "training-job",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "static_configs": [
                {"targets": [f"127.0.0.1:{t.port}"], "labels": {"namespace": rendered.namespace, "pod": t.pod}}
                for t in trainers
            ],
        }
        prometheus = PrometheusServer(
            work / "prometheus",
            config_yaml([scrape], [], scrape_interval="1s", evaluation_interval="1s"),
            extra_args=(f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}",),
        ).start()
        api = prometheus.api
        for trainer in trainers:
            wait_until(
                f"{trainer.pod} to finish training",
                lambda t=trainer: "job finished" in t.stdout.read_text(),
                TRAINER_WAIT,
            )
            assert http_get(trainer.port, "/healthz")[0] == 200
        buckets = (
            catalog.TRAINING_ITERATION_SECONDS.bucket,
            catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket,
            *exemplar_panel_queries(rendered),
        )
        started = time.time() - 600

        def exemplars() -> dict[str, set[str]] | None:
            found: dict[str, set[str]] = {}
            for series in buckets:
                data = api.get(
                    "/api/v1/query_exemplars", {"query": series, "start": f"{started:.3f}", "end": f"{time.time():.3f}"}
                )
                found[series] = {e["labels"]["trace_id"] for s in data for e in s["exemplars"]}
            return found if all(len(ids) == len(trainers) for ids in found.values()) else None

        found = wait_until("an exemplar of every trainer in Prometheus", exemplars, TRAINER_WAIT)
        for trainer in trainers:
            trainer.process.send_signal(signal.SIGTERM)
        for trainer in trainers:
            assert trainer.process.wait(timeout=30) == 0, (work / f"{trainer.pod}.stderr").read_text()
        wait_until(
            "every trainer's spans",
            lambda: sum(s.name == "training_job" for s in received_spans(collector)) == len(trainers),
            TRAINER_WAIT,
        )
        yield Run(
            tuple(trainers), tuple(received_spans(collector)), found, rendered.container["name"], rendered.namespace
        )
    finally:
        for trainer in trainers:
            if trainer.process.poll() is None:
                trainer.process.kill()
                trainer.process.wait()
        if prometheus is not None:
            prometheus.stop()
        receiver.stop(grace=None).wait(5)


def test_every_log_line_is_one_record_in_its_format_and_ids_appear_only_inside_spans(run: Run) -> None:
    for trainer in run.trainers:
        lines = trainer.lines()
        assert len(lines) > 10
        for line in lines:
            if trainer.log_format == "json":
                record = json.loads(line)
                assert {"time", "level", "logger", "msg"} <= set(record)
                assert ("trace_id" in record) == ("span_id" in record)
            elif trainer.log_format == "logfmt":
                assert re.match(r"time=\S+ level=(debug|info|warning|error|critical) logger=\S+ msg=", line), line
        in_span = [line for line in lines if "trace_id" in line]
        outside = [line for line in lines if "trace_id" not in line]
        assert in_span and outside  # the startup lines come before any span
        assert all("span_id" not in line and "0000000000000000" not in line for line in outside)
        # The job's own labels where known: job_id everywhere, fold inside a fold.
        assert all(f"run-{trainer.pod}" in line for line in lines[1:])
        assert any(re.search(r'fold"?[=:]\s*"?1', line) for line in in_span)


def test_the_loki_derived_field_extracts_exactly_the_received_trace_ids_and_finds_every_logging_span(
    run: Run, rendered: Rendered
) -> None:
    (derived,) = rendered.datasource("loki")["jsonData"]["derivedFields"]
    matcher = re.compile(undo_grafana_escaping(derived["matcherRegex"]))
    assert matcher.pattern == TRACE_ID_REGEX
    spans = {(s.trace_id, s.span_id): s for s in run.spans}
    received = {s.trace_id for s in run.spans}
    extracted: set[str] = set()
    logged: set[tuple[str, str]] = set()
    for trainer in run.trainers:
        for line in trainer.lines():
            match = matcher.search(line)
            if match is None:
                assert "trace_id" not in line, line
                continue
            trace_id = match.group(1)
            extracted.add(trace_id)
            span_id = SPAN_ID_FIELD.search(line)
            assert span_id is not None, line
            assert (trace_id, span_id.group(1)) in spans, f"a line names a span the collector never got: {line}"
            logged.add((trace_id, span_id.group(1)))
    assert extracted == received
    assert len(received) == len(run.trainers)
    expected = {key for key, span in spans.items() if span.name in LOGGING_SPANS}
    assert {spans[k].name for k in expected} == LOGGING_SPANS
    assert logged == expected, f"spans without lines: {sorted(spans[k].name for k in expected - logged)}"


def tempo_link_queries(rendered: Rendered, root: Span) -> list[str]:
    """What Grafana's Tempo datasource links a span of the trace to in Loki (`tracesToLogsV2` with
    tags and `filterByTraceID`): Grafana 10 writes a line filter, Grafana 11/12 a label_format
    `contains` test; the tags map the span's resource attributes to Loki labels."""
    options = rendered.datasource("tempo")["jsonData"]["tracesToLogsV2"]
    assert options["filterByTraceID"] is True and not options.get("customQuery")
    assert options["datasourceUid"] == rendered.datasource("loki")["uid"]
    tags = ", ".join(
        f'{tag["value"] or tag["key"]}="{root.resource[tag["key"]]}"'
        for tag in options["tags"]
        if tag["key"] in root.resource
    )
    assert tags.count("=") == len(options["tags"]), f"span attributes lack a tag: {options['tags']} {root.resource}"
    trace_filter = (
        f' | label_format log_line_contains_trace_id=`{{{{ contains "{root.trace_id}" __line__  }}}}`'
        f' | log_line_contains_trace_id="true" or trace_id="{root.trace_id}"'
    )
    return [f'{{{tags}}} |="{root.trace_id}"', f"{{{tags}}}{trace_filter}"]


def dashboard_logs_query(rendered: Rendered, trace_id: str) -> str:
    """The traces dashboard's logs panel query with `$trace_id` set, as Grafana interpolates it."""
    panels = [p for p in rendered.traces_dashboard["panels"] if p.get("type") == "logs"]
    (panel,) = panels
    (target,) = panel["targets"]
    assert target["datasource"]["type"] == "loki"
    expr = str(target["expr"])
    assert "$trace_id" in expr or "${trace_id}" in expr
    return expr.replace("${trace_id}", trace_id).replace("$trace_id", trace_id)


def test_trace_to_logs_queries_select_that_traces_lines_and_no_others(run: Run, rendered: Rendered) -> None:
    promtail_lines = [
        ({"namespace": run.namespace, "pod": t.pod, "container": run.container}, line)
        for t in run.trainers
        for line in t.lines()
    ]
    roots = [s for s in run.spans if s.name == "training_job"]
    assert len(roots) == len(run.trainers)
    for root in roots:
        pod = root.resource["k8s.pod.name"]
        assert root.resource["k8s.namespace.name"] == run.namespace
        expected = [line for labels, line in promtail_lines if labels["pod"] == pod and root.trace_id in line]
        assert len(expected) > 10
        queries = [*tempo_link_queries(rendered, root), dashboard_logs_query(rendered, root.trace_id)]
        for query in log_queries(queries):
            selected = [line for labels, line in promtail_lines if query.selects(labels, line)]
            assert selected == expected, query.text
        tempo_query = log_queries(queries[:1])[0]
        assert tempo_query.matcher_texts == (f'namespace="{run.namespace}"', f'pod="{pod}"')
        assert tempo_query.stage_texts == (f'|="{root.trace_id}"',)


def test_prometheus_exemplars_of_both_histograms_name_received_traces(run: Run) -> None:
    received = {s.trace_id for s in run.spans}
    iteration = run.exemplars[catalog.TRAINING_ITERATION_SECONDS.bucket]
    checkpoint = run.exemplars[catalog.CHECKPOINT_SAVE_DURATION_SECONDS.bucket]
    assert iteration and iteration <= received
    assert checkpoint and checkpoint <= received
    # Each exemplar's trace holds the span it was recorded in.
    assert iteration == {s.trace_id for s in run.spans if s.name == "epoch"}
    assert checkpoint == {s.trace_id for s in run.spans if s.name == "checkpoint_save"}


def test_the_scrape_config_and_the_job_template_say_prometheus_needs_exemplar_storage(rendered: Rendered) -> None:
    flag = f"--enable-feature={EXEMPLAR_STORAGE_FEATURE}"
    assert rendered.scrape_config.startswith(f"# Prometheus needs {flag} ")
    assert flag in rendered.job["metadata"]["annotations"][PROMETHEUS_REQUIRES_ANNOTATION]


def test_dashboard_panels_that_show_exemplars_get_trace_ids_the_collector_received(
    run: Run, rendered: Rendered
) -> None:
    queries = exemplar_panel_queries(rendered)
    assert any(catalog.TRAINING_ITERATION_SECONDS.bucket in q for q in queries), queries
    received = {s.trace_id for s in run.spans}
    for query in queries:
        assert run.exemplars[query] and run.exemplars[query] <= received, query
