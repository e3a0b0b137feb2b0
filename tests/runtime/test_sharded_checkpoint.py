"""Sharded checkpoint directories (STRATEGY=fsdp) as files on disk: written whole or not at all, verified by their
manifest, listed and pruned with the single-file kind. One process without a process group (torch.distributed's
checkpoint runs without one); the multi-rank writes are tests/runtime/test_strategies.py."""

import json

import pytest
import torch

from trainer_contract import checkpoint_layout as layout
from trainer_contract import hooks
from trainer_contract.checkpoint_layout import Position
from trainer_runtime.checkpoints import sharded, single_file
from trainer_runtime.checkpoints.manager import load_newest
from trainer_runtime.checkpoints.state import TrainingState


def write(directory, epoch, record=None):
    shards = {"model": {"weight": torch.full((4, 4), float(epoch))}}
    record = record or TrainingState(Position(epoch, 0), steps_per_epoch=10, world_size=1).to_record()
    final = directory / Position(epoch, 0).filename(sharded.SUFFIX)
    sharded.write_shards(shards, record, final, rank=0)
    return final


def test_a_written_directory_verifies_and_reads_as_a_training_state(tmp_path):
    path = write(tmp_path, 1)
    assert path.name == "ckpt-e0001-s000000.dcp"
    assert sorted(p.name for p in path.iterdir()) == [".metadata", "__0_0.distcp", "manifest.json"]
    found = load_newest(tmp_path)
    assert found.path == path and found.tensors is None
    assert found.state == TrainingState(Position(1, 0), steps_per_epoch=10, world_size=1)


@pytest.mark.parametrize("damage, reason", [
    (lambda p: (p / "__0_0.distcp").write_bytes(b"\0" * 10), "__0_0.distcp does not match its checksum"),
    (lambda p: (p / "__0_0.distcp").unlink(), "__0_0.distcp is missing"),
    (lambda p: (p / "manifest.json").unlink(), "no manifest.json: the write did not finish"),
    (lambda p: (p / "manifest.json").write_text("{"), "unreadable manifest.json"),
    (lambda p: (p / "manifest.json").write_text(json.dumps({"format": "x", "files": {}})), "not an indexed-trainer"),
])
def test_a_damaged_directory_is_skipped_for_the_one_before(tmp_path, damage, reason):
    write(tmp_path, 1)
    damage(write(tmp_path, 2))
    skipped = []
    found = load_newest(tmp_path, log=skipped.append)
    assert found.path.name == "ckpt-e0001-s000000.dcp"
    assert len(skipped) == 1 and skipped[0].startswith("skipping checkpoint ckpt-e0002-s000000.dcp: ")
    assert reason in skipped[0]


def test_a_crash_before_the_rename_leaves_only_a_temporary_directory(tmp_path):
    write(tmp_path, 1)

    def crash(name, **context):  # the manifest is written, not yet renamed: the process dies there
        if name == "before-rename":
            raise RuntimeError("killed mid-write")

    hooks.install(crash)
    try:
        with pytest.raises(RuntimeError):
            write(tmp_path, 2)
    finally:
        hooks.install(None)
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == ["ckpt-e0001-s000000.dcp"]
    assert [p.name for p in layout.remove_stale_temporaries(tmp_path)] == [".tmp-ckpt-e0002-s000000.dcp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-e0001-s000000.dcp"]


def test_both_formats_are_listed_newest_first_and_pruned_together(tmp_path):
    for epoch in (1, 3):
        (tmp_path / Position(epoch, 0).filename(single_file.SUFFIX)).write_bytes(single_file.encode({"x": epoch}))
    for epoch in (2, 4):
        write(tmp_path, epoch)
    layout.prune(tmp_path, keep=3)
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == [
        "ckpt-e0004-s000000.dcp", "ckpt-e0003-s000000.pt", "ckpt-e0002-s000000.dcp"]


def test_the_same_position_written_again_replaces_the_directory(tmp_path):
    write(tmp_path, 1)
    again = TrainingState(Position(1, 0), steps_per_epoch=10, world_size=1, strategy="again").to_record()
    path = write(tmp_path, 1, record=again)
    assert sharded.verify(path) == again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-e0001-s000000.dcp"]


def test_pruning_keeps_the_newest_checkpoint_at_an_epochs_start_for_another_world_size(tmp_path):
    names = ["ckpt-e0001-s000000.pt", "ckpt-e0001-s000040.pt", "ckpt-e0001-s000080.pt", "ckpt-e0001-s000120.pt"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    layout.prune(tmp_path, keep=2)
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == [
        "ckpt-e0001-s000120.pt", "ckpt-e0001-s000080.pt", "ckpt-e0001-s000000.pt"]
    (tmp_path / "ckpt-e0002-s000000.pt").write_bytes(b"x")
    layout.prune(tmp_path, keep=2)  # the newer epoch start replaces the older one
    assert [p.name for _, p in layout.list_checkpoints(tmp_path)] == ["ckpt-e0002-s000000.pt", "ckpt-e0001-s000120.pt"]


@pytest.mark.slow
def test_a_gang_hashes_each_file_once_and_agrees_on_the_verdict(tmp_path):
    """Three gloo ranks verify the checkpoint they wrote (a collective): each file is hashed by one rank only, and a
    damaged shard that one rank hashed, or a manifest gone, is every rank's verdict, in the same words."""
    import torch.multiprocessing as mp

    from tests.mnist.launch import free_port
    from tests.runtime import sharded_verify_ranks

    mp.spawn(sharded_verify_ranks.run_rank, args=(3, free_port(), str(tmp_path)), nprocs=3, join=True)
    outcomes = [json.loads((tmp_path / f"outcome-{rank}.json").read_text()) for rank in range(3)]
    assert all(outcome["record"] == sharded_verify_ranks.RECORD for outcome in outcomes)
    hashed = [name for outcome in outcomes for name in outcome["hashed"]]
    assert sorted(hashed) == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"]  # each once
    assert outcomes[0]["hashed"] == [".metadata", sharded_verify_ranks.DAMAGED]  # rank 0's share: it alone reads it
    assert {outcome["damaged"] for outcome in outcomes} == {
        f"{sharded_verify_ranks.DAMAGED} does not match its checksum: truncated or corrupt"}
    assert {outcome["no manifest"] for outcome in outcomes} == {"no manifest.json: the write did not finish"}


def test_a_checkpoint_this_process_verified_is_not_hashed_again_until_its_manifest_changes(tmp_path, monkeypatch):
    path = write(tmp_path, 1)
    hashed = []
    digest = sharded.file_digest
    monkeypatch.setattr(sharded, "file_digest", lambda file: hashed.append(file.name) or digest(file))
    record = sharded.verify(path)
    assert sorted(hashed) == [".metadata", "__0_0.distcp"]
    assert sharded.verify(path) == record and len(hashed) == 2  # the QA workload's second check: nothing read
    again = TrainingState(Position(1, 0), steps_per_epoch=10, world_size=1, strategy="again").to_record()
    write(tmp_path, 1, record=again)  # the same position written again: another manifest
    hashed.clear()
    assert sharded.verify(path) == again and sorted(hashed) == [".metadata", "__0_0.distcp"]


@pytest.mark.parametrize("manifest, reason", [
    ({"format": sharded.FORMAT, "files": [".metadata"], "meta": {}}, "not an indexed-trainer"),
    ({"format": sharded.FORMAT, "files": {".metadata": "0" * 64}}, "not an indexed-trainer"),
    ({"format": sharded.FORMAT, "files": {".metadata": "0" * 64, "../x": "0" * 64}, "meta": {}}, "outside its directory"),
    ({"format": sharded.FORMAT, "files": {".metadata": 3}, "meta": {}}, "without a digest"),
])
def test_a_manifest_of_another_shape_is_refused_before_any_file_is_read(tmp_path, manifest, reason):
    path = write(tmp_path, 1)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(layout.CorruptCheckpoint, match=reason):
        sharded.verify(path)


def test_a_position_written_again_in_the_other_format_replaces_the_checkpoint_whole(tmp_path):
    """The transformer workloads name both formats alike (step-N.ckpt): a run under ddp that goes back past a damaged
    fsdp checkpoint writes a file where the directory was, and the other way round; nothing of the old one stays."""
    path = tmp_path / "step-00000010.ckpt"
    sharded.write_shards({"weight": torch.ones(4)}, {"step": 10}, path, rank=0)
    single_file.write_payload(path, {"step": 10, "weight": torch.zeros(4)})
    assert path.is_file() and single_file.read_payload(path)["step"] == 10
    sharded.write_shards({"weight": torch.ones(4)}, {"step": 10, "again": True}, path, rank=0)
    assert path.is_dir() and sharded.verify(path) == {"step": 10, "again": True}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left beside it
