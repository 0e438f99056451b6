"""The poller's process: HTTP server for `/metrics` and `/healthz`, XID thread, clean SIGTERM.

`/healthz` answers 200 while the process serves HTTP, whatever NVML's state: a CPU-only node or a
driver being upgraded must not make Kubernetes restart the poller (NVML's state is the metric
`ml_gpu_poller_nvml_up`). SIGTERM (and SIGINT) stop the server, the event thread and NVML, and
the process exits 0.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType

from foxhunt_trainer.contract.exposition import TEXT, TEXT_ONLY, Format, MetricsHTTPServer
from foxhunt_trainer.contract.http_server import ServerLimits
from foxhunt_trainer.contract.web_config import WebConfig, WebConfigError, load_web_config
from poller.error_counters import ErrorCounters
from poller.metrics_page import TextPageWriter
from poller.nvml_source import NvmlSource
from poller.settings import PollerSettings
from poller.shared_pass import SharedPass
from poller.xid_events import XidEventWatcher

LOG = logging.getLogger(__name__)

INDEX_PAGE = b"""<html><head><title>GPU poller</title></head><body>
<h1>NVML GPU poller</h1><p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a></p>
</body></html>
"""


class MetricsPage:
    """What `/metrics` serves: the shared pass and live counters, written as text (the only format
    offered: the page has no exemplars, and the text writer is the fast path)."""

    formats: Sequence[Format] = TEXT_ONLY

    def __init__(self, shared: SharedPass, counters: ErrorCounters, node: str) -> None:
        self._shared = shared
        self._counters = counters
        self._writer = TextPageWriter(node)

    def render(self, fmt: Format = TEXT, requested_at: float | None = None) -> bytes:
        result = self._shared.latest(requested_at)
        return self._writer.render(result, self._counters.snapshot())


def serve(settings: PollerSettings) -> int:
    """Run until SIGTERM or SIGINT; 0 on a clean stop, 1 if the web config is wrong or the address
    cannot be bound."""
    try:
        web = load_web_config(settings.web_config_file) if settings.web_config_file else WebConfig()
    except WebConfigError as err:
        LOG.error("%s", err)
        return 1
    limits = ServerLimits(max_requests=settings.max_requests, read_header_timeout=settings.read_header_timeout_seconds)
    counters = ErrorCounters()
    source = NvmlSource(counters)
    shared = SharedPass(source, counters, settings.min_interval_seconds)
    page = MetricsPage(shared, counters, settings.node_name)
    try:
        server = MetricsHTTPServer(
            (settings.host, settings.port),
            page,
            index_page=INDEX_PAGE,
            server_version="gpu-poller",
            limits=limits,
            web=web,
        )
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
    server.start()
    LOG.info(
        "serving /metrics and /healthz on %s:%d over %s%s (node %s, min interval %gs, at most %d requests at once)",
        settings.host,
        server.server_address[1],
        "HTTPS" if web.tls else "HTTP",
        " with authentication" if web.authenticates else "",
        settings.node_name,
        settings.min_interval_seconds,
        settings.max_requests,
    )
    while not stop.wait(1.0):
        pass

    server.stop()
    watcher.stop()
    source.close()
    LOG.info("stopped")
    return 0
