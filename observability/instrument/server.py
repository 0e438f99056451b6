"""The trainer's metrics server: its registry on `/metrics` (text format or OpenMetrics with
exemplars, as the scraper asks) and `/healthz`, and a last scrape waited for before it stops."""

from __future__ import annotations

import os
from collections.abc import Mapping

from prometheus_client.registry import CollectorRegistry

from observability.exposition import CollectorPage, MetricsHTTPServer
from observability.scrape_config import FINAL_SCRAPE_WAIT_ENV

# Default port of the trainers' metrics server.
METRICS_PORT = 9094


class MetricsServer:
    """`/metrics` and `/healthz` of one registry, served from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> None:
        # Read (and checked) now, so a bad value stops the trainer at start, not after training.
        self._final_scrape_wait = final_scrape_wait_from_env()
        self._http = MetricsHTTPServer((addr, port), CollectorPage(registry), server_version="trainer-metrics")
        self._http.start()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._http.port

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
