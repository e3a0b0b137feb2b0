"""The trainer's one door to checkpoints: save, load the newest valid, restore, prune, clean, and when to save.

The strategy decides the format (``shards_parameters``: each rank writes its shards, else rank 0 writes one
file); reading takes whichever format a checkpoint was written in, so a run resumes across strategies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from worker import hooks
from worker.checkpoints import layout, sharded, single_file
from worker.checkpoints.found import Checkpoint
from worker.checkpoints.layout import CorruptCheckpoint
from worker.checkpoints.state import TrainingState

if TYPE_CHECKING:
    from worker.strategies.base import Strategy

FORMATS: tuple[ModuleType, ...] = (single_file, sharded)  # each: SUFFIX, EVERY_RANK_WRITES, write, read, restore


def format_of(path: Path) -> ModuleType:
    return next(module for module in FORMATS if path.name.endswith(module.SUFFIX))


def load_newest(directory: Path, log: Callable[[str], None] = print) -> Checkpoint | None:
    """The newest checkpoint that verifies, of either format, or None; each one skipped is logged with its reason."""
    for _, path in layout.list_checkpoints(directory):
        try:
            return format_of(path).read(path)
        except (CorruptCheckpoint, OSError, RuntimeError, EOFError, KeyError, TypeError) as exc:
            log(f"skipping checkpoint {path.name}: {exc}")
    return None


class CheckpointManager:
    def __init__(self, directory: Path, *, keep: int, every: int, epochs: int, rank: int, sharded_format: bool,
                 log: Callable[[str], None]):
        self.directory, self.keep, self.every, self.epochs, self.rank = directory, keep, every, epochs, rank
        self.format = sharded if sharded_format else single_file
        self.log = log

    def due(self, epochs_done: int, stopping: bool) -> bool:
        """At the end of an epoch: save when stopping, after the last epoch, and every CHECKPOINT_EVERY epochs."""
        return stopping or epochs_done == self.epochs or bool(self.every and epochs_done % self.every == 0)

    def save(self, state: TrainingState, strategy: Strategy) -> None:
        """Every rank calls this; the ranks the format needs write (rank 0 publishes and prunes)."""
        if not (self.rank == 0 or self.format.EVERY_RANK_WRITES):
            return
        started = time.perf_counter()
        hooks.point("checkpoint")
        path = self.directory / state.position.filename(self.format.SUFFIX)
        self.format.write(strategy, state, path, self.rank)
        if self.rank == 0:
            layout.prune(self.directory, self.keep)
            self.log(f"checkpoint {path.name} written ({time.perf_counter() - started:.2f} s)")

    def load_newest(self) -> Checkpoint | None:
        return load_newest(self.directory, self.log)

    @staticmethod
    def restore(checkpoint: Checkpoint, strategy: Strategy) -> None:
        """Load the model, optimizer and gradient scaler state into ``strategy`` (every rank)."""
        format_of(checkpoint.path).restore(checkpoint, strategy)
        strategy.precision.load_state_dict(checkpoint.state.scaler)

    def remove_stale_temporaries(self) -> None:
        for stale in layout.remove_stale_temporaries(self.directory):
            self.log(f"removed {stale.name}, left by an interrupted checkpoint write")
