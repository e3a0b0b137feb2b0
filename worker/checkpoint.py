"""Checkpoints on the shared volume: written atomically, verified before loading, the last few kept.

A file is ``ckpt-e<epoch>-s<step>.pt``: a magic line, the SHA-256 of the payload, then the payload
(torch.save of the state). It is written to a temporary name, flushed, fsynced and renamed, so a crash
leaves the previous checkpoints intact and at most a temporary file, which is never read. Loading checks
the magic and the hash before torch.load (weights_only), so a truncated, zeroed or corrupt file is skipped
in favour of the one before it, never loaded. Under STRATEGY=fsdp a checkpoint is a directory of shards instead
(worker.sharded_checkpoint); both kinds are listed, verified and pruned here, newest first.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.atomic import TEMP_PREFIX, atomic_write

MAGIC = b"indexed-trainer checkpoint v1\n"
_NAME = re.compile(r"^ckpt-e(\d{4,})-s(\d{6,})\.(pt|dcp)$")


class CorruptCheckpoint(Exception):
    pass


@dataclass(frozen=True)
class Position:
    """Where training stands: ``epoch`` (0-based) and ``step`` batches done in it."""

    epoch: int
    step: int

    def filename(self, suffix: str = ".pt") -> str:
        return f"ckpt-e{self.epoch:04d}-s{self.step:06d}{suffix}"


def encode(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes) -> dict:
    if not data.startswith(MAGIC):
        raise CorruptCheckpoint("not a checkpoint (bad header)" if data else "empty file")
    digest, _, payload = data[len(MAGIC):].partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CorruptCheckpoint(f"checksum mismatch ({len(payload)} payload bytes): truncated or corrupt")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def list_checkpoints(directory: Path) -> list[tuple[Position, Path]]:
    """Checkpoints in ``directory`` (files and sharded directories), newest first."""
    found = []
    if directory.is_dir():
        for path in directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((Position(int(match.group(1)), int(match.group(2))), path))
    return sorted(found, key=lambda item: (item[0].epoch, item[0].step), reverse=True)


def save(state: dict, directory: Path, position: Position, keep: int) -> Path:
    path = directory / position.filename()
    atomic_write(path, encode(state))
    prune(directory, keep)
    return path


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def prune(directory: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints, of either kind."""
    for _, old in list_checkpoints(directory)[keep:]:
        _remove(old)


def load_newest(directory: Path, log=print) -> tuple[dict, Path] | None:
    """The newest checkpoint that verifies, or None; every one skipped is logged with its reason. A sharded
    checkpoint's state is its manifest's meta plus ``"sharded": path`` (each rank loads its part from there)."""
    from worker import sharded_checkpoint

    for _, path in list_checkpoints(directory):
        try:
            if path.is_dir():
                return {**sharded_checkpoint.verify(path), "sharded": str(path)}, path
            return decode(path.read_bytes()), path
        except (CorruptCheckpoint, OSError, RuntimeError, EOFError) as exc:
            log(f"skipping checkpoint {path.name}: {exc}")
    return None


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Temporary files and directories left by a crash in the middle of a write: never read, removed at start."""
    stale = [path for path in directory.glob(f"{TEMP_PREFIX}*")] if directory.is_dir() else []
    for path in stale:
        _remove(path)
    return stale
