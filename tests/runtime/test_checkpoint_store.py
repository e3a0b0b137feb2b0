"""One checkpoint store and two formats for every workload (trainer_runtime.checkpoints.store, single_file,
sharded): the transformer workloads' checkpoints (``step-N.ckpt``: the finetune loop's file, Lightning's file under
DDP, its shards under FSDP) are written, verified, found, pruned and offered to the mirror as the MNIST worker's
are; their records read back from either format, and the checkpoints earlier versions wrote still resume."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainer_contract import checkpoint_layout as layout  # noqa: E402
from trainer_contract.checkpoint_layout import CorruptCheckpoint  # noqa: E402
from trainer_runtime.checkpoints import safe_load, sharded, single_file  # noqa: E402
from trainer_runtime.checkpoints.store import CheckpointStore  # noqa: E402
from trainer_runtime.pretrained import checkpoint_record  # noqa: E402

RECORD = {"model_revision": "m", "tokenizer_revision": "t", "world_size": 2, "config": {"batch_size": 16}}


class Planted:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


class Offers:
    """Stands in for rank 0's CheckpointMirror (tests/stager/test_checkpoint_mirror.py runs the real one against
    an S3 server): what the store offered it, in order."""

    def __init__(self):
        self.offered: list[str] = []

    def offer(self, path: Path) -> None:
        self.offered.append(path.name)


def file_checkpoint(directory: Path, step: int, **extra) -> Path:
    path = directory / layout.step_checkpoint_name(step)
    single_file.write_payload(path, {"model": {"w": torch.full((3,), float(step))},
                                     checkpoint_record.RECORD_KEY: {**RECORD, "step": step}, **extra})
    return path


def shard_checkpoint(directory: Path, step: int) -> Path:
    path = directory / layout.step_checkpoint_name(step)
    sharded.write_shards({"state_dict": {"w": torch.full((3,), float(step))}}, {**RECORD, "step": step}, path,
                         rank=0, extra={"loops": {"fit_loop": {"step": step}}, "epoch": 1})
    return path


@pytest.mark.parametrize("payload", [{}, {"model": {"w": torch.arange(1000.0)}, "step": 3, "names": ["a", "b"]}])
def test_a_streamed_write_is_byte_for_byte_the_encoded_format(tmp_path, payload):
    single_file.write_payload(tmp_path / "c.ckpt", payload)
    data = (tmp_path / "c.ckpt").read_bytes()
    assert data == single_file.encode(payload)
    read = single_file.read_payload(tmp_path / "c.ckpt")
    assert read.keys() == payload.keys() and all(torch.equal(read["model"][k], v) for k, v in
                                                 payload.get("model", {}).items())


@pytest.mark.parametrize("damage, reason", [
    (lambda data: data[:-100], "checksum mismatch"),
    (lambda data: b"\0" * len(data), "bad header"),
    (lambda data: b"", "empty file"),
])
def test_a_damaged_file_raises_corrupt_checkpoint_never_loads(tmp_path, damage, reason):
    path = file_checkpoint(tmp_path, 4)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptCheckpoint, match=reason):
        single_file.read_payload(path)


def test_the_records_of_both_formats_and_of_the_earlier_layouts_read_back(tmp_path):
    assert checkpoint_record.read_record(file_checkpoint(tmp_path, 1)) == {**RECORD, "step": 1}
    shards = shard_checkpoint(tmp_path, 2)
    assert sorted(p.name for p in shards.iterdir()) == [".metadata", "__0_0.distcp", sharded.EXTRA, sharded.MANIFEST]
    assert checkpoint_record.read_record(shards) == {**RECORD, "step": 2}
    assert sharded.read_extra(shards) == {"loops": {"fit_loop": {"step": 2}}, "epoch": 1}
    # what the workloads wrote before: torch.save alone, and Lightning's directory with its meta.pt
    torch.save({"model": {}, checkpoint_record.RECORD_KEY: {**RECORD, "step": 3}}, tmp_path / "step-00000003.ckpt")
    assert checkpoint_record.read_record(tmp_path / "step-00000003.ckpt") == {**RECORD, "step": 3}
    legacy = tmp_path / "step-00000004.ckpt"
    legacy.mkdir()
    torch.save({checkpoint_record.RECORD_KEY: {**RECORD, "step": 4}}, legacy / checkpoint_record.LEGACY_SHARDED_RECORD_FILE)
    assert checkpoint_record.read_record(legacy) == {**RECORD, "step": 4}


def test_a_changed_extra_file_fails_the_manifest(tmp_path):
    shards = shard_checkpoint(tmp_path, 2)
    torch.save({"loops": {}}, shards / sharded.EXTRA)
    with pytest.raises(CorruptCheckpoint, match=f"{sharded.EXTRA} does not match its checksum"):
        checkpoint_record.read_record(shards)


def test_the_store_finds_the_newest_that_verifies_and_says_what_it_passed_over(tmp_path):
    file_checkpoint(tmp_path, 8)
    damaged = shard_checkpoint(tmp_path, 16)
    (damaged / "__0_0.distcp").write_bytes(b"x")
    truncated = file_checkpoint(tmp_path, 24)
    truncated.write_bytes(truncated.read_bytes()[:50])
    (tmp_path / "ckpt-e0009-s000000.pt").write_bytes(b"another naming's: not this store's")
    lines: list[str] = []
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=3, log=lines.append)
    path, record = store.newest(checkpoint_record.read_record)
    assert path.name == "step-00000008.ckpt" and record["step"] == 8
    assert lines == ["skipping checkpoint step-00000024.ckpt: checksum mismatch (0 payload bytes): truncated or "
                     "corrupt", "skipping checkpoint step-00000016.ckpt: __0_0.distcp does not match its checksum: "
                     "truncated or corrupt"]


def test_a_planted_checkpoint_ends_the_start_rather_than_being_passed_over(tmp_path):
    file_checkpoint(tmp_path, 8)
    marker = tmp_path / "ran"
    single_file.write_payload(tmp_path / "step-00000009.ckpt", {"evil": Planted(marker)})  # hash and all: planted
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=3, log=print)
    with pytest.raises(safe_load.UnsafeCheckpoint, match="step-00000009.ckpt was refused"):
        store.newest(checkpoint_record.read_record)
    assert not marker.exists()


def test_publishing_keeps_the_newest_and_offers_each_to_the_mirror(tmp_path):
    offers = Offers()
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=2, log=print, mirror=offers)
    for step in (8, 16, 24):
        store.published(shard_checkpoint(tmp_path, step) if step == 16 else file_checkpoint(tmp_path, step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000016.ckpt", "step-00000024.ckpt"]
    assert offers.offered == ["step-00000008.ckpt", "step-00000016.ckpt", "step-00000024.ckpt"]


def test_a_write_cut_short_leaves_a_temporary_the_next_start_removes(tmp_path):
    file_checkpoint(tmp_path, 8)
    (tmp_path / ".tmp-step-00000016.ckpt").mkdir()
    (tmp_path / ".tmp-step-00000016.ckpt" / "__0_0.distcp").write_bytes(b"half")
    lines: list[str] = []
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=2, log=lines.append)
    store.remove_stale_temporaries()
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000008.ckpt"]
    assert lines == ["removed .tmp-step-00000016.ckpt, left by an interrupted checkpoint write"]


def test_a_resume_reads_and_hashes_the_checkpoint_file_once(tmp_path, monkeypatch):
    """The record decides the resume, then the same payload is loaded: one read of the file, not two; a file
    changed in between is read again, and a read not asked to keep keeps nothing."""
    path = file_checkpoint(tmp_path, 5)
    reads: list[str] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or real(self))
    store = CheckpointStore(tmp_path, layout.OPTIMIZER_STEP, keep=3, log=lambda message: None)
    found, record = store.newest(checkpoint_record.read_record)
    assert record["step"] == 5
    payload = single_file.read_payload(found)
    assert torch.equal(payload["model"]["w"], torch.full((3,), 5.0)) and reads == [path.name]
    single_file.read_payload(found)  # taken already: read again
    assert reads == [path.name] * 2
    checkpoint_record.read_record(path)
    file_checkpoint(tmp_path, 5, note="rewritten")  # the same name, another file
    assert single_file.read_payload(path)["note"] == "rewritten" and reads == [path.name] * 4
