"""The Prometheus text format (0.0.4) for a registry, and a tiny `/metrics` HTTP server.

Only the text format is served, whatever the scraper's Accept header asks for: in OpenMetrics a
counter's sample must end in `_total`, which would rename the catalog's seed counter
`ml_training_nan_count` (see `families.py`). Prometheus scrapes the text format fine.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from observability.scrape_config import FINAL_SCRAPE_WAIT_ENV

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The port seed 001 gives the trainers' metrics server.
METRICS_PORT = 9094

_TEXT_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _family_name(family: ClientFamily) -> str:
    """The name of the `# TYPE` line: the family name, or `<name>_total` for client-style counters."""
    if family.type == "counter" and not any(s.name == family.name for s in family.samples):
        return family.name + "_total"
    return family.name


def format_value(value: float) -> str:
    """A sample value as Prometheus parses it (`+Inf`, `-Inf`, `NaN`, else Python's shortest repr)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _sample_line(sample: Sample) -> str:
    labels = ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in sorted(sample.labels.items()))
    text = f"{sample.name}{{{labels}}}" if labels else sample.name
    if sample.timestamp is not None:
        return f"{text} {format_value(sample.value)} {int(float(sample.timestamp) * 1000)}\n"
    return f"{text} {format_value(sample.value)}\n"


def render_text(registry: CollectorRegistry) -> bytes:
    """Every family of the registry in the text format; `_created` samples are left out."""
    lines: list[str] = []
    for family in registry.collect():
        mtype = family.type if family.type in _TEXT_TYPES else "gauge" if family.type == "info" else "untyped"
        name = _family_name(family)
        lines.append(f"# HELP {name} {_escape_help(family.documentation)}\n")
        lines.append(f"# TYPE {name} {mtype}\n")
        lines.extend(_sample_line(s) for s in family.samples if not s.name.endswith("_created"))
    return "".join(lines).encode("utf-8")


class ScrapeLog:
    """Numbers the `/metrics` scrapes in the order they start and remembers the newest one that
    finished, so a caller can wait for a scrape that began after a given moment."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._started = 0
        self._newest_finished = 0

    def start(self) -> int:
        with self._changed:
            self._started += 1
            return self._started

    def finish(self, number: int) -> None:
        with self._changed:
            self._newest_finished = max(self._newest_finished, number)
            self._changed.notify_all()

    def wait_for_next(self, timeout: float) -> bool:
        """Wait until a scrape that starts after this call has been answered in full."""
        with self._changed:
            first_new = self._started + 1
            return self._changed.wait_for(lambda: self._newest_finished >= first_new, timeout)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry  # set on the per-server subclass
    scrapes: ScrapeLog  # set on the per-server subclass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            number = self.scrapes.start()
            self._reply(200, render_text(self.registry), CONTENT_TYPE)
            self.scrapes.finish(number)
        elif path == "/healthz":
            self._reply(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape would drown the trainer's own output


class MetricsServer:
    """`/metrics` and `/healthz` of one registry, served from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> None:
        # Read (and checked) now, so a bad value stops the trainer at start, not after training.
        self._final_scrape_wait = final_scrape_wait_from_env()
        self._scrapes = ScrapeLog()
        handler = type("RegistryHandler", (_Handler,), {"registry": registry, "scrapes": self._scrapes})
        self._server = ThreadingHTTPServer((addr, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-server", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def close(self, final_scrape_wait: float | None = None) -> bool:
        """Stop serving, after waiting (at most `final_scrape_wait` seconds; default: the
        FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS env the job template sets, else 0) for one more
        scrape to begin and be answered: values set just before, such as a finished job's duration
        and status, then reach Prometheus although the process exits next. Returns whether that
        scrape came (True when no wait was asked for)."""
        wait = self._final_scrape_wait if final_scrape_wait is None else final_scrape_wait
        scraped = self._scrapes.wait_for_next(wait) if wait > 0 else True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        return scraped


def final_scrape_wait_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for a final scrape, from FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS."""
    text = (os.environ if environ is None else environ).get(FINAL_SCRAPE_WAIT_ENV, "").strip()
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:  # NaN fails too
        raise ValueError(f"{FINAL_SCRAPE_WAIT_ENV}={text!r}: expected seconds between 0 and 3600")
    return seconds


def start_metrics_server(registry: CollectorRegistry, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> MetricsServer:
    return MetricsServer(registry, port, addr)
