"""Real servers on 127.0.0.1 for the staging tests: a Hub that huggingface_hub's client talks to (through
HF_ENDPOINT), a plain file server for https:// sources, and moto's S3 in server mode (AWS_ENDPOINT_URL). Each
logs what it served, so that a test can say "each file fetched once" or "the second run fetched nothing";
the Hub and the file server can be told to fail (a status for the next N requests, a token to require, a
slow body to interrupt), and count the requests they answer at once; the file server can serve ranges (206), or
spoil them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlparse

from localjob.ports import free_port


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now: as the servers bind (SO_REUSEADDR), so that the
    TIME_WAIT connections a server just closed on it (a test before) do not read as taken."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Faults:
    """What the next requests meet: ``status`` for the next ``count`` of them; a token required; a body sent
    ``slow_bytes_per_second`` at a time."""

    status: int = 0
    count: int = 0
    token: str | None = None
    slow_bytes_per_second: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> int:
        with self.lock:
            if self.count > 0:
                self.count -= 1
                return self.status
        return 0


class _Server:
    """A threaded HTTP server on 127.0.0.1 (or ``host``: a pod's gateway) with a request log and faults."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self, host: str = "127.0.0.1"):
        self.log: list[tuple[str, str]] = []  # (method, path) of every request
        self.faults = Faults()
        self.in_flight = self.most_in_flight = 0  # requests being answered at once: now, and the most so far
        self.counting = threading.Lock()
        self._answering = threading.local()  # whether this thread's request is still counted
        self.httpd = ThreadingHTTPServer((host, 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _handler(self):
        server = self

        class Handler(self.handler):  # type: ignore[name-defined,misc]
            owner = server

            def log_message(self, *args):  # the log is the test's, not stderr's
                pass

        return Handler

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Inside: one request being answered (counted; an idle kept-alive connection is not), until its answer's
        last bytes are handed to the socket (``answered``): the client cannot ask again before it has them."""
        with self.counting:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self._answering.counted = True
        try:
            yield
        finally:
            self.answered()

    def answered(self) -> None:
        """This thread's request is answered but for its last write: no longer counted (once)."""
        if getattr(self._answering, "counted", False):
            self._answering.counted = False
            with self.counting:
                self.in_flight -= 1

    def fetched(self, suffix: str = "") -> list[str]:
        """The files served with a body (GETs of a file, not of the Hub's API), those ending in ``suffix``."""
        return [path for method, path in self.log
                if method == "GET" and path.endswith(suffix) and not path.startswith("/api/")]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Common(BaseHTTPRequestHandler):
    owner: _Server
    protocol_version = "HTTP/1.1"

    def _refuse(self) -> bool:
        self.owner.log.append((self.command, unquote(urlparse(self.path).path)))
        faults = self.owner.faults
        status = faults.take()
        if not status and faults.token and self.headers.get("Authorization") != f"Bearer {faults.token}":
            status = 401
        if status:
            self._send(status, b'{"error": "injected"}', {"Content-Type": "application/json"})
        return bool(status)

    def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if head:
            return
        rate = self.owner.faults.slow_bytes_per_second
        for start in range(0, len(body), rate or len(body) or 1):
            if start + (rate or len(body)) >= len(body):  # the last write: the request is answered
                self.owner.answered()
            self.wfile.write(body[start:start + (rate or len(body))])
            self.wfile.flush()
            if rate and start + rate < len(body):  # not after the last: the answer is over (in_flight counts it)
                time.sleep(1.0)


class FileServer(_Server):
    """Serves the files of ``root`` (an https:// source: http.server is enough)."""

    def __init__(self, root: Path):
        self.root = root

        class Handler(_Common):
            def do_GET(self):  # noqa: N802
                with self.owner.answering():
                    self._serve(head=False)

            def do_HEAD(self):  # noqa: N802
                with self.owner.answering():
                    self._serve(head=True)

            def _serve(self, head: bool):
                if self._refuse():
                    return
                required = self.owner.required_query  # a presigned URL's: refused without it, as S3 does
                if required is not None and required not in parse_qsl(urlparse(self.path).query):
                    self._send(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>", {})
                    return
                path = root / unquote(urlparse(self.path).path).lstrip("/")
                if not path.is_file():
                    self._send(404, b"not found", {})
                    return
                announced = getattr(self.owner, "announce", None)  # a Content-Length to claim instead
                if self.owner.ranges and not head and not announced and self._part(path):
                    return
                body = path.read_bytes()
                if announced:
                    self.send_response(200)
                    self.send_header("Content-Length", str(announced))
                    self.end_headers()
                    return
                self._send(200, body, {"Content-Type": "application/octet-stream",
                                       **({"Accept-Ranges": "bytes"} if self.owner.ranges else {})}, head)

            def _part(self, path: Path) -> bool:
                """A Range request's answer (206, or 416 past the end), as a file server gives it; whether it was
                one. The owner's ``range_fault`` spoils every part but the first: "wrong" sends the bytes one
                further on (saying so), "short" announces the part and hangs up halfway through it."""
                match = re.fullmatch(r"bytes=([0-9]+)-([0-9]*)", self.headers.get("Range", ""))
                if match is None:
                    return False
                size, start = path.stat().st_size, int(match[1])
                end = min(int(match[2]) if match[2] else size - 1, size - 1)
                if start >= size:
                    self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                    return True
                fault = self.owner.range_fault if start > 0 else None
                if fault == "wrong":
                    start, end = start + 1, min(end + 1, size - 1)
                with open(path, "rb") as file:  # the part only: parts of a large file are served at once
                    file.seek(start)
                    part = file.read(end + 1 - start)
                headers = {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if fault != "short":
                    self._send(206, part, headers)
                    return True
                self.send_response(206)
                for name, value in {"Content-Length": str(len(part)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(part[:len(part) // 2])
                self.close_connection = True
                return True

        self.handler = Handler
        self.ranges = False  # whether it serves Range requests (206), as most file servers and buckets do
        self.range_fault: str | None = None  # "wrong" or "short": see _part
        self.announce: int | None = None
        self.required_query: tuple[str, str] | None = None  # (name, value) every request must carry
        super().__init__()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


class HubServer(_Server):
    """A Hugging Face Hub for huggingface_hub's client: repo info (with files' sizes, LFS sha256 and blob ids),
    and HEAD/GET of /<repo>/resolve/<revision>/<file>. Repositories are added as {path: bytes} per revision;
    files ending in .safetensors or .parquet are LFS files, as on the Hub."""

    LFS_SUFFIXES = (".safetensors", ".bin", ".parquet", ".gz")

    def __init__(self, host: str = "127.0.0.1"):
        # (repo_type, repo_id) -> revision -> (commit, files)
        self.repos: dict[tuple[str, str], dict[str, tuple[str, dict[str, bytes]]]] = {}

        class Handler(_Common):
            def do_GET(self):  # noqa: N802
                with self.owner.answering():
                    self.owner.route(self, head=False)  # type: ignore[attr-defined]

            def do_HEAD(self):  # noqa: N802
                with self.owner.answering():
                    self.owner.route(self, head=True)  # type: ignore[attr-defined]

        self.handler = Handler
        self.endless: set[str] = set()  # files whose GET sends zeros without end (chunked), as a hostile hub could
        self.unsized: set[str] = set()  # files the repository's listing gives no size for
        super().__init__(host)

    def add(self, repo_id: str, files: dict[str, bytes], *, revision: str = "main",
            repo_type: str = "model") -> str:
        """Publish ``files`` as ``revision`` of a repository; its commit id."""
        digest = hashlib.sha1(json.dumps({name: hashlib.sha256(data).hexdigest() for name, data in
                                          sorted(files.items())}).encode() + revision.encode())
        commit = digest.hexdigest()
        revisions = self.repos.setdefault((repo_type, repo_id), {})
        revisions[revision] = revisions[commit] = (commit, dict(files))
        return commit

    def _sibling(self, name: str, data: bytes) -> dict:
        sibling = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
        if name.endswith(self.LFS_SUFFIXES):
            sibling["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
        if name in self.unsized:
            del sibling["size"]
        return sibling

    def route(self, request: _Common, head: bool) -> None:
        if request._refuse():
            return
        path = unquote(urlparse(request.path).path)
        parts = path.strip("/").split("/")
        if parts[0] == "api":  # /api/{models,datasets}/<repo...>/{revision,tree}/<revision>
            if "tree" not in parts and "revision" not in parts:  # an API this Hub does not serve
                return self._missing(request, "NotFound")
            repo_type = "dataset" if parts[1] == "datasets" else "model"
            kind = "tree" if "tree" in parts else "revision"
            at = parts.index(kind)
            answer = self._tree if kind == "tree" else self._info
            answer(request, repo_type, "/".join(parts[2:at]), "/".join(parts[at + 1:]))
            return
        repo_type = "dataset" if parts[0] == "datasets" else "model"
        parts = parts[1:] if repo_type == "dataset" else parts
        at = parts.index("resolve")
        repo_id, revision, name = "/".join(parts[:at]), parts[at + 1], "/".join(parts[at + 2:])
        self._file(request, repo_type, repo_id, revision, name, head)

    def _missing(self, request: _Common, code: str) -> None:
        request._send(404, json.dumps({"error": code}).encode(),
                      {"Content-Type": "application/json", "X-Error-Code": code})

    def _revision(self, request: _Common, repo_type: str, repo_id: str, revision: str):
        """The revision's (commit, files), or None after answering 404 as the Hub does."""
        revisions = self.repos.get((repo_type, repo_id))
        if revisions is None:
            self._missing(request, "RepoNotFound")
        elif revision not in revisions:
            self._missing(request, "RevisionNotFound")
        else:
            return revisions[revision]
        return None

    def _info(self, request: _Common, repo_type: str, repo_id: str, revision: str) -> None:
        found = self._revision(request, repo_type, repo_id, revision)
        if found is None:
            return
        commit, files = found
        body = {"id": repo_id, "sha": commit, "private": False,
                "siblings": [self._sibling(name, data) for name, data in sorted(files.items())]}
        request._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _tree(self, request: _Common, repo_type: str, repo_id: str, revision: str) -> None:
        """Every file of the revision (list_repo_tree, which snapshot_download reads), recursively."""
        found = self._revision(request, repo_type, repo_id, revision)
        if found is None:
            return
        entries = []
        for name, data in sorted(found[1].items()):
            sibling = self._sibling(name, data)
            entry = {"type": "file", "oid": sibling["blobId"], "size": len(data), "path": name}
            if "lfs" in sibling:
                entry["lfs"] = {"oid": sibling["lfs"]["sha256"], "size": len(data), "pointerSize": 134}
            entries.append(entry)
        request._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})

    def _file(self, request: _Common, repo_type: str, repo_id: str, revision: str, name: str, head: bool) -> None:
        found = self._revision(request, repo_type, repo_id, revision)
        if found is None:
            return
        commit, files = found
        if name not in files:
            return self._missing(request, "EntryNotFound")
        data = files[name]
        sibling = self._sibling(name, data)
        etag = sibling["lfs"]["sha256"] if "lfs" in sibling else sibling["blobId"]
        if name in self.endless and not head:
            return self._endless(request, {"X-Repo-Commit": commit, "ETag": f'"{etag}"'})
        request._send(200, data, {"Content-Type": "application/octet-stream", "X-Repo-Commit": commit,
                                  "ETag": f'"{etag}"'}, head)

    @staticmethod
    def _endless(request: _Common, headers: dict[str, str]) -> None:
        """200 without a Content-Length, then zeros in chunks until the client hangs up."""
        request.send_response(200)
        for name, value in {"Content-Type": "application/octet-stream", "Transfer-Encoding": "chunked",
                            **headers}.items():
            request.send_header(name, value)
        request.end_headers()
        chunk = b"%x\r\n" % (1 << 16) + bytes(1 << 16) + b"\r\n"
        try:
            while True:
                request.wfile.write(chunk)
        except OSError:  # the client gave up
            request.close_connection = True


class S3Server:
    """moto's S3 in server mode on ``host`` (127.0.0.1; a bridge's gateway for containers), and the environment a
    process needs to reach it."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1"):
        from moto.server import ThreadedMotoServer

        self.port = port or free_port()
        self.server = ThreadedMotoServer(ip_address=host, port=self.port, verbose=False)
        self.server.start()
        self.url = f"http://{host}:{self.port}"
        # moto keeps its buckets in this process's memory, shared by every server it starts: each starts empty
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/moto-api/reset", method="POST"), timeout=30).close()
        self.environ = {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def with_mnist(self, *buckets: str):
        """A client, with ``buckets`` made and MNIST's digits at s3://team-data/mnist/MNIST/raw/ (the first of
        them is team-data)."""
        from testbed.mnist_data import dataset_files

        client = self.client()
        for bucket in ("team-data", *buckets):
            client.create_bucket(Bucket=bucket)
        for name, data in dataset_files().items():
            client.put_object(Bucket="team-data", Key=f"mnist/MNIST/raw/{name}", Body=data)
        return client

    def close(self) -> None:
        self.server.stop()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``values`` set, restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def s3_in_this_process() -> Iterator[S3Server]:
    """moto's S3, with this process's environment pointing boto3 at it (restored afterwards)."""
    server = S3Server()
    try:
        with environment(server.environ):
            yield server
    finally:
        server.close()
