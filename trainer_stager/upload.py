"""Uploads to s3:// (export.storage_uri, and the checkpoint mirror's): every file of a directory under the prefix,
several at once and a large one in parts (trainer_stager/transfers.py), then COMPLETE_OBJECT last, listing them
with their size and SHA-256: a reader (and a rerun) takes the prefix as complete only when that object is there,
so an upload cut off never shows as complete. The SHA-256 is one the caller knows (a sharded checkpoint's
manifest) or is taken as the file is read for its upload: never a second read. A listing written before (with an
MD5 for each file) still reads. An upload of the same files again transfers nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from trainer_contract.digests import file_digest
from trainer_contract.storage import COMPLETE_OBJECT, SIGNING_KEY_VARIABLE, StorageUri
from trainer_stager import transfers
from trainer_stager.errors import StagingError
from trainer_stager.transfers import classify, client

MB = 1_000_000
LISTING_LIMIT = 16 * 1024 * 1024  # a listing of a million files is under 100 MB; one this size is not ours
# each file's digest in a listing, by the name hashlib knows it by: SHA-256 since the mirror hashes as it uploads,
# MD5 in the listings earlier versions wrote (still restored)
DIGESTS = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "md5": re.compile(r"^[0-9a-f]{32}$")}


def _key(uri: StorageUri, relative: str) -> str:
    return f"{uri.prefix}/{relative}" if uri.prefix else relative


def complete_record(s3, uri: StorageUri) -> dict | None:
    """The prefix's COMPLETE_OBJECT, checked (read_listing), or None where the prefix holds no complete upload."""
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=uri.bucket, Key=_key(uri, COMPLETE_OBJECT))["Body"].read(LISTING_LIMIT + 1)
    except ClientError as error:
        if str(error.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404"):
            return None
        raise
    return read_listing(body, uri)


def read_listing(body: bytes, uri: StorageUri) -> dict:
    """COMPLETE_OBJECT's record as this module writes it ({"files": {name: {"bytes", "sha256"}}}, or "md5" in
    place of "sha256" from an earlier version), or a StagingError (78) naming the object: whatever a bucket holds,
    nothing here raises another error."""
    def refused(why: str) -> StagingError:
        return StagingError(f"{uri.describe}/{COMPLETE_OBJECT}: {why}: not an indexed-trainer listing (another "
                            "program's, or damaged); remove the prefix's objects or upload again", retryable=False)

    if len(body) > LISTING_LIMIT:
        raise refused(f"over {LISTING_LIMIT} bytes")
    try:
        record = json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        raise refused("not JSON") from None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        raise refused('no "files" object')
    for name, item in files.items():
        if not listed_entry(item):
            raise refused(f"the entry of {name[:200]!r} is not {{bytes, sha256}} (or {{bytes, md5}})")
    return record


def listed_entry(item: object) -> bool:
    """A listing's entry for a file: its size, and a digest (SHA-256 or MD5, each well-formed where given)."""
    if not isinstance(item, dict):
        return False
    size = item.get("bytes")
    given = [algorithm for algorithm in DIGESTS if algorithm in item]
    return (isinstance(size, int) and not isinstance(size, bool) and size >= 0 and bool(given)
            and all(isinstance(item[algorithm], str) and DIGESTS[algorithm].match(item[algorithm])
                    for algorithm in given))


def listed_digest(item: dict) -> tuple[str, str]:
    """(algorithm, hex) that a listed file is checked by: its SHA-256, or the MD5 of an earlier version's."""
    algorithm = next(algorithm for algorithm in DIGESTS if algorithm in item)
    return algorithm, item[algorithm]


def regular_files(directory: Path, say: Callable[[str], None]) -> dict[str, Path]:
    """Every regular file below ``directory``, by its path relative to it. Nothing outside it: a symbolic link
    (to a file or a directory, maybe a credential file of the pod's) is skipped with a line, never followed, nor
    is anything that is not a plain file (a FIFO would block the read)."""
    files: dict[str, Path] = {}
    for root, directories, names in os.walk(directory):  # followlinks=False: a linked directory is not entered
        here = Path(root)
        for name in sorted(names) + sorted(d for d in directories if (here / d).is_symlink()):
            path = here / name
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                files[str(path.relative_to(directory))] = path
            else:
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                say(f"skipped {path.relative_to(directory)}: {kind} (only the regular files inside {directory} are "
                    "uploaded)")
    return dict(sorted(files.items()))


def upload_directory(uri: StorageUri, directory: Path, say: Callable[[str], None]) -> dict:
    """Upload every regular file below ``directory`` to ``uri``; the record written last (or already there)."""
    files = regular_files(directory, say)
    if not files:
        raise StagingError(f"{uri.describe}: nothing to upload: {directory} holds no file", retryable=False)
    return upload_files(uri, files, say)


def signing_key(environ: Mapping[str, str] = os.environ) -> str | None:
    """The key that signs checkpoint listings (checkpoint.signing_secret), or None where none is given."""
    return environ.get(SIGNING_KEY_VARIABLE) or None


def signature(uri: StorageUri, files: dict, key: str) -> str:
    """HMAC-SHA256 of a listing's files, bound to its place (bucket and prefix): a signed listing copied to
    another checkpoint's place does not verify there."""
    message = f"{uri.bucket}/{uri.prefix}\n{json.dumps(files, sort_keys=True, separators=(',', ':'))}"
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def signed(record: dict, uri: StorageUri, key: str) -> bool:
    given = record.get("signature")
    return isinstance(given, str) and hmac.compare_digest(given, signature(uri, record["files"], key))


def upload_files(uri: StorageUri, files: dict[str, Path], say: Callable[[str], None],
                 key: str | None = None, known: Mapping[str, str] | None = None) -> dict:
    """Upload ``files`` (each under its key below ``uri``'s prefix), then the record listing them (signed with
    ``key`` when given); the record (or the one already there, when it lists the same files, signed alike).
    ``known``: the SHA-256 of some of them, by name, taken as they are (the others are hashed as they are read)."""
    from botocore.exceptions import BotoCoreError, ClientError

    sizes = {relative: path.stat().st_size for relative, path in files.items()}
    sha256s = {relative: digest for relative, digest in (known or {}).items() if relative in files}
    s3 = client()
    try:
        previous = complete_record(s3, uri)
        if previous is not None and _holds(previous, files, sizes, sha256s) \
                and (key is None or signed(previous, uri, key)):
            say(f"{uri.describe} already holds {'these' if len(files) != 1 else 'this'} {len(files)} "
                f"file{'s' if len(files) != 1 else ''}: nothing uploaded")
            return previous
        if previous is not None:  # another upload's files: it is no longer complete from here on
            s3.delete_object(Bucket=uri.bucket, Key=_key(uri, COMPLETE_OBJECT))
        outgoing = {relative: transfers.Outgoing(path, _key(uri, relative), sizes[relative], sha256s.get(relative))
                    for relative, path in files.items()}
        sha256s = transfers.upload(s3, uri, outgoing, lambda count: None)
        record = put_listing(s3, uri, sizes, sha256s, key)
    except (ClientError, BotoCoreError, OSError) as error:  # OSError: a file that cannot be read, a connection cut
        raise classify(uri, error) from None
    total = sum(sizes.values())
    say(f"uploaded {len(files)} file{'s' if len(files) != 1 else ''} ({total / MB:.1f} MB) to {uri.describe}")
    return record


def put_listing(s3, uri: StorageUri, sizes: Mapping[str, int], sha256s: Mapping[str, str], key: str | None) -> dict:
    """COMPLETE_OBJECT under ``uri``: every file (by name) with its size and SHA-256, signed with ``key`` when
    given; written once every file is in the bucket, the upload's commit point. The record."""
    listing = {relative: {"bytes": sizes[relative], "sha256": sha256s[relative]} for relative in sorted(sizes)}
    record: dict = {"files": listing, "uploaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if key is not None:
        record["signature"] = signature(uri, listing, key)
    s3.put_object(Bucket=uri.bucket, Key=_key(uri, COMPLETE_OBJECT), Body=json.dumps(record, indent=2).encode())
    return record


def _holds(previous: dict, files: dict[str, Path], sizes: dict[str, int], sha256s: dict[str, str]) -> bool:
    """Whether the ``previous`` listing is of these very files. Only where it lists the same names and sizes is
    any file read to compare (by the listing's digest; a SHA-256 taken is kept in ``sha256s`` for the upload): a
    rerun of the same upload reads each file once instead of sending it again."""
    listed = previous["files"]
    if set(listed) != set(files) or any(listed[relative]["bytes"] != size for relative, size in sizes.items()):
        return False
    for relative, path in files.items():
        algorithm, digest = listed_digest(listed[relative])
        if algorithm == "sha256" and relative not in sha256s:
            sha256s[relative] = file_digest(path)
        if (sha256s[relative] if algorithm == "sha256" else file_digest(path, algorithm)) != digest:
            return False
    return True
