"""The bucket's transfers against boto3's TransferManager, side by side in one run, on one moto S3 server on
127.0.0.1 (a process of its own, so that neither contender shares its interpreter with the server):

- mirror: the checkpoint mirror's upload (trainer_stager/checkpoint_bucket.upload: a sharded checkpoint's files at
  once, the large ones in parts, its manifest's SHA-256s, then the listing) against a TransferManager uploading the
  same files, every one submitted at once;
- restore: the restore's download (checkpoint_bucket.download: every file verified as it arrives) against the
  TransferManager downloading the same objects to files;
- staging: staging from s3:// (fetch_s3.fetch: MD5 and SHA-256 of every object as it arrives) against the same.

Both sides use transfers.CONCURRENCY requests at once and parts of transfers.PART_SIZE. Rounds alternate; a row
gives each side's median throughput (MB/s of the checkpoint's bytes) and the median of the rounds' ratios (the
baseline's time over ours, each round's pair run back to back: the load of the machine, shared here, changes
from round to round far more than between the two).

    python -m bench.checkpoint_io --only bucket [--megabytes 128] [--repeats 5]
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.stats import ROOT, alternate_samples
from localjob.ports import free_port

MB = 1_000_000
BUCKET = "bench-ckpt"
TARGET = 0.9  # issue 77: the mirror, the restore and staging at least 0.9 x boto3's TransferManager


def checkpoint(directory: Path, megabytes: int) -> Path:
    """A sharded checkpoint's shape: two large shards (a rank each), extra state, metadata, and the manifest of
    their SHA-256s that the ranks wrote."""
    path = directory / "ckpt-e0001-s000000.dcp"
    path.mkdir(parents=True)
    total = megabytes * MB
    files = {"__0_0.distcp": total * 45 // 100, "__1_0.distcp": total * 45 // 100, "extra.pt": total // 10,
             ".metadata": 20_000}
    for name, size in files.items():
        (path / name).write_bytes(os.urandom(size))
    digests = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in files}
    (path / "manifest.json").write_text(json.dumps({"format": "indexed-trainer sharded checkpoint v1", "meta": {},
                                                    "files": digests}))
    return path


@contextlib.contextmanager
def moto_server() -> Iterator[dict[str, str]]:
    """moto's S3 in a process of its own on 127.0.0.1; the environment boto3 reaches it with."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"moto's server did not answer at {url}")
        yield {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_DEFAULT_REGION": "us-east-1"}
    finally:
        server.terminate()
        server.wait(30)


def _timed(action: Callable[[], object], cleanup: Callable[[], object]) -> Callable[[], float]:
    def once() -> float:
        started = time.perf_counter()
        action()
        elapsed = time.perf_counter() - started
        cleanup()
        return elapsed
    return once


def _manager(s3):
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    from trainer_stager import transfers

    config = TransferConfig(multipart_threshold=transfers.PART_SIZE, multipart_chunksize=transfers.PART_SIZE,
                            max_concurrency=transfers.CONCURRENCY)
    return create_transfer_manager(s3, config)


def _each_at_once(submitted: list) -> None:
    for future in submitted:
        future.result()


def measure(work: Path, megabytes: int = 128, repeats: int = 5) -> list[dict]:
    """The three phases' rows: ours and boto3's TransferManager in MB/s, their ratio and the target."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from trainer_contract import storage
    from trainer_stager import checkpoint_bucket, fetch_s3, transfers
    from trainer_stager.place import Progress

    source = checkpoint(work / "volume", megabytes)
    files = {path.name: path for path in sorted(source.iterdir())}
    size = sum(path.stat().st_size for path in files.values())
    rounds = itertools.count()
    sys.path.insert(0, str(ROOT))
    from testbed.storage_servers import environment

    with moto_server() as env, environment(env):
        s3 = transfers.client()
        s3.create_bucket(Bucket=BUCKET)

        def empty(prefix: str) -> None:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
                for item in page.get("Contents", []):
                    s3.delete_object(Bucket=BUCKET, Key=item["Key"])

        def scratch(name: str) -> Path:
            shutil.rmtree(work / name, ignore_errors=True)
            return work / name

        # the mirror, each round into a prefix of its own (the same files twice would transfer nothing)
        def ours_up() -> None:
            uri = storage.parse(f"s3://{BUCKET}/ours-{next(rounds)}", "checkpoint")
            checkpoint_bucket.upload(uri, source, lambda line: None)

        def theirs_up() -> None:
            with _manager(s3) as manager:
                _each_at_once([manager.upload(str(path), BUCKET, f"theirs/{source.name}/{name}")
                               for name, path in files.items()])

        uploads = alternate_samples({"ours": _timed(ours_up, lambda: empty("ours-")),
                                     "theirs": _timed(theirs_up, lambda: empty("theirs/"))}, repeats)

        # what the restore and staging read: one mirrored checkpoint
        place = storage.parse(f"s3://{BUCKET}/run", "checkpoint")
        checkpoint_bucket.upload(place, source, lambda line: None)
        keys = {name: f"run/{source.name}/{name}" for name in [*files, storage.COMPLETE_OBJECT]}

        def ours_restore() -> None:
            target = scratch("restored")
            checkpoint_bucket.download(place, source.name, target, Progress(target, "checkpoint", lambda line: None))

        def theirs_down() -> None:
            target = scratch("theirs")
            target.mkdir()
            with _manager(s3) as manager:
                _each_at_once([manager.download(BUCKET, key, str(target / name)) for name, key in keys.items()])

        def ours_staging() -> None:
            target = scratch("staged")
            target.mkdir()
            fetch_s3.fetch(place.below(source.name), target, Progress(target, "checkpoint", lambda line: None))

        downloads = alternate_samples({"restore": _timed(ours_restore, lambda: None),
                                       "staging": _timed(ours_staging, lambda: None),
                                       "theirs": _timed(theirs_down, lambda: None)}, repeats)

    def row(phase: str, ours: list[float], theirs: list[float]) -> dict:
        return {"phase": phase, "ours_mb_s": round(size / MB / statistics.median(ours), 1),
                "baseline_mb_s": round(size / MB / statistics.median(theirs), 1),
                "ratio": round(statistics.median(b / a for a, b in zip(ours, theirs, strict=True)), 2), "target": TARGET}

    return [row("mirror upload", uploads["ours"], uploads["theirs"]),
            row("restore", downloads["restore"], downloads["theirs"]),
            row("s3 staging", downloads["staging"], downloads["theirs"])]
