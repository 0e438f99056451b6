"""A local HTTP sink for notifications: a server on 127.0.0.1 (free port) that records every POST's
path and JSON body in order of arrival and answers 2xx, standing for the receivers Alertmanager
posts to (its webhooks, Slack's incoming webhooks, PagerDuty's Events API v2)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    """Records `(path, body)` of every POST; `url` is its base URL (receivers are paths under it).

    Answers 200 with `reply` as the body, or the status `statuses` gives the first path prefix
    that matches (PagerDuty's Events API answers 202). Started on construction; `stop()` (or the
    end of a `with` block) shuts it down."""

    def __init__(self, reply: bytes = b"", statuses: Mapping[str, int] | None = None) -> None:
        self.posts: list[tuple[str, Any]] = []
        self.arrivals: list[float] = []  # time.time() of each post, in the order of `posts`
        self.lock = threading.Lock()
        sink, by_prefix = self, dict(statuses or {})

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
                with sink.lock:
                    sink.posts.append((self.path, body))
                    sink.arrivals.append(time.time())
                status = next((s for prefix, s in by_prefix.items() if self.path.startswith(prefix)), 200)
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> WebhookSink:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self, path: str, predicate: Callable[[Any], bool], timeout: float = 20) -> list[Any]:
        """The bodies posted to `path` that satisfy `predicate`, waiting up to `timeout` seconds for
        the first; an empty list when none came."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = [body for p, body in self.posts if p == path and predicate(body)]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    # --- Alertmanager's webhook payloads (`{"alerts": [{"labels": ..., "status": ...}, ...]}`) ----------
    def alerts(self) -> list[tuple[str, str, str]]:
        """(receiver, alertname, status) of every alert posted so far; the receiver is the path
        without its slashes."""
        with self.lock:
            posts = list(self.posts)
        return [
            (path.strip("/"), alert["labels"]["alertname"], alert["status"])
            for path, body in posts
            for alert in body["alerts"]
        ]

    def alertnames(self, receiver: str) -> set[str]:
        return {name for path, name, _ in self.alerts() if path == receiver}

    def receivers_of(self, alertname: str) -> set[str]:
        return {path for path, name, _ in self.alerts() if name == alertname}
