"""The single-file format (the MNIST worker under allreduce and ddp, the finetune job, the QA job under ddp): rank 0
writes the whole state as one verified file.

A checkpoint file (MNIST's ``ckpt-e<epoch>-s<step>.pt``, a workload's ``step-N.ckpt``) is a magic line, the
SHA-256 of the payload, then the payload (torch.save of a state dict: MNIST's training state's record with
``model`` and ``optimizer`` beside it, or Lightning's checkpoint, or the finetune loop's), written atomically
(trainer_contract.atomic). Reading checks the magic and the hash before torch.load (weights_only), so a truncated,
zeroed or corrupt file raises CorruptCheckpoint instead of loading.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import torch

from trainer_contract.atomic import TEMP_PREFIX, atomic_write_with
from trainer_contract.checkpoint_layout import CorruptCheckpoint, publish
from trainer_runtime.checkpoints import safe_load
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.state import TrainingState

if TYPE_CHECKING:
    from trainer_runtime.strategies.base import Strategy

SUFFIX = ".pt"
EVERY_RANK_WRITES = False
MAGIC = b"indexed-trainer checkpoint v1\n"
DIGEST_LENGTH = 64  # SHA-256, in hex
TORCH_SAVE_ONLY = b"PK\x03\x04"  # torch.save's zip archive: a workload's checkpoint of an earlier version


def encode(payload_state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload_state, buffer)
    payload = buffer.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes, name: str = "in memory") -> dict[str, Any]:
    if not data.startswith(MAGIC):
        raise CorruptCheckpoint("not a checkpoint (bad header)" if data else "empty file")
    digest, _, payload = data[len(MAGIC):].partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CorruptCheckpoint(f"checksum mismatch ({len(payload)} payload bytes): truncated or corrupt")
    return safe_load.load(io.BytesIO(payload), name=name)


class _Hashing:
    """A write-only stream that hashes what passes through it to ``handle``: torch.save streams the payload to
    the file, never held whole in memory beside the state it serializes."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.digest = handle, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def write_payload(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` as one verified file at ``path`` (the bytes of ``encode``), whole or absent whatever moment a
    crash picks: the payload streams after a header whose digest is filled in once it is known."""
    def write(handle: BinaryIO) -> None:
        handle.write(MAGIC + b"0" * DIGEST_LENGTH + b"\n")
        hashing = _Hashing(handle)
        torch.save(payload, hashing)  # type: ignore[arg-type]  # torch's zip writer only calls write
        handle.seek(len(MAGIC))
        handle.write(hashing.digest.hexdigest().encode())
        handle.seek(0, io.SEEK_END)

    if not path.is_dir():
        atomic_write_with(path, write)
        return
    # the same position as a directory of shards (another strategy's, or a damaged one passed over): replaced whole
    written = path.parent / f"{TEMP_PREFIX}new-{path.name}"
    atomic_write_with(written, write)
    publish(written, path)


# The payload of the last read asked to keep it, for the one read of the same file that follows: a resume reads a
# checkpoint's record to decide, then loads the checkpoint, and the file (gigabytes, hashed) is read once. Keyed by
# the file's identity and modification time, so a file changed in between is read again.
_kept: tuple[tuple[Any, ...], dict[str, Any]] | None = None


def _identity(path: Path) -> tuple[Any, ...]:
    status = path.stat()
    return str(path.resolve()), status.st_ino, status.st_size, status.st_mtime_ns


def read_payload(path: Path, *, keep: bool = False) -> dict[str, Any]:
    """A verified file's payload; ``keep``: kept for the next read of the same, unchanged file, which takes it
    instead of reading the file again. The transformer workloads' checkpoints written before they came here are
    torch.save alone (a zip archive, no hash): still read, through the same allow-list, so a run resumes across
    the upgrade."""
    global _kept
    identity = _identity(path)
    if _kept is not None and _kept[0] == identity:
        payload, _kept = _kept[1], None
        return payload
    data = path.read_bytes()
    payload = safe_load.load(io.BytesIO(data), name=path.name) if data.startswith(TORCH_SAVE_ONLY) \
        else decode(data, path.name)
    _kept = (identity, payload) if keep else None
    return payload


def begin(strategy: Strategy, state: TrainingState, path: Path, rank: int,
          stage: Callable[[Any], Any] | None = None, group: Any = None) -> Callable[[], None]:
    """Rank 0 only (the others hold the same replica). What must happen while training waits: take the state
    (through ``stage``, a copy, when the write runs beside the training, which goes on changing the tensors in
    place); returns the write itself: serialise, hash, write atomically."""
    model_state, optimizer_state = strategy.full_state()
    payload = {**state.to_record(), "model": model_state, "optimizer": optimizer_state}
    if stage is not None:
        payload = stage(payload)
    return lambda: write_payload(path, payload)



def read(path: Path) -> Checkpoint:
    content = decode(path.read_bytes(), path.name)
    tensors = {"model": content.pop("model"), "optimizer": content.pop("optimizer")}
    return Checkpoint(path, TrainingState.from_record(content), tensors)


def restore(checkpoint: Checkpoint, strategy: Strategy) -> None:
    assert checkpoint.tensors is not None
    strategy.load_full(checkpoint.tensors["model"], checkpoint.tensors["optimizer"])
