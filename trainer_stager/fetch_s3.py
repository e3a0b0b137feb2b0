"""s3:// sources: every object under the prefix, several at once and a large one in ranged parts
(trainer_stager/transfers.py), each checked against its listed size and, where the ETag is the object's MD5 (a
single-part upload), its MD5, as it arrives. The endpoint and credentials are boto3's own (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from a Secret, a role)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from trainer_contract.storage import StorageUri
from trainer_stager import transfers
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress, check_room
from trainer_stager.transfers import classify, client, listing_pages


def fetch(uri: StorageUri, into: Path, progress: Progress) -> dict:
    """Every object under the prefix into ``into``, keyed by its path below the prefix, with its size, ETag and
    SHA-256 (a workload knows the staged file by it without reading it again: digests.staged_sha256s)."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = client()
    try:
        objects = _listing(s3, uri)
    except (ClientError, BotoCoreError) as error:
        raise classify(uri, error) from None
    progress.total = sum(item["Size"] for item in objects)
    check_room(into, progress.total)
    incoming, etags = {}, {}
    for item in objects:
        relative = _relative(uri, item["Key"])
        etags[relative] = etag = item.get("ETag", "").strip('"')
        single_part_md5 = {"md5": etag} if etag and "-" not in etag else {}
        incoming[relative] = transfers.Incoming(item["Key"], into / relative, item["Size"], single_part_md5,
                                                ("sha256",), item.get("ETag") or None)
    digests = transfers.download(s3, uri, incoming, progress.add)
    files = {relative: {"bytes": item.size, "etag": etags[relative], "sha256": digests[relative]["sha256"]}
             for relative, item in incoming.items()}
    return {"bucket": uri.bucket, "prefix": uri.prefix, "files": files}


def _listing(s3, uri: StorageUri) -> list[dict]:
    objects = [item for page in listing_pages(s3, uri) for item in page.get("Contents", [])
               if not item["Key"].endswith("/")]
    if not objects:
        raise StagingError(f"{uri.describe}: no objects under this prefix; check the URI", retryable=False)
    return objects


def _relative(uri: StorageUri, key: str) -> str:
    relative = PurePosixPath(key[len(uri.prefix):].lstrip("/")) if uri.prefix else PurePosixPath(key)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise StagingError(f"{uri.describe}: object {key!r} would land outside the directory", retryable=False)
    return str(relative)
