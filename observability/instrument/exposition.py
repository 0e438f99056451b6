"""The Prometheus text format (0.0.4) for a registry, and a tiny `/metrics` HTTP server.

Only the text format is served, whatever the scraper's Accept header asks for: in OpenMetrics a
counter's sample must end in `_total`, which would rename the catalog's seed counter
`ml_training_nan_count` (see `families.py`). Prometheus scrapes the text format fine.
"""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

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


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry  # set on the per-server subclass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, render_text(self.registry), CONTENT_TYPE)
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
        handler = type("RegistryHandler", (_Handler,), {"registry": registry})
        self._server = ThreadingHTTPServer((addr, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-server", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(registry: CollectorRegistry, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> MetricsServer:
    return MetricsServer(registry, port, addr)
