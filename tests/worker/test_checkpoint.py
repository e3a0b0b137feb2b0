"""Checkpoint files: atomic, verified before loading, rotated; damaged ones are skipped, never loaded."""

import torch

from worker import atomic, checkpoint
from worker.checkpoint import Position


def state(value: float) -> dict:
    return {"weights": torch.full((4,), value), "position": {"epoch": int(value), "step": 0}}


def test_save_then_load_the_newest(tmp_path):
    for epoch in (1, 2, 3):
        checkpoint.save(state(epoch), tmp_path, Position(epoch, 0), keep=5)
    loaded, path = checkpoint.load_newest(tmp_path)
    assert path.name == "ckpt-e0003-s000000.pt"
    assert torch.equal(loaded["weights"], torch.full((4,), 3.0))


def test_only_the_last_few_are_kept(tmp_path):
    for epoch in range(1, 6):
        checkpoint.save(state(epoch), tmp_path, Position(epoch, 0), keep=2)
    assert [p.name for _, p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-e0005-s000000.pt",
                                                                         "ckpt-e0004-s000000.pt"]


def test_mid_epoch_positions_order_after_their_epoch_start(tmp_path):
    checkpoint.save(state(2), tmp_path, Position(2, 0), keep=5)
    checkpoint.save(state(2.5), tmp_path, Position(2, 17), keep=5)
    assert checkpoint.load_newest(tmp_path)[1].name == "ckpt-e0002-s000017.pt"


def test_truncated_zeroed_and_garbage_files_are_skipped(tmp_path):
    checkpoint.save(state(1), tmp_path, Position(1, 0), keep=5)
    good = checkpoint.encode(state(9))
    damaged = {
        Position(2, 0): good[: len(good) // 2],  # truncated
        Position(3, 0): b"",  # zero bytes
        Position(4, 0): b"\0" * len(good),  # zeroed
        Position(5, 0): good[:-10] + b"x" * 10,  # corrupt tail, same length
    }
    for position, data in damaged.items():
        (tmp_path / position.filename()).write_bytes(data)
    messages = []
    loaded, path = checkpoint.load_newest(tmp_path, log=messages.append)
    assert path.name == "ckpt-e0001-s000000.pt" and torch.equal(loaded["weights"], torch.full((4,), 1.0))
    assert len(messages) == 4 and all(m.startswith("skipping checkpoint") for m in messages)


def test_a_crash_mid_write_leaves_only_a_temporary_that_is_never_read(tmp_path, monkeypatch):
    checkpoint.save(state(1), tmp_path, Position(1, 0), keep=5)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", crash)
    try:
        checkpoint.save(state(2), tmp_path, Position(2, 0), keep=5)
    except OSError:
        pass
    monkeypatch.undo()
    assert [p.name for _, p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-e0001-s000000.pt"]
    (tmp_path / ".tmp-ckpt-e0002-s000000.pt.abc").write_bytes(b"half")  # as a SIGKILL mid-write leaves it
    assert [p.name for p in checkpoint.remove_stale_temporaries(tmp_path)] == [".tmp-ckpt-e0002-s000000.pt.abc"]
    assert checkpoint.load_newest(tmp_path)[1].name == "ckpt-e0001-s000000.pt"


def test_no_checkpoint_means_none(tmp_path):
    assert checkpoint.load_newest(tmp_path / "missing") is None
