"""Where checkpoints live and how they are named, listed, pruned and cleaned: the part every format and every
built-in program shares, on the volume and in the bucket (trainer_stager's checkpoint_bucket lists by the same rule).

Three namings, one per kind of program: the MNIST worker's ``ckpt-e<epoch>-s<step>.<suffix>`` (``.pt``: one verified
file, ``.dcp``: a directory of shards), and the transformer workloads' ``step-<optimizer step>.ckpt`` (a file, or
under FSDP a directory of every rank's shards), newest first by the numbers in the name; and a user's program's
(OWN_PROGRAM, the convention its checkpoint directory follows: CHECKPOINT_DIR_VARIABLE), newest first by the name's
own sort order. Each program's config names its own (``checkpoint_naming``). A write goes to a ``TEMP_PREFIX`` name
first, which nothing lists or reads and the next start removes. Torch-free.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainer_contract.atomic import TEMP_PREFIX, fsync_directory


class CorruptCheckpoint(Exception):
    """A checkpoint that does not verify: skipped in favour of the one before it, never loaded."""


@dataclass(frozen=True)
class Naming:
    """How one kind of program names its checkpoints: ``pattern``'s groups are numbers, and a checkpoint's place
    among the others (the newest largest) is theirs in turn, or (``by_name``) the name's own sort order. A name of
    another naming is no checkpoint of its."""

    pattern: re.Pattern[str]
    by_name: bool = False  # the name's own sort order is the checkpoint's place (the pattern has no groups)

    def order(self, name: str) -> tuple[int, ...] | None:
        """Where the checkpoint named ``name`` stands; None for a name that is not one of this naming's."""
        match = self.pattern.match(name)
        if not match:
            return None
        if self.by_name:  # its characters' code points in turn: Python's sorted() of the names, the C locale's ls
            return tuple(ord(character) for character in name)
        return tuple(int(number) for number in match.groups())


# The MNIST worker's: by (epoch, step in it).
EPOCH_STEP = Naming(re.compile(r"^ckpt-e(\d{4,})-s(\d{6,})\.(?:pt|dcp)$"))
# The transformer workloads' (worker.qa, worker.finetune): by the optimizer step.
OPTIMIZER_STEP = Naming(re.compile(r"^step-(\d{8,})\.ckpt$"))
# A user's program's (entrypoint.script or .module, with checkpoint.storage_uri and the indexed-trainer launcher):
# every entry of CHECKPOINT_DIR_VARIABLE's directory, a file or a directory, is one whole checkpoint, written under
# a temporary name and renamed into place; the newest sorts last (zero-padded step numbers: step-00000120.pt).
# Names starting with "." (TEMP_PREFIX's among them) are a write in progress or not the program's: never a checkpoint.
OWN_PROGRAM = Naming(re.compile(rf"^(?!\.|{re.escape(TEMP_PREFIX)}).", re.DOTALL), by_name=True)
# Where that directory is, on the shared volume (the generator renders it; the launcher on node 0 mirrors it to
# checkpoint.storage_uri, the stager restores into it).
CHECKPOINT_DIR_VARIABLE = "INDEXED_TRAINER_CHECKPOINT_DIR"


def step_checkpoint_name(step: int) -> str:
    """The transformer workloads' name of the checkpoint taken after optimizer step ``step`` (OPTIMIZER_STEP)."""
    return f"step-{step:08d}.ckpt"


@dataclass(frozen=True, order=True)
class Position:
    """Where training stands: ``epoch`` (0-based) and ``step`` batches done in it."""

    epoch: int
    step: int

    def filename(self, suffix: str = ".pt") -> str:
        """The MNIST worker's name of this position's checkpoint (EPOCH_STEP)."""
        return f"ckpt-e{self.epoch:04d}-s{self.step:06d}{suffix}"


def position_of(name: str) -> Position | None:
    """Where the MNIST worker's checkpoint named ``name`` stands; None for a name that is not one."""
    order = EPOCH_STEP.order(name)
    return Position(*order) if order else None


def list_checkpoints(directory: Path, naming: Naming = EPOCH_STEP) -> list[tuple[tuple[int, ...], Path]]:
    """The checkpoints of ``naming`` in ``directory`` (files and sharded directories), newest first."""
    found = []
    if directory.is_dir():
        for path in directory.iterdir():
            order = naming.order(path.name)
            if order is not None:
                found.append((order, path))
    return sorted(found, key=lambda item: item[0], reverse=True)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def publish(written: Path, final: Path) -> None:
    """A whole checkpoint ``written`` under a temporary name (a file or a directory) renamed to ``final``. What is
    there already is the same position written again (a stop right after a checkpoint, a run gone back past a damaged
    one), maybe in the other format (another strategy's): set aside under a temporary name, then removed, so that a
    crash in between leaves only temporaries, which the next start removes."""
    if final.exists():
        old = final.parent / f"{TEMP_PREFIX}old-{final.name}"
        remove(old)
        os.replace(final, old)
        os.replace(written, final)
        remove(old)
    else:
        os.replace(written, final)
    fsync_directory(final.parent)


def prune(directory: Path, keep: int, naming: Naming = EPOCH_STEP, also: frozenset[str] = frozenset()) -> None:
    """Keep the newest ``keep`` checkpoints of ``naming``, of either format, and those named in ``also`` (the best by
    a metric); with MNIST's naming also the newest at an epoch's start, the only kind another world size resumes
    from (time-based checkpoints fall mid-epoch)."""
    found = list_checkpoints(directory, naming)
    kept = {path for _, path in found[:keep]} | {path for _, path in found if path.name in also}
    if naming is EPOCH_STEP:
        kept |= set([path for order, path in found if order[1] == 0][:1])
    for _, old in found:
        if old not in kept:
            remove(old)


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Temporary files and directories left by a crash in the middle of a write: never read, removed at start."""
    stale = sorted(directory.glob(f"{TEMP_PREFIX}*")) if directory.is_dir() else []
    for path in stale:
        remove(path)
    return stale
