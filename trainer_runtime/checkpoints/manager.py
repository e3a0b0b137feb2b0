"""The trainer's one door to checkpoints: save, load the newest valid, restore, prune, clean, and when to save.

The strategy decides the format (``shards_parameters``: each rank writes its shards, else rank 0 writes one
file); reading takes whichever format a checkpoint was written in, so a run resumes across strategies.

Asynchronous saving (CHECKPOINT_ASYNC=true, beside.py): training waits only while the state is copied; the write
(serialise, hash, fsync, rename, prune) runs in a thread beside it. The guarantees stay: each file is written atomically and
verified on reading, so the newest valid checkpoint wins whatever moment a crash picks; one write at a time, in
order (a save waits for the previous one); a stop's checkpoint (SIGTERM) is written before save returns; the
model is saved only after the last checkpoint is on disk (``wait``).

Publishing (keeping the newest few, offering each to the bucket's mirror: checkpoint.storage_uri), finding the
newest that verifies and cleaning up are the run's store's (store.py), as for every workload's checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from trainer_contract import checkpoint_layout as layout
from trainer_runtime.checkpoints import sharded, single_file, store
from trainer_runtime.checkpoints.beside import CheckpointWrite, WritesBeside
from trainer_runtime.checkpoints.clock import CheckpointClock
from trainer_runtime.checkpoints.found import Checkpoint
from trainer_runtime.checkpoints.state import TrainingState

if TYPE_CHECKING:
    from trainer_runtime.strategies.base import Strategy

FORMATS: tuple[ModuleType, ...] = (single_file, sharded)  # each: SUFFIX, EVERY_RANK_WRITES, begin, read, restore


def format_of(path: Path) -> ModuleType:
    return next(module for module in FORMATS if path.name.endswith(module.SUFFIX))


def read(path: Path) -> Checkpoint:
    """A checkpoint of either format, verified (CorruptCheckpoint otherwise)."""
    return format_of(path).read(path)


def load_newest(directory: Path, log: Callable[[str], None] = print) -> Checkpoint | None:
    """The newest checkpoint that verifies, of either format, or None; each one skipped is logged with its reason."""
    found = store.newest(directory, layout.EPOCH_STEP, read, log)
    return found[1] if found else None


class CheckpointManager:
    def __init__(self, run_store: store.CheckpointStore, *, every: int, epochs: int, rank: int, sharded_format: bool,
                 asynchronous: bool = False, every_seconds: float | str = 0.0,
                 nodes: int = 1):
        """``run_store``: the run's (trainer_runtime.run_shell), its mirror closed by the shell."""
        self.store, self.directory, self.log = run_store, run_store.directory, run_store.log
        self.every, self.epochs, self.rank = every, epochs, rank
        self.clock = CheckpointClock(every_seconds, votes=rank == 0, nodes=nodes, log=self.log)
        self.format = sharded if sharded_format else single_file
        self.asynchronous = asynchronous
        self.beside = WritesBeside()

    def due(self, epochs_done: int, stopping: bool, time_agreed: bool = False) -> bool:
        """At the end of an epoch: save when stopping, after the last epoch, every CHECKPOINT_EVERY epochs, and
        when the gang agreed that CHECKPOINT_EVERY_SECONDS have passed (``time_agreed``: ``clock.due()``'s votes)."""
        return (stopping or time_agreed or epochs_done == self.epochs
                or bool(self.every and epochs_done % self.every == 0))

    def save(self, state: TrainingState, strategy: Strategy, *, wait: bool = False) -> None:
        """Every rank calls this; the ranks the format needs write (rank 0 publishes and prunes). Returns once the
        state is taken (CHECKPOINT_ASYNC), or written (else, and with ``wait``)."""
        if not (self.rank == 0 or self.format.EVERY_RANK_WRITES):
            return
        self.beside.wait(whole=not wait)  # one write at a time, in order; a failed one raises here
        with self.clock.saving():  # the interval starts again once the training goes on
            self._save(state, strategy, wait)

    def _save(self, state: TrainingState, strategy: Strategy, wait: bool) -> None:
        started = time.perf_counter()
        path = self.directory / state.position.filename(self.format.SUFFIX)
        beside = self.asynchronous and not wait
        every_rank = self.format.EVERY_RANK_WRITES
        finish = self.format.begin(strategy, state, path, self.rank,
                                   stage=self.beside.staging.copy if beside else None,
                                   group=self.beside.write_group(self.store) if beside and every_rank else None)
        waited = time.perf_counter() - started if beside else None
        write = CheckpointWrite(finish, path, self.rank, self.store, self.clock, started, waited,
                                by_ranks=every_rank and (beside or wait))
        if beside:
            self.beside.start(write, every_rank)
        else:
            self.beside.written(write)

    def wait(self) -> None:
        """The write in flight is complete (or raises what it raised)."""
        self.beside.wait()

    def close(self, failed: bool) -> None:
        """At the end of the process, before the shell waits for the mirror's upload of the newest (beside.py: a
        sharded write is not waited for after a failure)."""
        self.beside.close(failed, self.log)

    def load_newest(self) -> Checkpoint | None:
        return load_newest(self.directory, self.log)

    @staticmethod
    def restore(checkpoint: Checkpoint, strategy: Strategy) -> None:
        """Load the model, optimizer and gradient scaler state into ``strategy`` (every rank)."""
        format_of(checkpoint.path).restore(checkpoint, strategy)
        strategy.precision.load_state_dict(checkpoint.state.scaler)

