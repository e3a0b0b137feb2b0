"""Checkpoint writes beside the training (CHECKPOINT_ASYNC=true), every workload's: the training waits only while
its state is copied into staging buffers (staging_buffers.py); the write (serialise, hash, fsync, publish) runs in
a daemon thread, its collectives on a gloo process group of its own so that they never interleave with the
training's. One write at a time, in order: the next save waits for the one in flight (and raises what it raised).
A process that exits on a failure does not wait for a write whose collectives may wait for a peer that is gone:
that write stays a temporary, removed at the next start, and the previous checkpoint stays the newest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_contract import hooks
from trainer_runtime.checkpoints.staging_buffers import StagingBuffers

if TYPE_CHECKING:
    from trainer_runtime.checkpoints.clock import CheckpointClock
    from trainer_runtime.checkpoints.store import CheckpointStore


def checkpoint_write(finish: Callable[[], Any] | None, path: Path, rank: int, store: CheckpointStore,
                     clock: CheckpointClock, started: float, waited: float | None) -> Callable[[], None]:
    """The write of checkpoint ``path`` once its state is taken (``started``: when its save began, by
    time.perf_counter; ``waited``: the training's wait, when the write runs beside it): the format's ``finish``
    (this rank's part), then on rank 0 its line (with its share of the hashing, where the format hashes by rank),
    the clock told how long it took, and the checkpoint published in ``store``; every workload's."""
    def write() -> None:
        hooks.point("checkpoint")
        hashed = finish() if finish is not None else None
        if rank == 0:
            took = time.perf_counter() - started
            clock.written(took)
            said = "".join([f", training waited {waited:.2f} s" if waited is not None else "",
                            f"; {hashed.said()}" if hashed is not None else ""])
            store.log(f"checkpoint {path.name} written ({took:.2f} s{said})")
            store.published(path)
        hooks.point("checkpoint-written")

    return write


class BackgroundWrite:
    """One checkpoint write in a daemon thread; ``result`` re-raises what the write raised."""

    def __init__(self, write: Callable[[], None]):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(write,), name="checkpoint-write", daemon=True)
        self.thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        try:
            write()
        except BaseException as exc:  # handed to the training thread by result()
            self.error = exc

    def result(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


class WritesBeside:
    def __init__(self, collective_timeout: float):
        self.collective_timeout = collective_timeout
        self.pending: BackgroundWrite | None = None
        self.group: Any = None  # made on the first sharded write
        self.staging = StagingBuffers()
        self.every_rank_writes = False  # the write in flight runs collectives (sharded): see close

    def write_group(self) -> Any:
        """The gloo group of the writes' own collectives. Every rank of a sharded format saves at the same points,
        so creating it at the first is collective."""
        if self.group is None:
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.collective_timeout))
        return self.group

    def start(self, write: Callable[[], None], every_rank_writes: bool) -> None:
        """``write`` beside the training; the previous write must be complete (``wait``)."""
        assert self.pending is None, "one checkpoint write at a time"
        self.every_rank_writes = every_rank_writes
        self.pending = BackgroundWrite(write)

    def wait(self) -> None:
        """The write in flight is complete (or raises what it raised)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def close(self, failed: bool, log: Callable[[str], None]) -> None:
        """At the end of the process: the write in flight completed, except after a failure when its collectives may
        wait for a peer that is gone."""
        if self.pending is None or (failed and self.every_rank_writes):
            return
        try:
            self.wait()
        except Exception as exc:  # the run's own outcome is what the process reports
            log(f"the last checkpoint write failed: {type(exc).__name__}: {exc}")
