"""Checkpoint writes beside the training (CHECKPOINT_ASYNC=true), every workload's: the training waits only while
its state is copied into staging buffers (staging_buffers.py); the write (serialise, hash, fsync, publish) runs in
a daemon thread, its collectives on a gloo process group of their own (side_group.py) so that they never
interleave with the training's. One write at a time, in order: the next save waits for the one in flight (and raises what it raised).
A process that exits on a failure does not wait for a write whose collectives may wait for a peer that is gone:
that write stays a temporary, removed at the next start, and the previous checkpoint stays the newest. With
checkpoint.storage_uri, a sharded write's thread then has every rank upload its own shards (bucket_shares.py),
which the next save waits for too, and a stop's does not (its checkpoint is written beside that upload).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_contract import hooks
from trainer_runtime.checkpoints import side_group
from trainer_runtime.checkpoints.sharded import Hashed
from trainer_runtime.checkpoints.staging_buffers import StagingBuffers

if TYPE_CHECKING:
    from trainer_runtime.checkpoints.clock import CheckpointClock
    from trainer_runtime.checkpoints.store import CheckpointStore


class CheckpointWrite:
    """The write of checkpoint ``path`` once its state is taken (``started``: when its save began, by
    time.perf_counter; ``waited``: the training's wait, when the write runs beside it): the format's ``finish``
    (this rank's part), then on rank 0 its line (with its share of the hashing, where the format hashes by rank),
    the clock told how long it took, and the checkpoint published in ``store``; every workload's. With
    ``by_ranks`` (a sharded format, checkpoint.storage_uri), ``upload`` then has every rank upload its own shards
    (bucket_shares.py) rather than rank 0's mirror all of them."""

    def __init__(self, finish: Callable[[], Any] | None, path: Path, rank: int, store: CheckpointStore,
                 clock: CheckpointClock, started: float, waited: float | None, by_ranks: bool = False):
        self.finish, self.path, self.rank, self.store, self.clock = finish, path, rank, store, clock
        self.started, self.waited = started, waited
        self.by_ranks = by_ranks and store.shares is not None
        self.mine: dict[str, str] | None = None  # the files this rank wrote, with their SHA-256s

    def __call__(self) -> None:
        hooks.point("checkpoint")
        hashed = self.finish() if self.finish is not None else None
        if isinstance(hashed, Hashed):
            self.mine = hashed.mine
        if self.rank == 0:
            took = time.perf_counter() - self.started
            self.clock.written(took)
            said = "".join([f", training waited {self.waited:.2f} s" if self.waited is not None else "",
                            f"; {hashed.said()}" if hashed is not None else ""])
            self.store.log(f"checkpoint {self.path.name} written ({took:.2f} s{said})")
            self.store.published(self.path, by_ranks=self.by_ranks)
        hooks.point("checkpoint-written")

    def upload(self) -> None:
        """Every rank (a collective), once the checkpoint is published: its part of the bucket's copy."""
        if self.by_ranks and self.store.shares is not None and self.mine is not None:
            self.store.shares.upload(self.path, self.mine)


class BackgroundWrite:
    """One checkpoint write in a daemon thread, then its upload by every rank; ``result`` re-raises what either
    raised, once the write is done (``whole``: the upload too)."""

    def __init__(self, write: CheckpointWrite):
        self.error: BaseException | None = None
        self.written = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(write,), name="checkpoint-write", daemon=True)
        self.thread.start()

    def _run(self, write: CheckpointWrite) -> None:
        try:
            write()
            self.written.set()
            write.upload()
        except BaseException as exc:  # handed to the training thread by result()
            self.error = exc
        finally:
            self.written.set()

    def result(self, whole: bool = True) -> None:
        if whole:
            self.thread.join()
        else:
            self.written.wait()
        if self.error is not None:
            raise self.error


class WritesBeside:
    def __init__(self) -> None:
        self.pending: BackgroundWrite | None = None
        self.staging = StagingBuffers()
        self.every_rank_writes = False  # the write in flight runs collectives (sharded): see close
        self.group: Any = None  # without a bucket: made on the first sharded write

    def write_group(self, store: CheckpointStore) -> Any:
        """The group of the writes' own collectives (side_group.py): the bucket shares' where the run has a bucket,
        else this one's. Every rank of a sharded format saves at the same points, so making it at the first is
        collective."""
        if store.shares is not None:
            return store.shares.group()
        if self.group is None:
            self.group = side_group.made()
        return self.group

    def start(self, write: CheckpointWrite, every_rank_writes: bool) -> None:
        """``write`` (then its upload) beside the training; the previous one must be complete (``wait``)."""
        assert self.pending is None, "one checkpoint write at a time"
        self.every_rank_writes = every_rank_writes
        self.pending = BackgroundWrite(write)

    def wait(self, whole: bool = True) -> None:
        """The write in flight is complete and, ``whole``, its upload too (or raises what they raised). A stop's
        checkpoint waits for the write alone: an upload in flight goes on beside its write."""
        if self.pending is None:
            return
        if not whole:
            self.pending.result(whole=False)
            return
        pending, self.pending = self.pending, None
        pending.result()

    def written(self, write: CheckpointWrite) -> None:
        """``write``, run by the training (a stop's, or CHECKPOINT_ASYNC=false): its upload by every rank, where it
        has one, once the one in flight is done (their collectives share a group: never two at once)."""
        write()
        if write.by_ranks:
            self.wait()
            write.upload()

    def close(self, failed: bool, log: Callable[[str], None]) -> None:
        """At the end of the process: the write in flight completed, except after a failure when its collectives may
        wait for a peer that is gone."""
        if self.pending is None or (failed and self.every_rank_writes):
            return
        try:
            self.wait()
        except Exception as exc:  # the run's own outcome is what the process reports
            log(f"the last checkpoint write failed: {type(exc).__name__}: {exc}")
