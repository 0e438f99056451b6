"""The trainer's metrics server: its registry on `/metrics` (text format or OpenMetrics with
exemplars, as the scraper asks) and `/healthz`, flushed before it stops.

A training process often ends right after its last values change (a NaN, the final status, the
job's duration): between two scrapes, so Prometheus never sees them. `MetricsServer.close()`,
called by hand or at interpreter exit (an unhandled exception included), therefore compares the
page with what the newest scrape was given and, when they differ, waits for one more scrape to
begin and be answered, at most:
- the job template's `FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS` (two scrape intervals), when set;
- else twice the longest interval between the recent scrapes it answered (out of Kubernetes: a
  local Prometheus), capped at `MAX_LEARNED_WAIT_SECONDS`; after a single scrape, one default
  Prometheus scrape interval (`UNKNOWN_INTERVAL_WAIT_SECONDS`);
- nothing when nobody ever scraped it and no wait is configured (a script run by hand).
Nothing changed since the last scrape: it stops at once.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence

from prometheus_client.registry import CollectorRegistry

from foxhunt_trainer.contract.exposition import CollectorPage, Format, MetricsHTTPServer
from foxhunt_trainer.contract.http_server import ServerLimits
from foxhunt_trainer.contract.web_config import WEB_CONFIG_ENV, WebConfig, load_web_config
from foxhunt_trainer.termination import HANDLER as SIGTERM_HANDLER
from foxhunt_trainer.trainer_env import FINAL_SCRAPE_WAIT_ENV, METRICS_BASE_PORT_ENV

LOG = logging.getLogger(__name__)

# Default port of the trainers' metrics server.
METRICS_PORT = 9094
MAX_LEARNED_WAIT_SECONDS = 120.0
UNKNOWN_INTERVAL_WAIT_SECONDS = 60.0  # Prometheus' default scrape interval
RECENT_SCRAPES = 5


class ScrapedPage:
    """A registry's page that remembers what the newest scrape was given and when scrapes came."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._page = CollectorPage(registry)
        self._lock = threading.Lock()
        self._last: tuple[Format, bytes] | None = None
        self._times: deque[float] = deque(maxlen=RECENT_SCRAPES)

    @property
    def formats(self) -> Sequence[Format]:
        return self._page.formats

    def render(self, fmt: Format, requested_at: float | None = None) -> bytes:
        body = self._page.render(fmt, requested_at)
        with self._lock:
            self._last = (fmt, body)
            self._times.append(time.monotonic())
        return body

    @property
    def scrapes_seen(self) -> int:
        with self._lock:
            return len(self._times)

    def unscraped_changes(self) -> bool:
        """Whether the page now differs from what the newest scrape was given (True before any)."""
        with self._lock:
            last = self._last
        if last is None:
            return True
        fmt, body = last
        return self._page.render(fmt) != body

    def learned_wait(self) -> float:
        """How long the next scrape may take to come, from the recent ones (0: never scraped)."""
        with self._lock:
            times = list(self._times)
        if not times:
            return 0.0
        if len(times) == 1:
            return UNKNOWN_INTERVAL_WAIT_SECONDS
        longest = max(b - a for a, b in itertools.pairwise(times))
        return min(MAX_LEARNED_WAIT_SECONDS, 2 * longest)


class MetricsServer:
    """`/metrics` and `/healthz` of one registry, on the bounded server (timeouts, at most
    `limits.max_requests` at once, no thread per connection); over TLS with authentication when
    `web` (or the web config file FOXHUNT_METRICS_WEB_CONFIG_FILE names) asks for it. Closed, and
    flushed (see the module docstring), at interpreter exit or on SIGTERM (within the pod's grace
    period: `foxhunt_trainer.termination`) if not before."""

    def __init__(
        self,
        registry: CollectorRegistry,
        port: int = METRICS_PORT,
        addr: str = "0.0.0.0",
        *,
        web: WebConfig | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        # Read (and checked) now, so a bad value stops the trainer at start, not after training.
        self._final_scrape_wait = final_scrape_wait_from_env()
        self.page = ScrapedPage(registry)
        if web is None:
            web_file = os.environ.get(WEB_CONFIG_ENV, "").strip()
            web = load_web_config(web_file) if web_file else WebConfig()
        self._http = MetricsHTTPServer(
            (addr, port), self.page, server_version="trainer-metrics", limits=limits, web=web
        )
        self._http.start()
        self._closed: bool | None = None
        self._close_lock = threading.Lock()
        atexit.register(self.close)
        SIGTERM_HANDLER.watch_server(self)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._http.port

    @property
    def http(self) -> MetricsHTTPServer:
        return self._http

    def flush_wait(self) -> float:
        """The longest `close()` would wait now for a scrape of the unscraped changes (0: none)."""
        if not self.page.unscraped_changes():
            return 0.0
        return self._final_scrape_wait if self._final_scrape_wait is not None else self.page.learned_wait()

    def close(self, final_scrape_wait: float | None = None) -> bool:
        """Stop serving, after waiting (bounded) for one more scrape when the page changed since
        the newest scrape: values set just before, such as a NaN count, a finished job's status
        and duration, reach Prometheus although the process exits next. `final_scrape_wait`
        overrides the bound. Returns whether nothing was left unscraped. A second call returns
        the first one's answer."""
        with self._close_lock:
            if self._closed is not None:
                return self._closed
            atexit.unregister(self.close)
            if not self.page.unscraped_changes():
                scraped = True
            else:
                wait = self.flush_wait() if final_scrape_wait is None else final_scrape_wait
                left = SIGTERM_HANDLER.time_left()  # after SIGTERM: within the pod's grace period
                if left is not None:
                    wait = min(wait, left)
                if wait > 0:
                    LOG.debug("waiting up to %.1fs for a last scrape of the changed metrics", wait)
                scraped = self._http.scrapes.wait_for_next(wait) if wait > 0 else False
            self._http.stop()
            self._closed = scraped
            return scraped


def final_scrape_wait_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds to wait for a final scrape, from FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS (None: unset)."""
    text = (os.environ if environ is None else environ).get(FINAL_SCRAPE_WAIT_ENV, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:  # NaN fails too
        raise ValueError(f"{FINAL_SCRAPE_WAIT_ENV}={text!r}: expected seconds between 0 and 3600")
    return seconds


def rank_metrics_port(local_rank: int, environ: Mapping[str, str] | None = None) -> int:
    """The port a rank serves its metrics on: the base port (FOXHUNT_METRICS_BASE_PORT, which the
    job template sets where torchrun runs; default 9094) plus its local rank, so every process of a
    pod has its own port, declared as container port `metrics-<local rank>`."""
    text = (os.environ if environ is None else environ).get(METRICS_BASE_PORT_ENV, "").strip()
    try:
        base = int(text) if text else METRICS_PORT
    except ValueError:
        base = -1
    port = base + local_rank
    if not base >= 1 or not port <= 65535:
        raise ValueError(
            f"{METRICS_BASE_PORT_ENV}={text!r} with local rank {local_rank}: expected a base port so that base + "
            "local rank is a TCP port (1-65535)"
        )
    return port


def start_metrics_server(registry: CollectorRegistry, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> MetricsServer:
    return MetricsServer(registry, port, addr)
