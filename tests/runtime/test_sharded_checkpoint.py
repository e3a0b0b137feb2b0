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
