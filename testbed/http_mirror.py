"""A real HTTP server on 127.0.0.1 serving a directory, counting requests, able to misbehave on request."""

from __future__ import annotations

import collections
import functools
import http.server
import threading
from pathlib import Path


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        server = self.server
        name = self.path.lstrip("/")
        with server.lock:
            server.requests[name] += 1
        if name in server.endless:
            self._answer_without_end()
            return
        if name not in server.truncate | server.stall:
            super().do_GET()
            return
        data = (Path(self.directory) / name).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))  # promise it all, send half...
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        if name in server.stall:  # ... then hold the connection until the mirror closes (at most 60 s)
            server.stalling.set()
            server.released.wait(60)
        self.close_connection = True  # ... and hang up


    def _answer_without_end(self):
        """200 with no Content-Length, then zeros until the client hangs up."""
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(bytes(1 << 16))
        except OSError:  # the client gave up
            self.close_connection = True


class Mirror:
    """``with Mirror(directory) as mirror: mirror.url`` serves ``directory``; ``mirror.requests`` counts."""

    def __init__(self, directory: Path, truncate: set[str] = frozenset(), stall: set[str] = frozenset(),
                 endless: set[str] = frozenset()):
        handler = functools.partial(_Handler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.requests = collections.Counter()
        self.server.truncate = set(truncate)
        # stall: send half of these, then hold the connection (at most 60 s) until the mirror closes
        self.server.stall = set(stall)
        self.server.endless = set(endless)  # an answer without end: zeros, no Content-Length
        self.server.stalling = threading.Event()
        self.server.released = threading.Event()
        self.server.lock = threading.Lock()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    @property
    def requests(self) -> collections.Counter:
        return self.server.requests

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.released.set()
        self.server.shutdown()
        self.server.server_close()
