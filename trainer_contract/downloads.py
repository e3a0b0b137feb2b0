"""Bytes from outside into a file, bounded: an answer longer than it may be (a server's endless answer, a gzip bomb,
a body longer than its object) stops at its limit instead of filling the volume, and one cut short of what the
server announced is an error, never a file. Torch-free: the stager and the MNIST worker download with it."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
# Identity: a Content-Length is then the file's own size, never a compressed transfer's
HEADERS = {"User-Agent": "indexed-trainer", "Accept-Encoding": "identity"}


class DownloadError(Exception):
    """An answer that is not the file it should be (urllib's own errors stay theirs: the network's)."""


class TooLarge(DownloadError):
    def __init__(self, what: str, limit: int, announced: int | None = None):
        self.limit, self.announced = limit, announced
        super().__init__(f"{what} is {announced} bytes, over {limit}" if announced is not None
                         else f"{what} is over {limit} bytes")


class CutShort(DownloadError):
    def __init__(self, got: int, announced: int):
        self.got, self.announced = got, announced
        super().__init__(f"connection cut after {got} of {announced} bytes")


def copy_bounded(source: Any, destination: Path, limit: int | None, what: str = "the answer",
                 on_chunk: Callable[[bytes], None] | None = None) -> int:
    """``source`` (anything with ``read``) into the file ``destination``, at most ``limit`` bytes (None: as many as
    come); the size. TooLarge, naming ``what``, before the chunk that crosses the limit is written."""
    copied = 0
    with open(destination, "wb") as out:
        while chunk := source.read(CHUNK):
            copied += len(chunk)
            if limit is not None and copied > limit:
                raise TooLarge(what, limit)
            out.write(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
    return copied


def http_get(url: str, destination: Path, timeout: float, limit: Callable[[int | None], int | None],
             on_chunk: Callable[[bytes], None] | None = None) -> int:
    """GET ``url`` into the file ``destination``; its size. ``limit`` is told the size the server announces (None
    where it announces none) before any byte is written and says the most it may send (or raises to refuse it): an
    announced size over it is refused at once (TooLarge), an answer without one stops there. CutShort where fewer
    bytes come than announced. urllib's errors (HTTPError, URLError, a timeout) are left to the caller."""
    request = urllib.request.Request(url, headers=HEADERS)
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (callers check the scheme)
        return read_answer(response, destination, limit, on_chunk)


def read_answer(response: Any, destination: Path, limit: Callable[[int | None], int | None],
                on_chunk: Callable[[bytes], None] | None = None) -> int:
    """The body of an open answer (``http_get``'s, or one a caller opened with headers of its own) into the file
    ``destination``, bounded as ``http_get`` says; its size."""
    length = response.headers.get("Content-Length", "")
    announced = int(length) if length.isdigit() else None
    most = limit(announced)
    if announced is not None and most is not None and announced > most:
        raise TooLarge("the answer", most, announced)
    size = copy_bounded(response, destination, most, on_chunk=on_chunk)
    if announced is not None and size != announced:
        raise CutShort(size, announced)
    return size
