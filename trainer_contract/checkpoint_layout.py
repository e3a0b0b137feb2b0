"""Where checkpoints live and how they are named, listed, pruned and cleaned: the part both formats share.

``ckpt-e<epoch>-s<step>.<suffix>`` (``.pt``: one verified file, ``.dcp``: a directory of shards), newest first
by (epoch, step). A write goes to a ``TEMP_PREFIX`` name first, which nothing lists or reads and the next start
removes. Torch-free.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainer_contract.atomic import TEMP_PREFIX

_NAME = re.compile(r"^ckpt-e(\d{4,})-s(\d{6,})\.(pt|dcp)$")


class CorruptCheckpoint(Exception):
    """A checkpoint that does not verify: skipped in favour of the one before it, never loaded."""


@dataclass(frozen=True, order=True)
class Position:
    """Where training stands: ``epoch`` (0-based) and ``step`` batches done in it."""

    epoch: int
    step: int

    def filename(self, suffix: str = ".pt") -> str:
        return f"ckpt-e{self.epoch:04d}-s{self.step:06d}{suffix}"


def position_of(name: str) -> Position | None:
    """Where the checkpoint named ``name`` stands; None for a name that is not a checkpoint's."""
    match = _NAME.match(name)
    return Position(int(match.group(1)), int(match.group(2))) if match else None


def list_checkpoints(directory: Path) -> list[tuple[Position, Path]]:
    """Checkpoints in ``directory`` (files and sharded directories), newest first."""
    found = []
    if directory.is_dir():
        for path in directory.iterdir():
            position = position_of(path.name)
            if position is not None:
                found.append((position, path))
    return sorted(found, key=lambda item: item[0], reverse=True)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def prune(directory: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints, of either format."""
    for _, old in list_checkpoints(directory)[keep:]:
        remove(old)


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Temporary files and directories left by a crash in the middle of a write: never read, removed at start."""
    stale = sorted(directory.glob(f"{TEMP_PREFIX}*")) if directory.is_dir() else []
    for path in stale:
        remove(path)
    return stale
