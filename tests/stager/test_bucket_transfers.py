"""Parallel transfers to and from a bucket (trainer_stager/transfers.py) against moto's S3 server: a large file
goes up in parts and comes back in ranged parts, byte for byte; a sharded checkpoint is listed with its manifest's
SHA-256s (not read twice); a restore refuses an object replaced or damaged in the bucket with one line naming the
file; a listing an earlier version wrote (MD5s) still restores; staging from s3:// takes a large object in parts.
Parts of 5 MiB (S3's least) keep the files small."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from testbed.storage_servers import s3_in_this_process
from trainer_contract import storage
from trainer_stager import checkpoint_bucket as remote
from trainer_stager import fetch_s3, transfers
from trainer_stager.errors import StagingError
from trainer_stager.place import Progress

BUCKET = "team-ckpt"
LARGE = 5 * transfers.MiB + 123  # two parts


@pytest.fixture(scope="module")
def s3():
    with s3_in_this_process() as server:  # the code under test runs in this process
        server.client().create_bucket(Bucket=BUCKET)
        yield server


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(transfers, "PART_SIZE", 5 * transfers.MiB)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sharded(directory: Path, name: str, shards: dict[str, bytes]) -> Path:
    """A sharded checkpoint as trainer_runtime/checkpoints/sharded.py publishes it: its files and a manifest of
    their SHA-256s."""
    path = directory / name
    path.mkdir(parents=True)
    for shard, data in shards.items():
        (path / shard).write_bytes(data)
    manifest = {"format": "indexed-trainer sharded checkpoint v1", "meta": {},
                "files": {shard: sha256(data) for shard, data in shards.items()}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def listing(s3, prefix: str) -> dict:
    body = s3.client().get_object(Bucket=BUCKET, Key=f"{prefix}/{storage.COMPLETE_OBJECT}")["Body"].read()
    return json.loads(body)["files"]


def restore(uri: storage.StorageUri, name: str, into: Path) -> Path:
    return remote.download(uri, name, into, Progress(into, "checkpoint", lambda line: None))


def test_a_large_checkpoint_goes_up_in_parts_and_comes_back_in_parts_byte_for_byte(s3, tmp_path):
    data = os.urandom(LARGE)
    (tmp_path / "volume").mkdir()
    checkpoint = tmp_path / "volume" / "ckpt-e0001-s000000.pt"
    checkpoint.write_bytes(data)
    uri = storage.parse(f"s3://{BUCKET}/run-parts", "checkpoint")
    remote.upload(uri, checkpoint, lambda line: None)
    key = f"run-parts/{checkpoint.name}/{checkpoint.name}"
    assert s3.client().head_object(Bucket=BUCKET, Key=key)["ETag"].strip('"').endswith("-2")  # a multipart upload
    # hashed as it was read for the upload
    assert listing(s3, f"run-parts/{checkpoint.name}") == {checkpoint.name: {"bytes": LARGE, "sha256": sha256(data)}}
    assert restore(uri, checkpoint.name, tmp_path / "restored").read_bytes() == data


def test_a_sharded_checkpoint_is_listed_with_its_manifests_digests_and_a_shard_unlike_them_is_refused(s3, tmp_path):
    shards = {"__0_0.distcp": os.urandom(LARGE), "__1_0.distcp": os.urandom(70_000), ".metadata": b"meta"}
    checkpoint = sharded(tmp_path / "volume", "ckpt-e0001-s000000.dcp", shards)
    uri = storage.parse(f"s3://{BUCKET}/run-manifest", "checkpoint")
    remote.upload(uri, checkpoint, lambda line: None)
    listed = listing(s3, f"run-manifest/{checkpoint.name}")
    assert {name: entry["sha256"] for name, entry in listed.items() if name != "manifest.json"} == {
        name: sha256(data) for name, data in shards.items()}
    restored = restore(uri, checkpoint.name, tmp_path / "restored")
    assert {path.name: path.read_bytes() for path in restored.iterdir()} == {
        **shards, "manifest.json": (checkpoint / "manifest.json").read_bytes()}

    # a shard changed on the volume after its manifest was written: the listing keeps the manifest's digest (the
    # shard is not read twice), and the restore refuses it as the volume's own check would
    (checkpoint / "__0_0.distcp").write_bytes(os.urandom(LARGE))
    again = storage.parse(f"s3://{BUCKET}/run-manifest-changed", "checkpoint")
    remote.upload(again, checkpoint, lambda line: None)
    with pytest.raises(StagingError, match=r"ckpt-e0001-s000000\.dcp: __0_0\.distcp arrived damaged") as raised:
        restore(again, checkpoint.name, tmp_path / "refused")
    assert raised.value.retryable and "\n" not in str(raised.value)
    assert not (tmp_path / "refused" / checkpoint.name).exists()  # nothing partial in place


@pytest.mark.parametrize("replacement, words", [
    (lambda data: data[:100] + bytes([data[100] ^ 1]) + data[101:], rf"__0_0\.distcp arrived damaged \({LARGE} bytes"),
    (lambda data: data[:5 * transfers.MiB], rf"__0_0\.distcp arrived damaged \({5 * transfers.MiB} bytes, .*; listed "
                                            rf"{LARGE} bytes"),
    (lambda data: data + b"more", rf"__0_0\.distcp: more than its listed {LARGE} bytes arrived"),
])
def test_a_restore_refuses_an_object_replaced_in_the_bucket_in_one_line_naming_it(s3, tmp_path, replacement, words):
    data = os.urandom(LARGE)
    checkpoint = sharded(tmp_path / "volume", "ckpt-e0002-s000000.dcp", {"__0_0.distcp": data, ".metadata": b"m"})
    uri = storage.parse(f"s3://{BUCKET}/run-replaced", "checkpoint")
    remote.upload(uri, checkpoint, lambda line: None)
    s3.client().put_object(Bucket=BUCKET, Key=f"run-replaced/{checkpoint.name}/__0_0.distcp", Body=replacement(data))
    with pytest.raises(StagingError) as raised:
        restore(uri, checkpoint.name, tmp_path / "restored")
    message = str(raised.value)
    assert message.startswith(f"s3://{BUCKET}/run-replaced/{checkpoint.name}: ") and re.search(words, message), message
    assert "\n" not in message and raised.value.retryable  # the stager tries again, then the pod restarts


def test_a_listing_of_an_earlier_version_with_md5s_still_restores_and_still_verifies(s3, tmp_path):
    files = {"__0_0.distcp": os.urandom(LARGE), ".metadata": b"meta"}
    client = s3.client()
    for name, data in files.items():
        client.put_object(Bucket=BUCKET, Key=f"run-md5/ckpt-e0003-s000000.dcp/{name}", Body=data)
    record = {"files": {name: {"bytes": len(data), "md5": hashlib.md5(data).hexdigest()}
                        for name, data in files.items()}, "uploaded_at": "2026-01-01T00:00:00Z"}
    client.put_object(Bucket=BUCKET, Key=f"run-md5/ckpt-e0003-s000000.dcp/{storage.COMPLETE_OBJECT}",
                      Body=json.dumps(record).encode())
    uri = storage.parse(f"s3://{BUCKET}/run-md5", "checkpoint")
    restored = restore(uri, "ckpt-e0003-s000000.dcp", tmp_path / "restored")
    assert {path.name: path.read_bytes() for path in restored.iterdir()} == files

    client.put_object(Bucket=BUCKET, Key="run-md5/ckpt-e0003-s000000.dcp/.metadata", Body=b"mETA")
    with pytest.raises(StagingError, match=r"\.metadata arrived damaged \(4 bytes, MD5 [0-9a-f]{32}; listed 4 "
                                           r"bytes, MD5 [0-9a-f]{32}\)"):
        restore(uri, "ckpt-e0003-s000000.dcp", tmp_path / "again")


def test_staging_takes_a_large_object_in_parts_with_its_sha256(s3, tmp_path):
    data = os.urandom(LARGE)
    client = s3.client()
    client.create_bucket(Bucket="team-parts")
    client.put_object(Bucket="team-parts", Key="model/weights.bin", Body=data)
    client.put_object(Bucket="team-parts", Key="model/config.json", Body=b"{}")
    uri = storage.parse("s3://team-parts/model", "model")
    (tmp_path / "into").mkdir()
    progress = Progress(tmp_path / "into", "model", lambda line: None)
    record = fetch_s3.fetch(uri, tmp_path / "into", progress)
    assert (tmp_path / "into" / "weights.bin").read_bytes() == data and progress.done == LARGE + 2
    assert record["files"]["weights.bin"]["sha256"] == sha256(data)
    assert record["files"]["config.json"]["etag"] == hashlib.md5(b"{}").hexdigest()
