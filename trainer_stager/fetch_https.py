"""https:// (and http://) sources: one file, its size checked against Content-Length; an archive (.tar,
.tar.gz, .tgz, .zip) is unpacked, refusing members that would land outside the directory."""

from __future__ import annotations

import errno
import hashlib
import tarfile
import urllib.error
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from trainer_contract.downloads import CutShort, TooLarge, http_get
from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress, check_room, fed, room

TIMEOUT = 60.0  # seconds without a byte before a read gives up (retried)
MAX_MEMBERS = 1_000_000  # an archive's members: more is a flood of inodes, not a model or a dataset
MB = 1_000_000


def fetch(uri: StorageUri, into: Path, progress: Progress, unpack_limit: int | None = None) -> dict:
    """Download ``uri`` into the directory ``into`` (unpacked if an archive, to ``unpack_limit`` bytes at most);
    the files and their digests."""
    name = PurePosixPath(urlparse(uri.url).path).name
    target = into / name
    digest, size = _download(uri, target, progress)
    if uri.is_archive:
        _unpack(target, into, uri, unpack_limit)
        target.unlink()
    return {"url": uri.describe, "bytes": size, "sha256": digest, "unpacked": uri.is_archive}


def _download(uri: StorageUri, target: Path, progress: Progress) -> tuple[str, int]:
    sha256 = hashlib.sha256()

    def limit(announced: int | None) -> int:
        """As much as it announces, if the volume holds it; without a size, what the volume has to spare."""
        progress.total = announced
        check_room(target.parent, announced)
        return announced if announced is not None else room(target.parent)

    try:
        size = http_get(uri.url, target, TIMEOUT, limit, on_chunk=fed(progress, sha256))
    except urllib.error.HTTPError as error:
        raise _http_error(uri, error.code, error.reason) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, CutShort) as error:
        reason = getattr(error, "reason", error)
        raise StagingError(f"{uri.describe}: {reason}", retryable=True) from None
    except TooLarge as error:
        raise StagingError(f"{uri.describe}: the server sent over {error.limit / MB:.0f} MB without announcing a size, "
                           "more than the shared volume has to spare (a twentieth of it is kept free): raise "
                           "shared_volume.size if the file is that large, or serve it with its Content-Length",
                           retryable=False) from None
    return sha256.hexdigest(), size


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
