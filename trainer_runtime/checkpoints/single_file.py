"""The single-file format (STRATEGY=allreduce, ddp): rank 0 writes the whole state as one verified file.

``ckpt-e<epoch>-s<step>.pt`` is a magic line, the SHA-256 of the payload, then the payload (torch.save of the
training state's record with ``model`` and ``optimizer`` beside it), written atomically (worker.atomic). Reading
checks the magic and the hash before torch.load (weights_only), so a truncated, zeroed or corrupt file raises
CorruptCheckpoint instead of loading.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer_contract.atomic import atomic_write
from trainer_contract.checkpoint_layout import CorruptCheckpoint
from trainer_runtime.checkpoints import safe_load
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.state import TrainingState

if TYPE_CHECKING:
    from trainer_runtime.strategies.base import Strategy

SUFFIX = ".pt"
EVERY_RANK_WRITES = False
MAGIC = b"indexed-trainer checkpoint v1\n"


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


def begin(strategy: Strategy, state: TrainingState, path: Path, rank: int,
          stage: Callable[[Any], Any] | None = None, group: Any = None) -> Callable[[], None]:
    """Rank 0 only (the others hold the same replica). What must happen while training waits: take the state
    (through ``stage``, a copy, when the write runs beside the training, which goes on changing the tensors in
    place); returns the write itself: serialise, hash, write atomically."""
    model_state, optimizer_state = strategy.full_state()
    payload = {**state.to_record(), "model": model_state, "optimizer": optimizer_state}
    if stage is not None:
        payload = stage(payload)
    return lambda: atomic_write(path, encode(payload))



def read(path: Path) -> Checkpoint:
    content = decode(path.read_bytes(), path.name)
    tensors = {"model": content.pop("model"), "optimizer": content.pop("optimizer")}
    return Checkpoint(path, TrainingState.from_record(content), tensors)


def restore(checkpoint: Checkpoint, strategy: Strategy) -> None:
    assert checkpoint.tensors is not None
    strategy.load_full(checkpoint.tensors["model"], checkpoint.tensors["optimizer"])
