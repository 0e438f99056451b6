"""The metrics server as it was before it was bounded (a thread per connection, no timeouts, no
cap), for the side-by-side figures of `python -m bench http_limits`. Not used anywhere else.

`python -m bench._previous_server <poller args>` runs the poller with this server in place of the
bounded one.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from foxhunt_trainer.contract.exposition import MetricsPage, negotiate
from poller import cli, server


class PreviousMetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], page: MetricsPage, **_: Any) -> None:
        self.page = page
        super().__init__(address, _Handler)
        self.port = self.server_address[1]

    def start(self) -> PreviousMetricsHTTPServer:
        threading.Thread(target=self.serve_forever, args=(0.25,), daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: PreviousMetricsHTTPServer

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/metrics":
            page = self.server.page
            fmt = negotiate(self.headers.get("Accept"), page.formats)
            body, content_type = page.render(fmt), fmt.content_type
        else:
            body, content_type = b"ok\n", "text/plain"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> int:
    server.MetricsHTTPServer = PreviousMetricsHTTPServer  # type: ignore[assignment,attr-defined]
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
