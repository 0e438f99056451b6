"""The bounded HTTP server under /metrics: timeouts close slow and half-open clients, the cap on
requests in flight answers 503 at once while scrapes go on, idle connections cost no thread,
malformed requests get a 4xx and keep-alive and pipelining work."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from foxhunt_trainer.contract.exposition import CollectorPage, MetricsHTTPServer
from foxhunt_trainer.contract.http_server import (
    BadRequest,
    BoundedHTTPServer,
    Request,
    Response,
    ServerLimits,
    parse_request_head,
)


def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send `data`, return everything the server writes until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("things", "Things.", registry=registry).inc()
    return registry


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[MetricsHTTPServer]:
    limits = ServerLimits(read_header_timeout=0.5, idle_timeout=1.0, write_timeout=1.0)
    served = MetricsHTTPServer(("127.0.0.1", 0), CollectorPage(registry), limits=limits).start()
    yield served
    served.stop()


def test_a_half_open_request_is_closed_after_the_read_header_timeout_while_scrapes_go_on(
    server: MetricsHTTPServer,
) -> None:
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
    for sock in held:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line
    started = time.monotonic()
    assert status_of(raw(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200
    assert time.monotonic() - started < 1.0
    for sock in held:
        sock.settimeout(3)
        assert sock.recv(100) == b""  # closed by the server, nothing answered
        sock.close()
    assert time.monotonic() - started < 5.0
    assert server.http.open_connections == 0


def test_idle_connections_cost_no_thread(server: MetricsHTTPServer) -> None:
    baseline = threading.active_count()
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
    time.sleep(0.1)
    assert threading.active_count() == baseline
    assert server.http.open_connections == 200
    for sock in held:
        sock.close()


class SlowPage:
    formats = CollectorPage(CollectorRegistry()).formats

    def __init__(self) -> None:
        self.release = threading.Event()

    def render(self, fmt: object, requested_at: float | None = None) -> bytes:
        self.release.wait(5)
        return b"slow 1\n"


def test_requests_beyond_the_cap_are_answered_503_at_once_and_service_resumes() -> None:
    page = SlowPage()
    limits = ServerLimits(max_requests=3, workers=3)
    server = MetricsHTTPServer(("127.0.0.1", 0), page, limits=limits).start()
    try:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
        for sock in held:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 3
        while server.http.in_flight < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        reply = raw(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(reply) == 503 and b"Retry-After: 1" in reply
        assert time.monotonic() - started < 1.0
        assert server.http.refused_busy == 1
        page.release.set()
        for sock in held:
            sock.settimeout(5)
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
            sock.close()
        assert status_of(raw(server.port, b"GET /metrics HTTP/1.0\r\n\r\n")) == 200
    finally:
        page.release.set()
        server.stop()


def test_keep_alive_and_pipelined_requests_are_answered_in_order(server: MetricsHTTPServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for path in ("/metrics", "/healthz", "/metrics"):
        connection.request("GET", path)
        response = connection.getresponse()
        assert response.status == 200
        response.read()
    connection.close()
    reply = raw(
        server.port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 404" in reply
    assert server.scrapes.start() == 3


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(server: MetricsHTTPServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1000).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert sock.recv(100) == b""
        assert 0.8 < time.monotonic() - started < 3


def test_a_client_that_never_reads_is_dropped_after_the_write_timeout() -> None:
    big = b"x" * (64 * 1024 * 1024)

    def handler(request: Request) -> Response:
        return Response(200, big)

    server = BoundedHTTPServer(("127.0.0.1", 0), handler, limits=ServerLimits(write_timeout=0.5)).start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.open_connections == 0 and server.in_flight == 0
        sock.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", 405),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET /metrics FTP/1.0\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),
        (b"GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"G\x00T /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /m\xffetrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X: 1\r\n" * 150 + b"\r\n", 431),
        (b"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200),
        (b"GET /healthz HTTP/1.0\n\n", 200),
        (b"HEAD /metrics HTTP/1.0\r\n\r\n", 200),
    ],
)
def test_malformed_requests_get_a_clear_status_and_the_server_keeps_serving(
    server: MetricsHTTPServer, request_bytes: bytes, status: int
) -> None:
    reply = raw(server.port, request_bytes)
    assert status_of(reply) == status, reply[:200]
    assert status_of(raw(server.port, b"GET /healthz HTTP/1.0\r\n\r\n")) == 200


def test_head_answers_the_headers_only(server: MetricsHTTPServer) -> None:
    reply = raw(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert body == b"" and b"Content-Length: " in head


def test_parse_request_head_names_what_is_wrong() -> None:
    with pytest.raises(BadRequest, match="malformed request line"):
        parse_request_head(b"GET /", "peer", 10)
    request = parse_request_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain", "peer", 10)
    assert (request.path, request.headers["accept"]) == ("/metrics", "text/plain")


def test_more_connections_than_the_cap_close_the_oldest_waiting_one(registry: CollectorRegistry) -> None:
    limits = ServerLimits(max_connections=20)
    server = MetricsHTTPServer(("127.0.0.1", 0), CollectorPage(registry), limits=limits).start()
    try:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
        time.sleep(0.1)
        assert status_of(raw(server.port, b"GET /metrics HTTP/1.0\r\n\r\n")) == 200
        held[0].settimeout(2)
        assert held[0].recv(10) == b""  # the oldest was closed to make room
        assert server.http.open_connections <= 20
        for sock in held:
            sock.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "limits",
    [{"read_header_timeout": 0}, {"write_timeout": float("nan")}, {"max_requests": 0}, {"workers": 1.5}],
)
def test_bad_limits_are_refused_with_the_name(limits: dict[str, float]) -> None:
    name = next(iter(limits))
    with pytest.raises(ValueError, match=name):
        ServerLimits(**limits)  # type: ignore[arg-type]
