"""Checkpoints in a bucket (checkpoint.storage_uri): what the mirror uploads and the stager restores.

Each checkpoint of the volume lives under ``<prefix>/<name>/``, named as the program names it on the volume (the
naming of trainer_contract/checkpoint_layout.py its config gives, which every listing here takes): a sharded
checkpoint's files below it, a single-file checkpoint as the one object ``<prefix>/<name>/<name>``; COMPLETE_OBJECT
is written last, listing every file with its size and SHA-256 (trainer_stager/upload.py, as for an export: a
sharded checkpoint's from its manifest.json, the others' taken as they are read for the upload; a listing of an
earlier version has MD5s instead, still restored). A checkpoint without it was cut off: it is never restored, and
the next mirror removes it. Files go up and come down several at once, a large one in parts
(trainer_stager/transfers.py), each verified as it arrives. A sharded checkpoint can be moved by every rank at once,
each a share (``shares``, ``upload_share`` and ``complete_shares`` up, ``fetch`` and ``placed`` down: the
collectives are trainer_runtime/checkpoints/bucket_shares.py's). Torch-free: the stager restores before training.
"""

from __future__ import annotations

import heapq
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from trainer_contract import checkpoint_layout as layout
from trainer_contract.atomic import TEMP_PREFIX, fsync_directory
from trainer_contract.storage import COMPLETE_OBJECT, StorageUri
from trainer_contract.volume_notes import read_json_note
from trainer_stager import transfers
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress, check_room
from trainer_stager.transfers import classify, client, listing_pages
from trainer_stager.upload import (
    complete_record,
    listed_digest,
    put_listing,
    regular_files,
    signed,
    signing_key,
    upload_files,
)

# a sharded checkpoint's record of its files' SHA-256s (trainer_runtime/checkpoints/sharded.py's MANIFEST, which
# the stager, torch-free, does not import); a manifest of a million shards is far under this
MANIFEST, MANIFEST_LIMIT = "manifest.json", 64 * 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


def files_of(checkpoint: Path, say: Callable[[str], None] = lambda line: None) -> dict[str, Path]:
    """A checkpoint's files by their key below its place in the bucket: its regular files (a link is skipped,
    with a line to ``say``)."""
    if checkpoint.is_symlink():
        say(f"skipped {checkpoint.name}: a symbolic link (a checkpoint is a regular file or a directory of them)")
        return {}
    if checkpoint.is_dir():
        return regular_files(checkpoint, say)
    return {checkpoint.name: checkpoint}


def upload(uri: StorageUri, checkpoint: Path, say: Callable[[str], None]) -> dict:
    """Upload the published ``checkpoint`` (a file or a directory) under ``uri``; its record (written last)."""
    files = files_of(checkpoint, say)
    if not files:  # this entry only (a link where a checkpoint should be): the next one goes on
        raise StagingError(f"{uri.below(checkpoint.name).describe}: nothing to upload: {checkpoint} holds no regular "
                           "file", retryable=True)
    return upload_files(uri.below(checkpoint.name), files, say, signing_key(), manifest_sha256s(checkpoint))


def manifest_sha256s(checkpoint: Path) -> dict[str, str]:
    """The SHA-256 of each file a sharded checkpoint's manifest lists, by name: the ranks hashed them as the
    checkpoint was published, so the upload need not. A manifest that is not one (absent, not JSON, another
    program's) gives none: those files are hashed as they are read for the upload. A file that differs from its
    manifest is listed with the manifest's digest, so a restore refuses it as the volume's own check would."""
    manifest = read_json_note(checkpoint / MANIFEST, MANIFEST_LIMIT) if checkpoint.is_dir() else None
    files = manifest.get("files") if manifest is not None else None
    if not isinstance(files, dict):
        return {}
    return {name: digest for name, digest in files.items()
            if isinstance(digest, str) and _SHA256.fullmatch(digest) and name != MANIFEST}


def listed(uri: StorageUri, naming: layout.Naming) -> dict[str, bool]:
    """Every checkpoint of ``naming`` under ``uri``'s prefix, complete (its listing is there) or not."""
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = f"{uri.prefix}/" if uri.prefix else ""
    found: dict[str, bool] = {}
    try:
        for page in listing_pages(client(), uri):
            for item in page.get("Contents", []):
                name, _, rest = item["Key"][len(prefix):].partition("/")
                if naming.order(name) is not None:
                    found[name] = found.get(name, False) or rest == COMPLETE_OBJECT
    except (ClientError, BotoCoreError) as error:
        raise classify(uri, error) from None
    return found


def newest_complete(uri: StorageUri, naming: layout.Naming) -> str | None:
    complete = [(order, name) for name, done in listed(uri, naming).items()
                if done and (order := naming.order(name)) is not None]
    return max(complete)[1] if complete else None


def remove_except(uri: StorageUri, kept: set[str], naming: layout.Naming) -> list[str]:
    """Remove every checkpoint of ``naming`` under ``uri`` not named in ``kept``, each one's listing first (it stops
    being complete before any of its files goes); the names removed."""
    from botocore.exceptions import BotoCoreError, ClientError

    removed = sorted(set(listed(uri, naming)) - kept)
    s3 = client()
    try:
        for name in removed:
            place = uri.below(name)
            s3.delete_object(Bucket=uri.bucket, Key=f"{place.prefix}/{COMPLETE_OBJECT}")
            keys = [item["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket=uri.bucket, Prefix=f"{place.prefix}/") for item in page.get("Contents", [])]
            for start in range(0, len(keys), 1000):  # delete_objects' limit
                s3.delete_objects(Bucket=uri.bucket, Delete={"Objects": [{"Key": key} for key in keys[start:start + 1000]],
                                                             "Quiet": True})
    except (ClientError, BotoCoreError) as error:
        raise classify(uri, error) from None
    return removed


def download(uri: StorageUri, name: str, directory: Path, progress: Progress) -> Path:
    """Fetch the complete checkpoint ``name`` into ``directory`` (beside, then renamed into place), every file
    checked against its listing; its path there."""
    place = uri.below(name)
    files = listing_of(place)
    progress.total, progress.done = sum(item["bytes"] for item in files.values()), 0  # an attempt again: anew
    temporary = restoring(directory, name)
    directory.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    check_room(temporary, progress.total)
    fetch(place, files, temporary, progress.add)
    return placed(temporary, directory, name, files)


def restoring(directory: Path, name: str) -> Path:
    """Where checkpoint ``name`` is fetched into, beside ``directory``'s checkpoints: a temporary, never read."""
    return directory / f"{TEMP_PREFIX}restore-{name}"


def listing_of(place: StorageUri) -> dict[str, dict]:
    """The files of the complete checkpoint at ``place`` (its listing's, each {bytes, sha256 or md5}), its
    signature checked where the run has a key."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        record = complete_record(client(), place)
    except (ClientError, BotoCoreError) as error:
        raise classify(place, error) from None
    if record is None:
        raise StagingError(f"{place.describe}: no longer complete (removed while restoring?)", retryable=True)
    key = signing_key()
    if key is not None and not signed(record, place, key):
        raise StagingError(f"{place.describe}: its listing is not signed with this run's key "
                           f"(checkpoint.signing_secret): written by someone who does not hold it, or before the "
                           "key was set; remove it from the bucket (or restore without the key)", retryable=False)
    return record["files"]


def fetch(place: StorageUri, files: dict[str, dict], temporary: Path, progress: Callable[[int], None]) -> None:
    """Fetch the listed ``files`` of the checkpoint at ``place`` into ``temporary``, each verified as it arrives."""
    incoming = {}
    for relative, listed_file in files.items():
        algorithm, digest = listed_digest(listed_file)
        incoming[relative] = transfers.Incoming(f"{place.prefix}/{relative}", _inside(place, temporary, relative),
                                                listed_file["bytes"], {algorithm: digest})
    transfers.download(client(), place, incoming, progress)


def placed(temporary: Path, directory: Path, name: str, files: dict[str, dict]) -> Path:
    """Checkpoint ``name``, every listed file of it fetched into ``temporary``, renamed into ``directory``."""
    if list(files) == [name]:  # a single-file checkpoint is its one file; a sharded one the whole directory
        os.rename(temporary / name, directory / name)
        shutil.rmtree(temporary)
    else:
        os.rename(temporary, directory / name)
    fsync_directory(directory)
    return directory / name


def shares(sizes: dict[str, int], ranks: int) -> list[list[str]]:
    """The files (by name, with their ``sizes``) each of ``ranks`` ranks moves: the largest first, each to the rank
    with the fewest bytes so far, so that the slowest rank moves at most one file more than its share of the bytes.
    The same on every rank for the same files."""
    loads = [(0, rank) for rank in range(ranks)]
    moved: list[list[str]] = [[] for _ in range(ranks)]
    for name in sorted(sizes, key=lambda name: (-sizes[name], name)):
        load, rank = heapq.heappop(loads)
        moved[rank].append(name)
        heapq.heappush(loads, (load + sizes[name], rank))
    return moved


def withdraw(place: StorageUri) -> None:
    """Before the ranks upload a checkpoint's files to ``place``: a listing there from before (a rerun's checkpoint
    of the same name) removed first, so that nobody restores a mix of two."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client().delete_object(Bucket=place.bucket, Key=f"{place.prefix}/{COMPLETE_OBJECT}")
    except (ClientError, BotoCoreError) as error:
        raise classify(place, error) from None


def upload_share(place: StorageUri, checkpoint: Path, sha256s: dict[str, str]) -> int:
    """A rank's files of the published sharded ``checkpoint`` (by name, with the SHA-256 it took as it wrote each)
    uploaded to ``place``; the bytes sent."""
    outgoing = {name: transfers.Outgoing(checkpoint / name, f"{place.prefix}/{name}", (checkpoint / name).stat().st_size,
                                         digest) for name, digest in sha256s.items()}
    _send(place, outgoing)
    return sum(item.size for item in outgoing.values())


def complete_shares(place: StorageUri, checkpoint: Path, uploaded: set[str]) -> int:
    """Rank 0, once every rank has uploaded its ``uploaded`` files of ``checkpoint``: the rest of its files (its
    metadata, the manifest), then the listing, every file's SHA-256 from the manifest (the manifest's own taken
    as it is read); the bytes sent here."""
    files = files_of(checkpoint)
    sizes = {name: path.stat().st_size for name, path in files.items()}
    sha256s = manifest_sha256s(checkpoint)
    missing = sorted(name for name in uploaded if name not in files or name not in sha256s)
    if missing:
        raise StagingError(f"{place.describe}: {missing[0]} was uploaded but is not in {checkpoint.name}'s manifest",
                           retryable=True)
    rest = {name: transfers.Outgoing(path, f"{place.prefix}/{name}", sizes[name], sha256s.get(name))
            for name, path in files.items() if name not in uploaded}
    sha256s.update(_send(place, rest))
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        put_listing(client(), place, sizes, sha256s, signing_key())
    except (ClientError, BotoCoreError) as error:
        raise classify(place, error) from None
    return sum(item.size for item in rest.values())


def _send(place: StorageUri, outgoing: dict[str, transfers.Outgoing]) -> dict[str, str]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return transfers.upload(client(), place, outgoing, lambda count: None)
    except (ClientError, BotoCoreError, OSError) as error:
        raise classify(place, error) from None


def _inside(place: StorageUri, temporary: Path, relative: str) -> Path:
    """Where the listed file ``relative`` lands: inside ``temporary``, or refused."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise StagingError(f"{place.describe}: its listing names {relative!r}, outside the checkpoint", retryable=False)
    return temporary / path
