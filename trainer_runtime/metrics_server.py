"""The live metrics' HTTP endpoint, bounded: it runs inside the training process, so no client may cost it more
than a few threads and a few seconds.

prometheus_client's own server starts a thread per connection and never times one out: a few hundred half-open
connections held as many threads in the training process, after which it could start no thread or process
(torchrun's next round, data loaders, checkpoint writers). This one:

- answers GET of PATH only (404 otherwise, 405 for other methods), in Prometheus' text format;
- serves at most MAX_CONNECTIONS at once, each in a thread of its own: a connection beyond them is closed at
  once, no thread started;
- gives each connection CONNECTION_SECONDS in all (a slow client is cut off there, however it trickles) and a
  bounded request (the standard library's line and header limits);
- binds where ADDRESS_VARIABLE says (local-job: 127.0.0.1, the developer's machine is no pod), else every
  interface of the pod's own network namespace, where Prometheus reaches it.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from trainer_contract.metrics import PATH

MAX_CONNECTIONS = 8
CONNECTION_SECONDS = 5.0
# Connections the kernel holds before accept: beyond them a client waits in its own SYN backlog, not ours.
BACKLOG = 16


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True  # a connection never holds the process open
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], registry: Any):
        self.registry, self.connection_seconds = registry, CONNECTION_SECONDS
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # at capacity: no thread for this one
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.0"  # one request per connection: a slot is never held between scrapes

    def setup(self) -> None:
        super().setup()
        seconds = self.server.connection_seconds
        self.connection.settimeout(seconds)  # a client that sends nothing
        # and one that sends a byte now and then: cut off when the connection's time is up, whatever it sent
        self._cutoff = threading.Timer(seconds, self._cut)
        self._cutoff.daemon = True
        self._cutoff.start()

    def _cut(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        self._cutoff.cancel()
        try:
            super().finish()
        except OSError:  # the client went away, or was cut off
            pass

    def do_GET(self) -> None:  # noqa: N802  # http.server's name
        if urlsplit(self.path).path != PATH:
            self.send_error(404, f"only {PATH} is served here")
            return
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_error(405)

    do_POST = do_PUT = do_DELETE = do_HEAD  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # a scrape is not a log line
        pass


def serve(registry: Any, port: int, address: str = "") -> MetricsServer:
    """The endpoint on ``address`` (every interface when empty) and ``port``, answering from its own thread;
    OSError when the port cannot be bound."""
    server = MetricsServer((address, port), registry)
    threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
    return server
