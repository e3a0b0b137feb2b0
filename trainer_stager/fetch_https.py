"""https:// (and http://) sources: one file, in ranged parts fetched in parallel where the server serves ranges
(else one stream), its size bounded by what the server announces and its SHA-256 recorded; an archive (.tar,
.tar.gz, .tgz, .zip) is unpacked, refusing members that would land outside the directory."""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import re
import tarfile
import threading
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from trainer_contract.downloads import CHUNK, HEADERS, CutShort, DownloadError, TooLarge, read_answer
from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError
from trainer_stager.place import TRANSFERS, Progress, check_room, fed, room

TIMEOUT = 60.0  # seconds without a byte before a read gives up (retried)
MAX_MEMBERS = 1_000_000  # an archive's members: more is a flood of inodes, not a model or a dataset
MB = 1_000_000


@dataclass(frozen=True)
class Parts:
    """How a file is cut into ranged requests, ``workers`` of them in flight: the first asks for ``smallest``
    bytes before the size is known (a small file comes whole in it); the rest is cut into equal parts of
    ``smallest`` to ``largest`` bytes, as many as the workers where the size allows. urllib opens a connection a
    request: a part must be long beside its handshake."""

    smallest: int = 8 * MB
    largest: int = 64 * MB
    workers: int = TRANSFERS


PARTS = Parts()


def fetch(uri: StorageUri, into: Path, progress: Progress, unpack_limit: int | None = None, *,
          parts: Parts = PARTS) -> dict:
    """Download ``uri`` into the directory ``into`` (unpacked if an archive, to ``unpack_limit`` bytes at most);
    the files and their digests."""
    name = PurePosixPath(urlparse(uri.url).path).name
    target = into / name
    digest, size = _download(uri, target, progress, parts)
    if uri.is_archive:
        _unpack(target, into, uri, unpack_limit)
        target.unlink()
    return {"url": uri.describe, "bytes": size, "sha256": digest, "unpacked": uri.is_archive}


class PartRefused(DownloadError):
    """A ranged answer that is not the part asked for."""

    def __init__(self, message: str, *, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def _download(uri: StorageUri, target: Path, progress: Progress, parts: Parts) -> tuple[str, int]:
    try:
        return _fetched(uri.url, target, progress, parts)
    except urllib.error.HTTPError as error:
        raise _http_error(uri, error.code, error.reason) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, CutShort, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise StagingError(f"{uri.describe}: {reason}", retryable=True) from None
    except PartRefused as error:
        raise StagingError(f"{uri.describe}: {error}", retryable=error.retryable) from None
    except TooLarge as error:
        raise StagingError(f"{uri.describe}: the server sent over {error.limit / MB:.0f} MB without announcing a size, "
                           "more than the shared volume has to spare (a twentieth of it is kept free): raise "
                           "shared_volume.size if the file is that large, or serve it with its Content-Length",
                           retryable=False) from None


def _fetched(url: str, target: Path, progress: Progress, parts: Parts) -> tuple[str, int]:
    """The file at ``url`` into ``target``: the first request asks for its first part; a server that answers with
    the part and the file's size (206, Content-Range: the announcement of Accept-Ranges and Content-Length in one
    answer, and no HEAD, which a presigned URL signed for GET refuses) has the rest fetched in parallel parts; one
    that answers with the whole file (200) streams it. (SHA-256, size)."""
    first = _request(url, 0, parts.smallest - 1)
    try:
        response = urllib.request.urlopen(first, timeout=TIMEOUT)  # noqa: S310 (the scheme is checked)
    except urllib.error.HTTPError as error:
        if error.code != 416:  # 416: an empty file has no byte 0 to range over
            raise
        error.close()
        response = urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=TIMEOUT)  # noqa: S310
    with response:
        span = content_range(response.headers.get("Content-Range")) if response.status == 206 else None
        if span is None and response.status != 206:  # the whole file: a server that serves no ranges
            return _streamed(response, target, progress)
        start, end, total = span if span is not None else (0, 0, None)
        if total is None:  # a part of a file of no stated size: read it in one stream
            response.close()
            with urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=TIMEOUT) as whole:  # noqa: S310
                return _streamed(whole, target, progress)
        if (start, end) != (0, min(parts.smallest, total) - 1):
            raise _misplaced(0, min(parts.smallest, total) - 1, start, end)
        progress.total = total
        check_room(target.parent, total)
        with open(target, "wb") as out:
            out.truncate(total)
        return _in_parts(url, target, progress, parts, response, total, _validator(response))


def _streamed(response, target: Path, progress: Progress) -> tuple[str, int]:
    """The whole answer in one stream: as much as it announces if the volume holds it, without a size what the
    volume has to spare."""
    sha256 = hashlib.sha256()

    def limit(announced: int | None) -> int:
        progress.total = announced
        check_room(target.parent, announced)
        return announced if announced is not None else room(target.parent)

    size = read_answer(response, target, limit, fed(progress, sha256))
    return sha256.hexdigest(), size


_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)")


def content_range(text: str | None) -> tuple[int, int, int | None] | None:
    """A Content-Range header's (first byte, last byte, the file's size or None where unstated), or None where it
    is absent or not a satisfied byte range (RFC 9110 14.4: the last byte not before the first, and before the
    size)."""
    match = _CONTENT_RANGE.fullmatch((text or "").strip())
    if match is None:
        return None
    start, end = int(match[1]), int(match[2])
    total = None if match[3] == "*" else int(match[3])
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


def _request(url: str, start: int, end: int, validator: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, headers={**HEADERS, "Range": f"bytes={start}-{end}", **(validator or {})})


def _validator(response) -> dict[str, str]:
    """If-Range for the parts after the first: a file replaced on the server meanwhile is then sent whole (200),
    which is refused, instead of parts of two files spliced together. A strong ETag, else Last-Modified."""
    etag = response.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return {"If-Range": etag}
    modified = response.headers.get("Last-Modified")
    return {"If-Range": modified} if modified else {}


def _misplaced(start: int, end: int, got_start: int, got_end: int) -> PartRefused:
    return PartRefused(f"asked for bytes {start}-{end}, the server sent bytes {got_start}-{got_end}: it serves ranges "
                       "wrongly (a proxy or cache in between?); serve the file from one that honours Range, or stage "
                       "it onto the volume yourself and set the storage_uri to its path", retryable=True)


def plan(total: int, parts: Parts) -> list[tuple[int, int]]:
    """The byte ranges (first, last) that cover ``total`` bytes: the first request's, then the rest cut evenly
    into parts of ``parts.smallest`` to ``parts.largest`` bytes, about ``parts.workers`` of them or more."""
    first = min(parts.smallest, total)
    rest = total - first
    size = min(max(-(-rest // max(parts.workers, 1)), parts.smallest), parts.largest) if rest else 1
    return [(0, first - 1)] + [(start, min(start + size, total) - 1) for start in range(first, total, size)]


def _in_parts(url: str, target: Path, progress: Progress, parts: Parts, first, total: int,
              validator: dict[str, str]) -> tuple[str, int]:
    """Every part of ``target`` (``first``: the open answer of the first), ``parts.workers`` at a time, each into
    its place in the file; hashed in order as the parts complete (the contiguous prefix, read back from the
    file: the page cache holds what was just written), so that the digest is the whole file's once the last
    part is in. A part's fault stops the others at their next chunk and is the one raised."""
    spans = plan(total, parts)
    stop = threading.Event()
    descriptor = os.open(target, os.O_RDWR)

    def fetch_part(span: tuple[int, int], response=None) -> None:
        try:
            if response is None:
                response = urllib.request.urlopen(_request(url, *span, validator), timeout=TIMEOUT)  # noqa: S310
            with response:
                _write_part(response, descriptor, span, total, progress, stop)
        except BaseException:
            stop.set()
            raise

    sha256 = hashlib.sha256()
    try:
        with ThreadPoolExecutor(max_workers=parts.workers) as pool:
            futures = [pool.submit(fetch_part, spans[0], first)] + [pool.submit(fetch_part, span) for span in spans[1:]]
            try:
                for span, future in zip(spans, futures, strict=True):
                    future.result()
                    _hash_range(descriptor, span, sha256)
            except BaseException as error:
                stop.set()
                for future in futures:
                    future.cancel()  # the parts not begun are not fetched
                raise _first_fault(futures, error) from None
    finally:
        os.close(descriptor)
    return sha256.hexdigest(), total


class _Stopped(Exception):
    """A part that stopped because another failed."""


def _first_fault(futures: list[Future], caught: BaseException) -> BaseException:
    """The fault that stopped the parts: a part's own, not one that stopped because of it; else ``caught``."""
    faults = [future.exception() for future in futures if not future.cancelled()]  # waits for the running ones
    return next((fault for fault in faults if fault is not None and not isinstance(fault, _Stopped)), caught)


def _write_part(response, descriptor: int, span: tuple[int, int], total: int, progress: Progress,
                stop: threading.Event) -> None:
    """One ranged answer into its place, checked to be the part asked for and bounded by its length."""
    start, end = span
    if response.status != 206:  # a whole file where a part was asked for: replaced meanwhile (If-Range)
        raise PartRefused(f"the server sent the whole file where bytes {start}-{end} were asked for: it changed on "
                          "the server while it was fetched", retryable=True)
    got = content_range(response.headers.get("Content-Range"))
    if got is None or got[2] != total:
        raise PartRefused(f"the answer for bytes {start}-{end} says Content-Range "
                          f"{str(response.headers.get('Content-Range'))[:100]!r}, not a part of the {total} bytes "
                          "first announced: it changed on the server while it was fetched", retryable=True)
    if got[:2] != span:
        raise _misplaced(start, end, *got[:2])
    length, position = end - start + 1, start
    announced = response.headers.get("Content-Length")
    if announced is not None and announced.strip() != str(length):
        raise PartRefused(f"the answer for bytes {start}-{end} announces {announced[:30]} bytes, not {length}",
                          retryable=True)
    while position <= end:
        if stop.is_set():
            raise _Stopped()
        chunk = response.read(min(CHUNK, end + 1 - position))  # never past the part: bounded by what was announced
        if not chunk:
            raise PartRefused(f"bytes {start}-{end}: connection cut after {position - start} of {length} bytes",
                              retryable=True)
        os.pwrite(descriptor, chunk, position)
        position += len(chunk)
        progress.add(len(chunk))


def _hash_range(descriptor: int, span: tuple[int, int], sha256) -> None:
    position, end = span
    while position <= end:
        chunk = os.pread(descriptor, min(CHUNK, end + 1 - position), position)
        if not chunk:
            raise CutShort(position, span[1] + 1)  # the file shrank under us: the volume's fault
        sha256.update(chunk)
        position += len(chunk)


def _http_error(uri: StorageUri, status: int, reason: object) -> StagingError:
    if status in (401, 403):
        return StagingError(f"{uri.describe}: {status} {reason}: the server refuses this download; give the URL of a "
                            "file it serves without credentials, or stage it onto the volume yourself and set "
                            "the storage_uri to its path", retryable=False)
    if status == 404 or status == 410:
        return StagingError(f"{uri.describe}: {status} {reason}: no such file; check the URL", retryable=False)
    return StagingError(f"{uri.describe}: {status} {reason}", retryable=status >= 500 or status == 429)


def _unpack(archive: Path, into: Path, uri: StorageUri, limit: int | None) -> None:
    """Every member of ``archive`` into ``into``, bounded: the members' declared sizes (a sparse member counts its
    whole size) against ``limit`` and the volume's free space before anything is written, the bytes written
    counted against them while unpacking. A member that would land outside, a link (even one inside: it may loop),
    a device or a FIFO: refused."""
    root = into.resolve()
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as bundle:
                infos = bundle.infolist()
                for info in infos:
                    if not (root / info.filename).resolve().is_relative_to(root):
                        raise StagingError(f"{uri.describe}: member {info.filename!r} would land outside the "
                                           "directory", retryable=False)
                declared = _bounded(uri, into, len(infos), sum(info.file_size for info in infos), limit)
                written = 0
                for info in infos:
                    written += _size(Path(bundle.extract(info, into)))
                    _within(uri, written, declared)
        else:
            with tarfile.open(archive) as bundle:
                members = bundle.getmembers()
                for member in members:  # a link, even one inside, can loop or alias a file: data has neither
                    if not (member.isreg() or member.isdir()):
                        kind = "link" if member.issym() or member.islnk() else "special file"
                        raise StagingError(f"{uri.describe}: member {member.name[:200]!r} is a {kind}: only files and "
                                           "directories are unpacked", retryable=False)
                declared = _bounded(uri, into, len(members),
                                    sum(member.size for member in members if member.isreg()), limit)
                written = 0
                for member in members:
                    bundle.extract(member, into, filter="data")  # no links out, no devices, no absolute paths
                    written += _size(into / member.name) if member.isreg() else 0
                    _within(uri, written, declared)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the volume's fault, not the archive's: said as a full volume is (exit 78, the size to raise)
        raise StagingError(f"{uri.describe}: cannot unpack: {error}", retryable=False) from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as error:
        raise StagingError(f"{uri.describe}: cannot unpack: {error}", retryable=False) from None


def _bounded(uri: StorageUri, into: Path, members: int, declared: int, limit: int | None) -> int:
    """``declared``, once it is known to fit: under ``limit``, ``MAX_MEMBERS`` and the volume's free space now
    (the archive still on it: a margin of its own size)."""
    if members > MAX_MEMBERS:
        raise StagingError(f"{uri.describe}: the archive holds {members} members, more than {MAX_MEMBERS}: pack the "
                           "files in fewer, larger ones", retryable=False)
    if limit is not None and declared > limit:
        raise StagingError(f"{uri.describe}: the archive unpacks to {declared / MB:.0f} MB, over the limit of "
                           f"{limit / MB:.0f} MB set for it (initializer's max_unpacked_bytes): raise it if that size is "
                           "meant", retryable=False)
    check_room(into, declared)
    return declared


def _within(uri: StorageUri, written: int, declared: int) -> None:
    if written > declared:
        raise StagingError(f"{uri.describe}: unpacking wrote more than the archive declares ({written} > "
                           f"{declared} bytes): a damaged or crafted archive", retryable=False)


def _size(path: Path) -> int:
    return path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
