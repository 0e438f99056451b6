"""A bounded HTTP/1.1 server for small GET endpoints (`/metrics`, `/healthz`): what a noisy or
hostile client cannot exhaust.

One event-loop thread accepts connections, performs TLS handshakes, reads and parses request
headers and writes responses, all non-blocking (epoll through `selectors`); a fixed pool of worker
threads runs the handler. So a connection that is open but idle costs one socket and a small
buffer, never a thread, and the thread count never changes while the server runs.

Limits (`ServerLimits`), in the spirit of Go's `http.Server` and node_exporter's
`--web.max-requests`:
- `read_header_timeout`: a connection must deliver its TLS handshake and a complete request header
  this many seconds after it was accepted (or after its first byte, between keep-alive requests);
  else it is closed. Half-open requests (`GET /metrics HTTP/1.1` without the blank line) die here.
- `idle_timeout`: a keep-alive connection with no new request is closed after this long.
- `write_timeout`: a response must be taken by the client within this long; else the connection
  is closed (a client that reads slowly cannot hold a response's memory for ever).
- `max_requests`: requests being handled or written at once; one more is answered at once with
  503 (and `Retry-After`), from the event loop, without touching the handler.
- `max_connections`: open connections; one more closes the oldest connection that is waiting for
  a request (or a handshake), so the newest client, such as a scraper, is served.
- `max_handshakes`: TLS handshakes under way at once (each holds OpenSSL's buffers); one more
  closes the oldest.
- `max_header_bytes`, `max_headers`: a bigger header is answered 431.

Only GET and HEAD are served (405 otherwise); a request with a body is answered and the connection
closed. Authentication (`authorize`) runs in the event loop, before the request counts against
`max_requests`; a refused request is answered 401 without reaching the handler.

At start the process's soft limit of open files is raised to its hard limit (as Go's runtime
does), so `max_connections` is reachable; when the kernel still refuses a connection (EMFILE),
the oldest waiting connection is closed to make room.

This module imports nothing of the project: the poller image copies it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

LOG = logging.getLogger(__name__)

PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ServerLimits:
    """How much a client may take; see the module doc. Defaults fit a Prometheus exporter."""

    read_header_timeout: float = 10.0
    idle_timeout: float = 60.0
    write_timeout: float = 10.0
    max_requests: int = 64
    max_connections: int = 10_000
    max_handshakes: int = 256
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    workers: int = 8

    def __post_init__(self) -> None:
        for name in ("read_header_timeout", "idle_timeout", "write_timeout"):
            value = getattr(self, name)
            if not 0 < value <= 3600:  # NaN fails too
                raise ValueError(f"{name}={value!r}: expected seconds above 0, at most 3600")
        for name in ("max_requests", "max_connections", "max_handshakes", "max_header_bytes", "max_headers", "workers"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name}={value!r}: expected a whole number of at least 1")


@dataclass(frozen=True)
class Request:
    """A parsed request header: header names lower-case, values as sent (latin-1)."""

    method: str
    target: str
    version: str
    headers: Mapping[str, str]
    peer: str
    received: float = 0.0  # time.monotonic() when the request header was complete

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass
class Response:
    """What a handler returns; `on_sent` runs in the event loop once the body was written in full."""

    status: int
    body: bytes
    content_type: str = PLAIN
    headers: Sequence[tuple[str, str]] = ()
    on_sent: Callable[[], None] | None = field(default=None, repr=False)


Handler = Callable[[Request], Response]
# Returns None to let the request through, or the response that refuses it (401).
Authorizer = Callable[[Request], Response | None]

_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SERVED_METHODS = ("GET", "HEAD")


class BadRequest(Exception):
    """A request header that cannot be served: the status to answer and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_request_head(head: bytes, peer: str, max_headers: int) -> Request:
    """The request line and header fields of one request (without the final blank line)."""
    lines = head.split(b"\r\n") if b"\r\n" in head else head.split(b"\n")
    while lines and lines[0] == b"":  # RFC 9112 2.2: ignore empty lines before the request line
        lines.pop(0)
    if not lines:
        raise BadRequest(400, "empty request")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method_b, target_b, version_b = parts
    if not method_b or any(c not in _TOKEN for c in method_b):
        raise BadRequest(400, "malformed method")
    if not target_b or any(c <= 0x20 or c >= 0x7F for c in target_b):
        raise BadRequest(400, "malformed request target")
    if not target_b.startswith(b"/") and target_b != b"*":
        raise BadRequest(400, "request target must be a path")
    if version_b not in (b"HTTP/1.1", b"HTTP/1.0"):
        if version_b.startswith(b"HTTP/") and len(version_b) == 8 and version_b[5:6].isdigit():
            raise BadRequest(505, "HTTP version not supported")
        raise BadRequest(400, "malformed HTTP version")
    if len(lines) - 1 > max_headers:
        raise BadRequest(431, "too many header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise BadRequest(400, "obsolete header line folding")
        name, sep, value = line.partition(b":")
        if not sep or not name or any(c not in _TOKEN for c in name):
            raise BadRequest(400, "malformed header field")
        if any((c < 0x20 and c != 0x09) or c == 0x7F for c in value):
            raise BadRequest(400, "control character in a header value")
        key = name.decode("ascii").lower()
        text = value.strip(b" \t").decode("latin-1")
        if key in headers:
            if key in ("content-length", "host", "authorization", "transfer-encoding"):
                raise BadRequest(400, f"repeated {key} header")
            text = f"{headers[key]}, {text}"
        headers[key] = text
    if version_b == b"HTTP/1.1" and "host" not in headers:
        raise BadRequest(400, "missing Host header")
    return Request(
        method_b.decode("ascii"), target_b.decode("ascii"), version_b.decode("ascii"), headers, peer, time.monotonic()
    )


def _has_body(request: Request) -> bool:
    if "transfer-encoding" in request.headers:
        return True
    length = request.headers.get("content-length")
    if length is None:
        return False
    if not length.isdigit() or len(length) > 18:
        raise BadRequest(400, "malformed Content-Length")
    return int(length) > 0


def _wants_close(request: Request) -> bool:
    tokens = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    if request.version == "HTTP/1.0":
        return "keep-alive" not in tokens
    return "close" in tokens


def raise_open_files_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards `wanted` (at most the hard limit); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError) as err:
            LOG.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, err)
    return int(soft)


_HANDSHAKE, _READING, _HANDLING, _WRITING, _CLOSED = range(5)


class _Connection:
    __slots__ = (
        "close_after",
        "counted",
        "events",
        "head_only",
        "inbuf",
        "out",
        "peer",
        "response",
        "sent",
        "sock",
        "state",
    )

    def __init__(self, sock: socket.socket, peer: str, state: int) -> None:
        self.sock = sock
        self.peer = peer
        self.state = state
        self.inbuf = b""
        self.out = b""
        self.sent = 0
        self.close_after = False
        self.counted = False
        self.response: Response | None = None
        self.events = 0
        self.head_only = False


class BoundedHTTPServer:
    """Serves `handler` on `address` within `limits`; `tls` (returns the server-side SSLContext for
    each new connection, so certificates can be renewed) for HTTPS,
    `authorize` to refuse requests before they reach the handler."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: Handler,
        *,
        limits: ServerLimits | None = None,
        tls: Callable[[], ssl.SSLContext] | None = None,
        authorize: Authorizer | None = None,
        server_version: str = "metrics",
    ) -> None:
        self.limits = limits or ServerLimits()
        self.handler = handler
        self.tls = tls
        self.authorize = authorize
        self.server_version = server_version
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(1024)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self.open_files_limit = raise_open_files_limit(self.limits.max_connections + 64)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._jobs: queue.SimpleQueue[tuple[_Connection, Request] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[_Connection, Response]] = queue.SimpleQueue()
        # Connections by deadline, oldest first (each dict has one timeout, so insertion order is
        # deadline order): waiting for a handshake or a header, idle between requests, writing.
        self._handshaking: OrderedDict[_Connection, float] = OrderedDict()
        self._reading: OrderedDict[_Connection, float] = OrderedDict()
        self._idle: OrderedDict[_Connection, float] = OrderedDict()
        self._writing: OrderedDict[_Connection, float] = OrderedDict()
        self._tls_handshakes: OrderedDict[_Connection, None] = OrderedDict()  # wrapped, under way
        self._pipelined: list[_Connection] = []  # a next request already read: parsed in the loop
        self._open = 0
        self.in_flight = 0
        self.refused_busy = 0  # requests answered 503 because max_requests were in flight
        self._stopping = False
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def open_connections(self) -> int:
        return self._open

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> BoundedHTTPServer:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        # The workers first: once the loop answers anything, every thread of the server exists.
        self._threads = [
            threading.Thread(target=self._work, name=f"http-worker-{i}", daemon=True)
            for i in range(self.limits.workers)
        ]
        self._threads.append(threading.Thread(target=self._run, name="http-loop", daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and the listening socket."""
        self._stopping = True
        self._wake()
        for _ in range(self.limits.workers):
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        if self._listener.fileno() != -1:
            self._listener.close()
        for sock in (self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already woken (buffer full) or closed
            self._wake_w.send(b"x")

    # --- the event loop --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = self._next_timeout()
                for key, events in self._selector.select(timeout):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        self._ready(key.data, events)
                self._collect_done()
                pipelined, self._pipelined = self._pipelined, []
                for conn in pipelined:
                    if conn.state == _READING:
                        self._parse(conn)
                self._expire(time.monotonic())
        except Exception:  # the loop must not die silently
            LOG.exception("HTTP event loop failed")
        finally:
            for table in (self._handshaking, self._reading, self._idle, self._writing):
                for conn in list(table):
                    self._close(conn)
            while not self._done.empty():
                conn, _response = self._done.get_nowait()
                self._close(conn)

    def _next_timeout(self) -> float:
        nearest = 0.5
        now = time.monotonic()
        for table in (self._handshaking, self._reading, self._idle, self._writing):
            if table:
                nearest = min(nearest, next(iter(table.values())) - now)
        return max(nearest, 0.0)

    def _expire(self, now: float) -> None:
        for table in (self._handshaking, self._reading, self._idle, self._writing):
            while table:
                conn, deadline = next(iter(table.items()))
                if deadline > now:
                    break
                self._close(conn)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if not self._evict_one():
                        LOG.warning("cannot accept a connection: %s", err)
                        return
                    continue
                if err.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                raise
            if self._open >= self.limits.max_connections:
                self._evict_one()
            self._adopt(sock, f"{address[0]}:{address[1]}")

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a handshake or a request."""
        for table in (self._handshaking, self._reading, self._idle):
            if table:
                self._close(next(iter(table)))
                return True
        return False

    def _adopt(self, sock: socket.socket, peer: str) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        now = time.monotonic()
        self._open += 1
        if self.tls is not None:
            # Wrapped (OpenSSL state allocated) only once the client's first bytes arrive.
            conn = _Connection(sock, peer, _HANDSHAKE)
            self._handshaking[conn] = now + self.limits.read_header_timeout
        else:
            conn = _Connection(sock, peer, _READING)
            self._reading[conn] = now + self.limits.read_header_timeout
        self._watch(conn, selectors.EVENT_READ)

    def _watch(self, conn: _Connection, events: int) -> None:
        if events == conn.events:
            return
        try:
            if conn.events == 0:
                self._selector.register(conn.sock, events, conn)
            elif events == 0:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
        except (ValueError, KeyError, OSError):
            self._close(conn)
            return
        conn.events = events

    def _ready(self, conn: _Connection, events: int) -> None:
        if conn.state == _HANDSHAKE:
            self._handshake(conn)
        elif conn.state == _READING:
            self._read(conn)
        elif conn.state == _WRITING:
            self._write(conn)

    def _handshake(self, conn: _Connection) -> None:
        assert self.tls is not None
        if not isinstance(conn.sock, ssl.SSLSocket):
            if len(self._tls_handshakes) >= self.limits.max_handshakes:
                self._close(next(iter(self._tls_handshakes)))
            self._tls_handshakes[conn] = None
            try:
                self._watch(conn, 0)
                conn.sock = self.tls().wrap_socket(conn.sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError):
                self._close(conn)
                return
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except (OSError, ValueError) as err:
            LOG.debug("%s: TLS handshake failed: %s", conn.peer, err)
            self._close(conn)
            return
        deadline = self._handshaking.pop(conn)
        self._tls_handshakes.pop(conn, None)
        conn.state = _READING
        self._reading[conn] = deadline  # the header is due by the same deadline
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)

    def _read(self, conn: _Connection) -> None:
        while True:
            try:
                data = conn.sock.recv(8192)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            except ssl.SSLWantWriteError:
                self._watch(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
                break
            except (OSError, ValueError):
                self._close(conn)
                return
            if not data:
                self._close(conn)
                return
            if not conn.inbuf and conn in self._idle:  # first byte of the next keep-alive request
                del self._idle[conn]
                self._reading[conn] = time.monotonic() + self.limits.read_header_timeout
            conn.inbuf += data
            if b"\n\r\n" in conn.inbuf or b"\n\n" in conn.inbuf or len(conn.inbuf) > self.limits.max_header_bytes:
                break
            if not (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()) and len(data) < 8192:
                break
        self._parse(conn)

    def _parse(self, conn: _Connection) -> None:
        # RFC 9112 2.2: empty lines before a request line are ignored.
        buffer = conn.inbuf = conn.inbuf.lstrip(b"\r\n")
        end, skip = buffer.find(b"\r\n\r\n"), 4
        bare = buffer.find(b"\n\n")
        if bare != -1 and (end == -1 or bare < end):
            end, skip = bare, 2
        if end == -1 or end > self.limits.max_header_bytes:
            if len(buffer) > self.limits.max_header_bytes:
                self._answer_now(conn, 431, "request header too large\n", close=True)
            return
        head, conn.inbuf = buffer[:end], buffer[end + skip :]
        self._reading.pop(conn, None)
        self._idle.pop(conn, None)
        try:
            request = parse_request_head(head, conn.peer, self.limits.max_headers)
            has_body = _has_body(request)
        except BadRequest as err:
            self._answer_now(conn, err.status, err.reason + "\n", close=True)
            return
        conn.head_only = request.method == "HEAD"
        conn.close_after = _wants_close(request) or has_body
        if request.method not in _SERVED_METHODS:
            self._answer_now(conn, 405, "only GET and HEAD are served\n", close=True, extra=(("Allow", "GET, HEAD"),))
            return
        if self.authorize is not None:
            refusal = self.authorize(request)
            if refusal is not None:
                self._send(conn, refusal)
                return
        if self.in_flight >= self.limits.max_requests:
            self.refused_busy += 1
            self._answer_now(conn, 503, "too many requests in flight\n", close=True, extra=(("Retry-After", "1"),))
            return
        self.in_flight += 1
        conn.counted = True
        conn.state = _HANDLING
        self._watch(conn, 0)
        self._jobs.put((conn, request))

    def _answer_now(
        self, conn: _Connection, status: int, text: str, *, close: bool, extra: Sequence[tuple[str, str]] = ()
    ) -> None:
        conn.close_after = conn.close_after or close
        self._send(conn, Response(status, text.encode(), PLAIN, extra))

    def _send(self, conn: _Connection, response: Response) -> None:
        conn.response = response
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = ""
        lines = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Server: {self.server_version}",
            f"Date: {formatdate(usegmt=True)}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        if conn.close_after or self._stopping:
            conn.close_after = True
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn.out = head if conn.head_only else head + response.body
        conn.sent = 0
        conn.state = _WRITING
        self._reading.pop(conn, None)
        self._idle.pop(conn, None)
        self._writing[conn] = time.monotonic() + self.limits.write_timeout
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        view = memoryview(conn.out)
        while conn.sent < len(view):
            try:
                conn.sent += conn.sock.send(view[conn.sent : conn.sent + 256 * 1024])
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            except (OSError, ValueError):
                self._close(conn)
                return
        view.release()
        self._finished(conn)

    def _finished(self, conn: _Connection) -> None:
        self._writing.pop(conn, None)
        response, conn.response = conn.response, None
        conn.out = b""
        self._release(conn)
        if response is not None and response.on_sent is not None:
            response.on_sent()
        if conn.close_after or self._stopping:
            self._close(conn)
            return
        conn.state = _READING
        now = time.monotonic()
        if conn.inbuf:
            self._reading[conn] = now + self.limits.read_header_timeout
        else:
            self._idle[conn] = now + self.limits.idle_timeout
        self._watch(conn, selectors.EVENT_READ)
        if conn.inbuf:
            self._pipelined.append(conn)
            self._wake()

    def _release(self, conn: _Connection) -> None:
        if conn.counted:
            conn.counted = False
            self.in_flight -= 1

    def _close(self, conn: _Connection) -> None:
        if conn.state == _CLOSED:
            return
        for table in (self._handshaking, self._reading, self._idle, self._writing, self._tls_handshakes):
            table.pop(conn, None)
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(conn.sock)
            conn.events = 0
        if conn.state != _HANDLING:  # a worker still holds it: closed when it hands it back
            self._close_socket(conn)
        conn.state = _CLOSED
        self._release(conn)
        conn.response = None
        conn.inbuf = conn.out = b""

    def _close_socket(self, conn: _Connection) -> None:
        """Count the connection out, then close its socket: counted out before the peer can see the
        close, so a client that has read EOF never finds its connection still counted."""
        self._open -= 1
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _collect_done(self) -> None:
        while True:
            try:
                conn, response = self._done.get_nowait()
            except queue.Empty:
                return
            if conn.state == _CLOSED:  # closed while the handler ran (server stopping)
                self._close_socket(conn)
                continue
            self._send(conn, response)

    # --- the workers -----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            try:
                response = self.handler(request)
            except Exception:
                LOG.exception("handling %s %s failed", request.method, request.path)
                response = Response(500, b"internal error\n")
            self._done.put((conn, response))
            self._wake()
