"""s3:// sources: every object under the prefix, each checked against its listed size and, where the ETag is
the object's MD5 (a single-part upload), its MD5. The endpoint and credentials are boto3's own
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from a Secret, a role)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from trainer_contract.storage import StorageUri
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress, check_room, copy_stream

# botocore's error codes that retrying cannot fix
_REFUSED = {"AccessDenied": 403, "InvalidAccessKeyId": 403, "SignatureDoesNotMatch": 403, "AllAccessDisabled": 403,
            "NoSuchBucket": 404, "NoSuchKey": 404, "403": 403, "404": 404, "401": 401}


def client():
    import boto3
    from botocore.config import Config

    # botocore retries throttling, 5xx and dropped connections itself (the standard mode's back-off)
    return boto3.client("s3", config=Config(retries={"max_attempts": 4, "mode": "standard"},
                                            connect_timeout=20, read_timeout=60))


def classify(uri: StorageUri, error: Exception) -> StagingError:
    """A botocore error as staging's: refused (with the fix) or retryable."""
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(error, NoCredentialsError):
        return StagingError(f"{uri.describe}: no credentials: give the pod AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                            "from a Secret (env_from_secrets), or a service account with a role", retryable=False)
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = _REFUSED.get(code)
        if status == 404:
            return StagingError(f"{uri.describe}: {code}: no such bucket or object; check the URI", retryable=False)
        if status in (401, 403):
            return StagingError(f"{uri.describe}: {code}: the credentials may not read it; check the Secret's keys "
                                "and the bucket's policy", retryable=False)
        return StagingError(f"{uri.describe}: {code}: {error}", retryable=True)
    return StagingError(f"{uri.describe}: {type(error).__name__}: {error}", retryable=True)


def fetch(uri: StorageUri, into: Path, progress: Progress) -> dict:
    """Every object under the prefix into ``into``, keyed by its path below the prefix."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = client()
    try:
        objects = _listing(s3, uri)
        progress.total = sum(item["Size"] for item in objects)
        check_room(into, progress.total)
        files = {}
        for item in objects:
            relative = _relative(uri, item["Key"])
            files[relative] = _download(s3, uri, item, into / relative, progress)
    except (ClientError, BotoCoreError) as error:
        raise classify(uri, error) from None
    return {"bucket": uri.bucket, "prefix": uri.prefix, "files": files}


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


def _download(s3, uri: StorageUri, item: dict, target: Path, progress: Progress) -> dict:
    target.parent.mkdir(parents=True, exist_ok=True)
    body = s3.get_object(Bucket=uri.bucket, Key=item["Key"])["Body"]
    md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    size = copy_stream(body, target, progress, _Both(md5, sha256))
    etag = item.get("ETag", "").strip('"')
    if size != item["Size"] or ("-" not in etag and etag and etag != md5.hexdigest()):
        raise StagingError(f"{uri.describe}: {item['Key']} arrived damaged ({size} bytes, MD5 {md5.hexdigest()}; "
                           f"listed {item['Size']} bytes, ETag {etag})", retryable=True)
    # the SHA-256 too: a workload knows the staged file by it without reading it again (digests.staged_sha256s)
    return {"bytes": size, "etag": etag, "sha256": sha256.hexdigest()}


class _Both:
    """Two digests fed the same bytes (one pass over a download)."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def update(self, chunk: bytes) -> None:
        self.first.update(chunk)
        self.second.update(chunk)
