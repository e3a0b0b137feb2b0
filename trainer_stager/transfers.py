"""S3 transfers, in parallel, one implementation for the checkpoint mirror's upload, the restore's download and
staging from s3://: boto3's TransferManager (several files at once, a large one in PART_SIZE parts, each request
retried by botocore, the memory it holds bounded by its windows), with each file's digest taken from its bytes as
they pass, so that nothing is read twice:

- an upload whose SHA-256 the caller already knows (a sharded checkpoint's manifest) is read by the manager's own
  threads, its parts at once; any other is read once, in order, through a hashing reader that cannot seek (the
  manager then reads it a part at a time, keeps at most CONCURRENCY parts in memory and sends them in parallel);
- a download is written through a verifying writer that cannot seek either: the manager fetches ranged parts in
  parallel and hands it their bytes in order, holding the early ones in a window of 2 × CONCURRENCY parts. The
  writer refuses a byte past the listed size and hashes what it writes (a file of several parts on threads of
  its own, beside the writes); the digest is compared once the file is whole. Hashed in order from memory rather
  than read back from the page cache afterwards: no second pass over the file, and memory bounded by the window
  however the parts race.

Every fault is a StagingError naming the object (retryable or not), never another exception.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError

MiB = 1024 * 1024
CONCURRENCY = 10  # requests at once, boto3's own default
PART_SIZE = 16 * MiB  # parts of a large file (S3's least is 5 MiB; boto3 raises it for a file past 10,000 parts)
# botocore's error codes that retrying cannot fix
_REFUSED = {"AccessDenied": 403, "InvalidAccessKeyId": 403, "SignatureDoesNotMatch": 403, "AllAccessDisabled": 403,
            "NoSuchBucket": 404, "NoSuchKey": 404, "403": 403, "404": 404, "401": 401}
_DIGEST_NAMES = {"md5": "MD5", "sha256": "SHA-256"}


def client():
    import boto3
    from botocore.config import Config

    # botocore retries throttling, 5xx and dropped connections itself (the standard mode's back-off); a connection
    # for each of the manager's requests and its submitting threads (a smaller pool drops connections, warning)
    return boto3.client("s3", config=Config(retries={"max_attempts": 4, "mode": "standard"}, connect_timeout=20,
                                            read_timeout=60, max_pool_connections=CONCURRENCY + 6))


def classify(uri: StorageUri, error: Exception, name: str = "") -> StagingError:
    """A botocore error as staging's, naming ``uri`` (and the file ``name`` below it): refused (with the fix) or
    retryable."""
    from botocore.exceptions import ClientError, NoCredentialsError

    what = f"{uri.describe}: {name}" if name else uri.describe
    if isinstance(error, NoCredentialsError):
        return StagingError(f"{what}: no credentials: give the pod AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                            "from a Secret (env_from_secrets), or a service account with a role", retryable=False)
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = _REFUSED.get(code)
        if status == 404:
            return StagingError(f"{what}: {code}: no such bucket or object; check the URI", retryable=False)
        if status in (401, 403):
            return StagingError(f"{what}: {code}: the credentials may not read it; check the Secret's keys "
                                "and the bucket's policy", retryable=False)
        if code in ("InvalidRange", "PreconditionFailed"):  # a part past its end; not the version listed
            return StagingError(f"{what}: {code}: replaced in the bucket since it was listed; retried, and if it "
                                "persists upload it again", retryable=True)
        return StagingError(f"{what}: {code}: {error}", retryable=True)
    if isinstance(error, OSError):  # a file that cannot be read or written: retrying cannot help, unless a cut
        return StagingError(f"{what}: {error}", retryable=isinstance(error, (ConnectionError, TimeoutError)))
    return StagingError(f"{what}: {type(error).__name__}: {error}", retryable=True)


def listing_pages(s3, uri: StorageUri) -> Iterator[dict]:
    """ListObjectsV2's pages under ``uri``'s prefix (with its trailing '/'), each checked to be S3's answer: an
    endpoint that answers 200 with something else (a proxy's sign-in page) parses as an empty listing, which
    would read as "nothing there" (no checkpoint: training from the beginning)."""
    prefix = f"{uri.prefix}/" if uri.prefix else ""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=prefix):
        if "KeyCount" not in page or not isinstance(page.get("Contents", []), list):
            raise StagingError(f"{uri.describe}: the endpoint ({s3.meta.endpoint_url}) answered, but not as S3 does "
                               "(no ListObjectsV2 result): check AWS_ENDPOINT_URL, or a proxy between", retryable=True)
        yield page


def transfer_config(concurrency: int | None = None):
    """The manager's settings: parts of PART_SIZE, ``concurrency`` (CONCURRENCY) requests at once, and the memory
    windows said above (s3transfer's TransferConfig, which boto3's wraps without those windows)."""
    from s3transfer.manager import TransferConfig

    concurrency = concurrency or CONCURRENCY
    return TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE,
                          max_request_concurrency=concurrency, max_in_memory_upload_chunks=concurrency,
                          max_in_memory_download_chunks=2 * concurrency, io_chunksize=MiB)


@dataclass(frozen=True)
class Outgoing:
    """A file to upload: ``path`` to the key ``key``, ``size`` bytes; ``sha256`` when already known (not hashed)."""

    path: Path
    key: str
    size: int
    sha256: str | None = None


@dataclass(frozen=True)
class Incoming:
    """An object to download: ``key`` into ``target``, ``size`` bytes as listed (the most written; fewer arriving
    is refused), with the digests it must have (``expected``: algorithm -> hex) and those wanted back
    (``wanted``); ``etag``, where a listing gave it, spares the manager its HEAD (and its parts ask for that
    version: one replaced meanwhile is refused, not mixed)."""

    key: str
    target: Path
    size: int
    expected: dict[str, str] = field(default_factory=dict)
    wanted: tuple[str, ...] = ()
    etag: str | None = None


def upload(s3, uri: StorageUri, files: dict[str, Outgoing], progress: Callable[[int], None]) -> dict[str, str]:
    """Upload ``files`` (by name) into ``uri``'s bucket, at once; each one's SHA-256 by name (the known one, or
    the one taken as it was read)."""
    readers: dict[str, _HashingReader] = {}

    def submit(manager, name: str, item: Outgoing, subscriber) -> _HashingReader | None:
        if item.sha256 is not None:  # the manager reads its parts in parallel from the path
            manager.upload(str(item.path), uri.bucket, item.key, subscribers=[subscriber])
            return None
        readers[name] = _HashingReader(item.path)
        manager.upload(readers[name], uri.bucket, item.key, subscribers=[subscriber])
        return readers[name]

    try:
        _transfer(s3, uri, {name: item.size for name, item in files.items()}, submit, files, progress)
    finally:
        for reader in readers.values():
            reader.close()
    for name, reader in readers.items():
        if reader.count != files[name].size:  # written to while it was read: what went up is not that file
            raise StagingError(f"{uri.describe}: {name} changed while it was uploaded ({reader.count} bytes read, "
                               f"{files[name].size} before): upload it again once it is written", retryable=True)
    return {name: item.sha256 or readers[name].sha256.hexdigest() for name, item in files.items()}


def download(s3, uri: StorageUri, files: dict[str, Incoming], progress: Callable[[int], None]
             ) -> dict[str, dict[str, str]]:
    """Download ``files`` (by name) from ``uri``'s bucket, at once, each verified against its size and expected
    digests; the wanted digests of each by name."""
    writers: dict[str, _VerifyingWriter] = {}

    def submit(manager, name: str, item: Incoming, subscriber) -> _VerifyingWriter:
        writers[name] = _VerifyingWriter(item.target, item.size, {*item.expected, *item.wanted},
                                         f"{uri.describe}: {name}")
        manager.download(uri.bucket, item.key, writers[name], subscribers=[subscriber])
        return writers[name]

    def verify(name: str) -> None:
        item, writer = files[name], writers[name]
        got = {algorithm: digest.hexdigest() for algorithm, digest in writer.digests.items()}
        wrong = [algorithm for algorithm, hexdigest in item.expected.items() if got[algorithm] != hexdigest]
        if writer.count != item.size or wrong:
            shown = wrong[0] if wrong else next(iter(item.expected), "")
            said = f", {_DIGEST_NAMES[shown]} {got[shown]}" if shown else ""
            listed = f", {_DIGEST_NAMES[shown]} {item.expected[shown]}" if shown else ""
            raise StagingError(f"{uri.describe}: {name} arrived damaged ({writer.count} bytes{said}; listed "
                               f"{item.size} bytes{listed}): changed in the bucket or cut in transit; retried, "
                               "and if it persists upload it again", retryable=True)

    try:
        _transfer(s3, uri, {name: item.size for name, item in files.items()}, submit, files, progress, verify,
                  {name: item.etag for name, item in files.items() if item.etag})
    finally:
        for writer in writers.values():
            writer.close()
    return {name: {algorithm: writers[name].digests[algorithm].hexdigest() for algorithm in item.wanted}
            for name, item in files.items()}


def _transfer(s3, uri: StorageUri, sizes: dict[str, int], submit: Callable[..., Any], files: dict[str, Any],
              progress: Callable[[int], None], verify: Callable[[str], None] = lambda name: None,
              etags: dict[str, str] | None = None) -> None:
    """Submit every file to one manager (``submit`` gives what to close once the manager is done with it: a file
    is open only while it is in flight) and wait for each as it finishes (``verify`` it): the first fault cancels
    the rest (a multipart upload cut off is aborted by the manager) and is raised as a StagingError."""
    from s3transfer.manager import TransferManager

    finished: queue.Queue[tuple[str, Any]] = queue.Queue()
    try:
        with TransferManager(s3, transfer_config()) as manager:
            for name, item in files.items():
                watch = _Watch(name, sizes[name], (etags or {}).get(name), progress, finished)
                watch.closing = submit(manager, name, item, watch)
            for _ in files:
                name, future = finished.get()
                try:
                    future.result()
                except StagingError:
                    raise
                except Exception as error:  # botocore's, an OSError, s3transfer's own (retries exhausted)
                    raise classify(uri, error, name) from None
                verify(name)
    except StagingError:
        raise
    except Exception as error:  # submitting: creating a part upload, the manager's own faults
        raise classify(uri, error) from None


class _Watch:
    """The manager's subscriber for one file: tells it the size (a hashing reader cannot say it) and the ETag
    when known, counts the bytes as they pass, and queues the file when it is done (or failed)."""

    def __init__(self, name: str, size: int, etag: str | None, progress: Callable[[int], None],
                 finished: queue.Queue):
        self.name, self.size, self.etag, self.progress, self.finished = name, size, etag, progress, finished
        self.closing: Any = None  # the file's reader or writer, closed when the manager is done with it

    def on_queued(self, future, **kwargs):
        future.meta.provide_transfer_size(self.size)
        if self.etag is not None:
            future.meta.provide_object_etag(self.etag)

    def on_progress(self, future, bytes_transferred, **kwargs):
        self.progress(bytes_transferred)

    def on_done(self, future, **kwargs):
        if self.closing is not None:
            self.closing.close()
        self.finished.put((self.name, future))


class _HashingReader:
    """A file read once, in order, for its upload, its SHA-256 taken on the way. It has no seek, so that the
    manager reads it in order instead of each part at its offset."""

    def __init__(self, path: Path):
        self.path = path
        self.file: BinaryIO | None = None  # opened at the first read: thousands of files may wait their turn
        self.sha256 = hashlib.sha256()
        self.count = 0

    def read(self, amount: int = -1) -> bytes:
        if self.file is None:
            self.file = self.path.open("rb")
        data = self.file.read(amount)
        self.sha256.update(data)
        self.count += len(data)
        return data

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class _VerifyingWriter:
    """A download's file, written in order (it has no seek: the manager hands it the parts in order), at most
    ``size`` bytes, each hashed with ``algorithms`` as it is written. A file of more than one part is hashed on
    threads of its own (a digest each): the manager writes every file on one thread, which would otherwise cap a
    pod's restore at one core's SHA-256 (and staging's MD5 and SHA-256 together at a third of that)."""

    def __init__(self, target: Path, size: int, algorithms: set[str], what: str):
        self.target = target
        self.file: BinaryIO | None = None  # opened at the first write: thousands of files may wait their turn
        self.closed = False
        self.size, self.what, self.count = size, what, 0
        self.digests = {algorithm: hashlib.new(algorithm, usedforsecurity=False) for algorithm in sorted(algorithms)}
        self.hashers: list[_Hasher] | None = None if size > PART_SIZE else []  # started at the first write

    def write(self, data: bytes) -> int:
        if self.closed:  # a write the manager had queued before its transfer failed: its hashers have ended
            raise StagingError(f"{self.what}: written after its transfer ended", retryable=True)
        self.count += len(data)
        if self.count > self.size:  # bounded: never more than listed reaches the volume
            raise StagingError(f"{self.what}: more than its listed {self.size} bytes arrived (replaced in the bucket "
                               "since it was listed); retried, and if it persists upload it again", retryable=True)
        if self.hashers is None:
            self.hashers = [_Hasher(digest) for digest in self.digests.values()]
        if self.hashers:
            for hasher in self.hashers:
                hasher.feed(data)
        else:
            for digest in self.digests.values():
                digest.update(data)
        return self._opened().write(data)

    def close(self) -> None:
        """The file closed (made, when empty) and every digest complete; again: nothing more."""
        if self.closed:
            return
        self.closed = True
        for hasher in self.hashers or []:
            hasher.finish()
        self._opened().close()

    def _opened(self) -> BinaryIO:
        if self.file is None:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.target.open("wb")
        return self.file


class _Hasher:
    """One digest fed in order on a thread of its own, through a bounded queue (the writer waits when it is full:
    at most HASH_WINDOW chunks held)."""

    HASH_WINDOW = 16

    def __init__(self, digest: Any):
        self.digest = digest
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=self.HASH_WINDOW)
        self.thread = threading.Thread(target=self._run, name="download-digest", daemon=True)
        self.thread.start()

    def feed(self, data: bytes) -> None:
        self.chunks.put(data)

    def finish(self) -> None:
        if self.thread.is_alive():
            self.chunks.put(None)
            self.thread.join()

    def _run(self) -> None:
        while (data := self.chunks.get()) is not None:
            self.digest.update(data)  # hashlib lets go of the GIL: the digests and the writes run at once
