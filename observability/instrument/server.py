"""The trainer's metrics server: its registry on `/metrics` (text format or OpenMetrics with
exemplars, as the scraper asks) and `/healthz`, and a last scrape waited for before it stops."""

from __future__ import annotations

import os
from collections.abc import Mapping

from prometheus_client.registry import CollectorRegistry

from observability.exposition import CollectorPage, MetricsHTTPServer
from observability.http_server import ServerLimits
from observability.scrape_config import FINAL_SCRAPE_WAIT_ENV
from observability.web_config import WEB_CONFIG_ENV, WebConfig, load_web_config

# Default port of the trainers' metrics server.
METRICS_PORT = 9094


class MetricsServer:
    """`/metrics` and `/healthz` of one registry, on the bounded server (timeouts, at most
    `limits.max_requests` at once, no thread per connection); over TLS with authentication when
    `web` (or the web config file FOXHUNT_METRICS_WEB_CONFIG_FILE names, as the job template sets)
    asks for it."""

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
        if web is None:
            web_file = os.environ.get(WEB_CONFIG_ENV, "").strip()
            web = load_web_config(web_file) if web_file else WebConfig()
        self._http = MetricsHTTPServer(
            (addr, port), CollectorPage(registry), server_version="trainer-metrics", limits=limits, web=web
        )
        self._http.start()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._http.port

    @property
    def http(self) -> MetricsHTTPServer:
        return self._http

    def close(self, final_scrape_wait: float | None = None) -> bool:
        """Stop serving, after waiting (at most `final_scrape_wait` seconds; default: the
        FOXHUNT_METRICS_FINAL_SCRAPE_WAIT_SECONDS env the job template sets, else 0) for one more
        scrape to begin and be answered: values set just before, such as a finished job's duration
        and status, then reach Prometheus although the process exits next. Returns whether that
        scrape came (True when no wait was asked for)."""
        wait = self._final_scrape_wait if final_scrape_wait is None else final_scrape_wait
        scraped = self._http.scrapes.wait_for_next(wait) if wait > 0 else True
        self._http.stop()
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
