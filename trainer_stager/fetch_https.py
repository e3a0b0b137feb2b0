"""https:// (and http://) sources: one file, its size checked against Content-Length; an archive (.tar,
.tar.gz, .tgz, .zip) is unpacked, refusing members that would land outside the directory."""

from __future__ import annotations

import hashlib
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress, check_room, copy_stream

TIMEOUT = 60.0  # seconds without a byte before a read gives up (retried)


def fetch(uri: StorageUri, into: Path, progress: Progress) -> dict:
    """Download ``uri`` into the directory ``into`` (unpacked if an archive); the files and their digests."""
    name = PurePosixPath(urlparse(uri.url).path).name
    target = into / name
    digest, size = _download(uri, target, progress)
    if uri.is_archive:
        _unpack(target, into, uri)
        target.unlink()
    return {"url": uri.describe, "bytes": size, "sha256": digest, "unpacked": uri.is_archive}


def _download(uri: StorageUri, target: Path, progress: Progress) -> tuple[str, int]:
    request = urllib.request.Request(uri.url, headers={"Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 (the scheme is checked)
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            progress.total = expected
            check_room(target.parent, expected)
            sha256 = hashlib.sha256()
            size = copy_stream(response, target, progress, sha256)
            digest = sha256.hexdigest()
    except urllib.error.HTTPError as error:
        raise _http_error(uri, error.code, error.reason) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise StagingError(f"{uri.describe}: {reason}", retryable=True) from None
    if expected is not None and size != expected:
        raise StagingError(f"{uri.describe}: got {size} bytes, the server announced {expected}", retryable=True)
    return digest, size


def _http_error(uri: StorageUri, status: int, reason: object) -> StagingError:
    if status in (401, 403):
        return StagingError(f"{uri.describe}: {status} {reason}: the server refuses this download; give the URL of a "
                            "file it serves without credentials, or stage it onto the volume yourself and set "
                            "the storage_uri to its path", retryable=False)
    if status == 404 or status == 410:
        return StagingError(f"{uri.describe}: {status} {reason}: no such file; check the URL", retryable=False)
    return StagingError(f"{uri.describe}: {status} {reason}", retryable=status >= 500 or status == 429)


def _unpack(archive: Path, into: Path, uri: StorageUri) -> None:
    root = into.resolve()
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as bundle:
                for member in bundle.namelist():
                    if not (root / member).resolve().is_relative_to(root):
                        raise StagingError(f"{uri.describe}: member {member!r} would land outside the directory",
                                           retryable=False)
                bundle.extractall(into)
        else:
            with tarfile.open(archive) as bundle:
                bundle.extractall(into, filter="data")  # no links out, no devices, no absolute paths
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as error:
        raise StagingError(f"{uri.describe}: cannot unpack: {error}", retryable=False) from None
