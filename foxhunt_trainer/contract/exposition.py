"""The one exposition module: the Prometheus text format (0.0.4), OpenMetrics 1.0, and the HTTP
server of `/metrics` and `/healthz`. The GPU poller and the trainer instrumentation both use it.

Writing. `format_value`, `escape_label_value`, `label_block`, `series_prefix` and `text_header` are
the pieces a sample line and a family header are made of. The poller's page writer keeps each
GPU's `name{labels} ` prefixes (made here, escaped once) between scrapes and appends values: the
fast path. `render_text` and `render_openmetrics` write any prometheus-client collector (the
trainer's registry) with the same pieces.

Formats. `negotiate` picks, from the formats a page offers, the one the scraper's `Accept` header
prefers (Prometheus asks for OpenMetrics first, then the text format). OpenMetrics carries
exemplars (a `trace_id` on a histogram bucket), the text format does not. OpenMetrics requires a
counter's sample to end in `_total`; a counter whose samples do not (the catalog name
`ml_training_nan_count`, kept because users' binaries emit it) is written as an `unknown` family
under its exact name, so the series Prometheus stores is named the same under both formats and
every rule and panel that reads it works whichever format a scraper asks for (only the type in
Prometheus' metadata reads `unknown` instead of `counter`). `_created` samples are never written.

Serving. `MetricsHTTPServer` answers `/metrics` with a `MetricsPage` in the negotiated format,
`/healthz` with 200 while the process serves HTTP, and numbers the scrapes (`ScrapeLog`) so a
process can wait for one more scrape before it exits. It runs on the bounded server of
`foxhunt_trainer.contract.http_server` (timeouts, a cap on requests in flight, no thread per connection) with
the TLS and authentication of `foxhunt_trainer.contract.web_config`.

This module imports nothing of the project but those two: the poller image copies the three.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.samples import Exemplar, Sample

from foxhunt_trainer.contract.http_server import PLAIN, BoundedHTTPServer, Request, Response, ServerLimits
from foxhunt_trainer.contract.web_config import ReloadingContext, WebConfig, authorizer

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Format:
    """One exposition format: its media type (as `Accept` names it) and the reply's Content-Type."""

    name: str
    media_type: str
    content_type: str


TEXT = Format("text", "text/plain", "text/plain; version=0.0.4; charset=utf-8")
OPENMETRICS = Format(
    "openmetrics", "application/openmetrics-text", "application/openmetrics-text; version=1.0.0; charset=utf-8"
)
TEXT_ONLY: tuple[Format, ...] = (TEXT,)
TEXT_AND_OPENMETRICS: tuple[Format, ...] = (TEXT, OPENMETRICS)


def negotiate(accept: str | None, offered: Sequence[Format]) -> Format:
    """The offered format the `Accept` header ranks highest (by `q`, then by order in the header).

    `offered[0]` answers a scraper that sends no `Accept`, accepts anything (`*/*`), or names only
    formats not offered: a page is always served, never a 406.
    """
    default = offered[0]
    if not accept:
        return default
    best, best_q = default, 0.0
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        media = media.lower()
        if media in ("*/*", default.media_type.split("/")[0] + "/*"):
            candidate: Format | None = default
        else:
            candidate = next((f for f in offered if f.media_type == media), None)
        if candidate is not None and q > best_q:
            best, best_q = candidate, q
    return best


# --- the pieces of a page ------------------------------------------------------------------------


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def escape_help(text: str, fmt: Format = TEXT) -> str:
    """HELP text: the text format escapes backslash and newline, OpenMetrics also the double quote."""
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r"\"") if fmt is OPENMETRICS else text


def format_value(value: float) -> str:
    """A sample value as Prometheus parses it: an int as is, `+Inf`, `-Inf`, `NaN`, else the
    shortest repr of the float."""
    if type(value) is int:
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def label_block(pairs: Iterable[tuple[str, str]]) -> str:
    """`a="x",b="y"` (values escaped), without the braces."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def series_prefix(name: str, labels: str) -> str:
    """`name{labels} ` (or `name ` without labels): a sample line less its value and newline."""
    return f"{name}{{{labels}}} " if labels else f"{name} "


def text_header(name: str, help_text: str, kind: str) -> str:
    """`# HELP` and `# TYPE` lines of a family in the text format."""
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {kind}\n"


# --- a prometheus-client collector as a page -----------------------------------------------------


class FamilySource(Protocol):
    """Anything with prometheus-client's `collect()`: a CollectorRegistry or a single collector."""

    def collect(self) -> Iterable[ClientFamily]: ...


_CREATED = "_created"
_TEXT_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})


def _text_family(family: ClientFamily) -> tuple[str, str]:
    """(name, type) of the text format's `# TYPE` line."""
    kind = family.type
    if kind == "counter":
        # prometheus-client's own counters are named without `_total` and expose `<name>_total`.
        # (A family already named `_total` is a catalog name, with or without samples yet.)
        named = family.name.endswith("_total") or any(s.name == family.name for s in family.samples)
        return (family.name if named else family.name + "_total"), "counter"
    if kind in _TEXT_TYPES:
        return family.name, kind
    return family.name, "gauge" if kind in ("info", "stateset") else "untyped"


def _openmetrics_family(family: ClientFamily) -> tuple[str, str]:
    """(name, type) of the OpenMetrics `# TYPE` line; see the module doc for counters without `_total`."""
    kind = family.type
    if kind == "counter":
        base = family.name.removesuffix("_total")
        if all(s.name == base + "_total" for s in family.samples if not s.name.endswith(_CREATED)):
            return base, "counter"
        return family.name, "unknown"
    if kind in ("gauge", "histogram", "summary"):
        return family.name, kind
    if kind in ("info", "stateset") and all(s.name == family.name for s in family.samples):
        return family.name, "gauge"
    return family.name, "unknown"


def _sample_labels(sample: Sample) -> str:
    return label_block(sorted(sample.labels.items()))


def _exemplar_text(exemplar: Exemplar) -> str:
    text = f" # {{{label_block(sorted(exemplar.labels.items()))}}} {format_value(exemplar.value)}"
    if exemplar.timestamp is not None:
        text += f" {format_value(float(exemplar.timestamp))}"
    return text


def render_text(source: FamilySource) -> bytes:
    """Every family of `source` in the text format (0.0.4); `_created` samples and exemplars are left out."""
    lines: list[str] = []
    for family in source.collect():
        name, kind = _text_family(family)
        lines.append(text_header(name, family.documentation, kind))
        for sample in family.samples:
            if sample.name.endswith(_CREATED):
                continue
            line = series_prefix(sample.name, _sample_labels(sample)) + format_value(sample.value)
            if sample.timestamp is not None:
                line += f" {int(float(sample.timestamp) * 1000)}"
            lines.append(line + "\n")
    return "".join(lines).encode("utf-8")


def render_openmetrics(source: FamilySource) -> bytes:
    """Every family of `source` in OpenMetrics 1.0, with the exemplars of histogram buckets and
    counters; `_created` samples are left out (they are optional)."""
    lines: list[str] = []
    for family in source.collect():
        name, kind = _openmetrics_family(family)
        lines.append(f"# HELP {name} {escape_help(family.documentation, OPENMETRICS)}\n# TYPE {name} {kind}\n")
        for sample in family.samples:
            if sample.name.endswith(_CREATED):
                continue
            line = series_prefix(sample.name, _sample_labels(sample)) + format_value(sample.value)
            if sample.timestamp is not None:
                line += f" {format_value(float(sample.timestamp))}"
            if sample.exemplar is not None and (kind == "counter" or sample.name.endswith("_bucket")):
                line += _exemplar_text(sample.exemplar)
            lines.append(line + "\n")
    lines.append("# EOF\n")
    return "".join(lines).encode("utf-8")


# --- serving -------------------------------------------------------------------------------------


class MetricsPage(Protocol):
    """What `/metrics` serves."""

    @property
    def formats(self) -> Sequence[Format]:
        """The formats the page can be written in; the first one for a scraper that names none."""
        ...

    def render(self, fmt: Format, requested_at: float | None = None) -> bytes:
        """The page in `fmt`; `requested_at` (time.monotonic) is when the scrape's request arrived
        (a page that caches may serve what was collected after it)."""
        ...


class CollectorPage:
    """A prometheus-client registry (or collector) as a page, in the text format or OpenMetrics."""

    formats: Sequence[Format] = TEXT_AND_OPENMETRICS

    def __init__(self, source: FamilySource) -> None:
        self.source = source

    def render(self, fmt: Format, requested_at: float | None = None) -> bytes:
        return render_openmetrics(self.source) if fmt is OPENMETRICS else render_text(self.source)


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


class MetricsHTTPServer:
    """`/metrics` (the page, in the format the scraper asks for), `/healthz`, and an optional index
    page at `/`, on a `BoundedHTTPServer` (one event loop, a fixed pool of workers, the `limits`;
    `web` for TLS and authentication). `start()` serves, `stop()` ends it.

    `/healthz` answers 200 while the process serves HTTP: it says nothing about what the page
    reports (a poller on a node without a working driver is healthy; its metrics say the rest).
    """

    def __init__(
        self,
        address: tuple[str, int],
        page: MetricsPage,
        *,
        index_page: bytes | None = None,
        server_version: str = "metrics",
        limits: ServerLimits | None = None,
        web: WebConfig | None = None,
    ) -> None:
        self.page = page
        self.index_page = index_page
        self.scrapes = ScrapeLog()
        web = web or WebConfig()
        self.web = web
        self._http = BoundedHTTPServer(
            address,
            self._handle,
            limits=limits,
            tls=ReloadingContext(web.tls) if web.tls is not None else None,
            authorize=authorizer(web),
            server_version=server_version,
        )
        self.server_address = self._http.server_address

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._http.port

    @property
    def http(self) -> BoundedHTTPServer:
        """The server underneath (its limits, open connections, requests in flight)."""
        return self._http

    def start(self) -> MetricsHTTPServer:
        self._http.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._http.stop()

    def _handle(self, request: Request) -> Response:
        path = request.path
        if path == "/metrics":
            return self._metrics(request)
        if path == "/healthz":
            return Response(200, b"ok\n", PLAIN)
        if path == "/" and self.index_page is not None:
            return Response(200, self.index_page, "text/html; charset=utf-8")
        return Response(404, b"not found: try /metrics or /healthz\n", PLAIN)

    def _metrics(self, request: Request) -> Response:
        page = self.page
        fmt = negotiate(request.headers.get("accept"), page.formats)
        number = self.scrapes.start()
        try:
            body = page.render(fmt, request.received)
        except Exception:
            LOG.exception("rendering /metrics failed")
            return Response(500, b"internal error\n", PLAIN)
        return Response(200, body, fmt.content_type, on_sent=lambda: self.scrapes.finish(number))
