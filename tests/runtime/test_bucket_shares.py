"""A sharded checkpoint moved to and from the bucket by every rank at once (trainer_runtime/checkpoints/bucket_shares.py),
two gloo processes against moto's S3: each rank uploads the files it wrote and rank 0 the rest with the listing last;
onto an empty volume each rank fetches a share, every file verified as it arrives, and a damaged one ends the start
of every rank with the stage step's exit code, naming the rank that found it, nothing put in place. The workloads'
round trip through these is tests/stager/test_programs_resume_from_the_bucket.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp
from hypothesis import given
from hypothesis import strategies as st

from trainer_contract import checkpoint_layout as layout
from trainer_contract import exit_codes
from trainer_contract.storage import COMPLETE_OBJECT

pytest.importorskip("moto")

NAME = layout.step_checkpoint_name(10)
URI = "s3://team-ckpt/run-shares"
SIZES = {"__0_0.distcp": 3_000_000, "__1_0.distcp": 20_000_000, ".metadata": 4_000}  # one past a 16 MiB part


def _written(root: Path) -> Path:
    """A sharded checkpoint as the ranks publish it: each rank's shard, the metadata, the manifest of digests."""
    checkpoint = root / "checkpoints" / NAME
    checkpoint.mkdir(parents=True)
    digests = {}
    for name, size in SIZES.items():
        data = os.urandom(size)
        (checkpoint / name).write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    manifest = {"format": "indexed-trainer sharded checkpoint v1", "files": digests, "meta": {}}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    return checkpoint


def _rank(rank: int, world: int, rendezvous: str, action: str, root: str) -> None:
    import torch.distributed as dist

    from trainer_contract.storage import parse
    from trainer_runtime.checkpoints.bucket_shares import BucketShares
    from trainer_runtime.distenv import DistEnv
    from trainer_runtime.failures import Refusal

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    lines: list[str] = []
    shares, base, outcome = BucketShares(parse(URI, "checkpoint"), lines.append), Path(root), "ok"
    if action == "stop":
        outcome = _stopped_while_an_upload_is_in_flight(rank, base, shares, lines)
    elif action == "upload":
        checkpoint = base / "checkpoints" / NAME
        mine = {name: hashlib.sha256((checkpoint / name).read_bytes()).hexdigest() for name in [f"__{rank}_0.distcp"]}
        shares.upload(checkpoint, mine)
    else:
        try:
            shares.restore(base / "restored", layout.OPTIMIZER_STEP, DistEnv(rank=rank, world_size=world))
        except Refusal as refusal:
            outcome = f"{refusal.code}: {refusal}"
    (base / f"rank-{rank}.json").write_text(json.dumps({"lines": lines, "outcome": outcome}))
    dist.destroy_process_group()


def _stopped_while_an_upload_is_in_flight(rank: int, base: Path, shares, lines: list[str]) -> str:
    """Step 5 written beside the training, its upload slowed by 3 s; a stop then writes step 6 at once (it waits for
    step 5's write, not its upload) and uploads it by every rank once step 5's upload is done."""
    import time

    import torch

    from trainer_runtime.checkpoints import sharded
    from trainer_runtime.checkpoints.beside import CheckpointWrite, WritesBeside
    from trainer_runtime.checkpoints.clock import CheckpointClock
    from trainer_runtime.checkpoints.store import CheckpointStore
    from trainer_stager import checkpoint_bucket

    store = CheckpointStore(base / "checkpoints", layout.OPTIMIZER_STEP, keep=2, log=lines.append, shares=shares)
    store.directory.mkdir(parents=True, exist_ok=True)
    writes, clock, ended = WritesBeside(), CheckpointClock(0, votes=False), {}
    upload_share = checkpoint_bucket.upload_share

    def slowed(place, checkpoint, sha256s):
        time.sleep(3 if checkpoint.name == layout.step_checkpoint_name(5) else 0)
        sent = upload_share(place, checkpoint, sha256s)
        ended.setdefault(checkpoint.name, time.monotonic())
        return sent

    checkpoint_bucket.upload_share = slowed
    state = {"weight": torch.full((1000,), float(rank))}
    for step, beside in ((5, True), (6, False)):
        path = store.directory / layout.step_checkpoint_name(step)
        writes.wait(whole=beside)  # a stop's waits for the write in flight only
        ended.setdefault(f"step {step} began", time.monotonic())
        finish = sharded.begin_shards(state, {"step": step}, path, rank, stage=writes.staging.copy if beside else None,
                                      group=writes.write_group(store) if beside else None)
        write = CheckpointWrite(finish, path, rank, store, clock, time.perf_counter(), 0.0 if beside else None,
                                by_ranks=True)
        if beside:
            writes.start(write, True)
        else:
            writes.written(write)
    writes.close(False, lines.append)
    return "6 began before 5 was uploaded" if ended["step 6 began"] < ended[layout.step_checkpoint_name(5)] \
        else json.dumps(ended)


def _run(action: str, root: Path) -> list[dict]:
    rendezvous = root / f"rendezvous-{action}"
    rendezvous.unlink(missing_ok=True)
    mp.start_processes(_rank, args=(2, str(rendezvous), action, str(root)), nprocs=2, start_method="spawn")
    return [json.loads((root / f"rank-{rank}.json").read_text()) for rank in range(2)]


def test_every_rank_uploads_its_shards_and_every_rank_fetches_a_share_back(checkpoint_s3, tmp_path):
    checkpoint = _written(tmp_path)
    uploaded = _run("upload", tmp_path)
    assert f"checkpoint mirror: {NAME} uploaded to {URI}/{NAME} by 2 ranks at once" in uploaded[0]["lines"][0]
    s3 = checkpoint_s3.client()
    listing = json.loads(s3.get_object(Bucket="team-ckpt", Key=f"run-shares/{NAME}/{COMPLETE_OBJECT}")["Body"].read())
    assert {name: item["sha256"] for name, item in listing["files"].items()} == {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in checkpoint.iterdir()}

    restored = _run("restore", tmp_path)
    assert [rank["outcome"] for rank in restored] == ["ok", "ok"]
    assert f"checkpoint {NAME} restored from {URI} into {tmp_path / 'restored'} by 2 ranks at once (4 files" in \
        restored[0]["lines"][-1]
    assert {path.name: path.read_bytes() for path in (tmp_path / "restored" / NAME).iterdir()} == {
        path.name: path.read_bytes() for path in checkpoint.iterdir()}


def test_a_share_that_arrives_damaged_ends_every_ranks_start_and_nothing_is_put_in_place(checkpoint_s3, tmp_path,
                                                                                       monkeypatch):
    from trainer_stager.errors import ATTEMPTS_VARIABLE

    monkeypatch.setenv(ATTEMPTS_VARIABLE, "1")
    _written(tmp_path)
    _run("upload", tmp_path)
    # rank 1's share (the second largest file first: checkpoint_bucket.shares) changed in the bucket, its size kept
    checkpoint_s3.client().put_object(Bucket="team-ckpt", Key=f"run-shares/{NAME}/__0_0.distcp",
                                      Body=b"\0" * SIZES["__0_0.distcp"])
    restored = _run("restore", tmp_path)
    for rank in restored:
        assert rank["outcome"].startswith(f"{exit_codes.DATA_UNAVAILABLE}: restoring {NAME} from {URI}: rank 1: ")
        assert "__0_0.distcp arrived damaged" in rank["outcome"]
    assert layout.list_checkpoints(tmp_path / "restored", layout.OPTIMIZER_STEP) == []


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 10**9), max_size=40), st.integers(1, 16))
def test_shares_move_every_file_once_and_the_largest_share_is_at_most_one_file_past_an_even_split(sizes, ranks):
    from trainer_stager.checkpoint_bucket import shares

    moved = shares(sizes, ranks)
    assert sorted(name for share in moved for name in share) == sorted(sizes)
    loads = [sum(sizes[name] for name in share) for share in moved]
    assert max(loads) <= sum(sizes.values()) / ranks + max(sizes.values(), default=0)
    assert moved == shares(dict(reversed(list(sizes.items()))), ranks)  # the same on every rank


def test_a_stops_checkpoint_is_written_beside_an_upload_in_flight_and_every_rank_uploads_it_after(checkpoint_s3,
                                                                                                tmp_path):
    stopped = _run("stop", tmp_path)
    assert [rank["outcome"] for rank in stopped] == ["6 began before 5 was uploaded"] * 2, stopped
    uploads = [line for line in stopped[0]["lines"] if " uploaded to " in line]
    assert [line.split()[2] for line in uploads] == [layout.step_checkpoint_name(5), layout.step_checkpoint_name(6)]
    s3 = checkpoint_s3.client()
    for step in (5, 6):
        assert s3.head_object(Bucket="team-ckpt", Key=f"run-shares/{layout.step_checkpoint_name(step)}/{COMPLETE_OBJECT}")
