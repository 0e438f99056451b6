"""The poller's process: HTTP server for `/metrics` and `/healthz`, XID thread, clean SIGTERM.

`/healthz` answers 200 while the process serves HTTP, whatever NVML's state: a CPU-only node or a
driver being upgraded must not make Kubernetes restart the poller (NVML's state is the metric
`ml_gpu_poller_nvml_up`). SIGTERM (and SIGINT) stop the server, the event thread and NVML, and
the process exits 0.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from poller.collector import SharedPass
from poller.error_counters import ErrorCounters
from poller.exposition import CONTENT_TYPE, TextPageWriter
from poller.nvml_source import NvmlSource
from poller.settings import PollerSettings
from poller.xid_events import XidEventWatcher

LOG = logging.getLogger(__name__)

INDEX_PAGE = b"""<html><head><title>GPU poller</title></head><body>
<h1>NVML GPU poller</h1><p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a></p>
</body></html>
"""


class MetricsPage:
    """What `/metrics` serves: the shared pass and live counters, written as text."""

    def __init__(self, shared: SharedPass, counters: ErrorCounters, node: str) -> None:
        self._shared = shared
        self._counters = counters
        self._writer = TextPageWriter(node)

    def render(self) -> bytes:
        result = self._shared.latest()
        return self._writer.render(result, self._counters.snapshot())


class PollerHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: many scrapers connecting at once

    def __init__(self, address: tuple[str, int], page: MetricsPage) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, MetricsHandler)
        self.page = page


class MetricsHandler(BaseHTTPRequestHandler):
    server: PollerHTTPServer
    server_version = "gpu-poller"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server.page.render()
            except Exception:
                LOG.exception("rendering /metrics failed")
                self._reply(500, b"internal error\n", "text/plain; charset=utf-8")
                return
            self._reply(200, body, CONTENT_TYPE)
        elif path == "/healthz":
            self._reply(200, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/":
            self._reply(200, INDEX_PAGE, "text/html; charset=utf-8")
        else:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        LOG.debug("%s - %s", self.address_string(), format % args)


def serve(settings: PollerSettings) -> int:
    """Run until SIGTERM or SIGINT; 0 on a clean stop, 1 if the address cannot be bound."""
    counters = ErrorCounters()
    source = NvmlSource(counters)
    shared = SharedPass(source, counters, settings.min_interval_seconds)
    page = MetricsPage(shared, counters, settings.node_name)
    try:
        server = PollerHTTPServer((settings.host, settings.port), page)
    except OSError as err:
        LOG.error("cannot listen on %s:%d: %s", settings.host, settings.port, err)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        LOG.info("%s received, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    shared.latest()  # initialise NVML now: log its state and start watching XIDs before any scrape
    watcher = XidEventWatcher(source, counters)
    watcher.start()
    http_thread = threading.Thread(target=server.serve_forever, args=(0.25,), name="http", daemon=True)
    http_thread.start()
    LOG.info(
        "serving /metrics and /healthz on %s:%d (node %s, min interval %gs)",
        settings.host,
        server.server_address[1],
        settings.node_name,
        settings.min_interval_seconds,
    )
    while not stop.wait(1.0):
        pass

    server.shutdown()
    server.server_close()
    watcher.stop()
    source.close()
    LOG.info("stopped")
    return 0
