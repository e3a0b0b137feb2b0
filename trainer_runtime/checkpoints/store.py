"""One run's checkpoints on the volume, whatever the workload: the room every writer and reader goes through.

A store knows the directory, the naming (trainer_contract.checkpoint_layout: MNIST's ``ckpt-e-s``, the transformer
workloads' ``step-N.ckpt``), how many to keep and the bucket's mirror (checkpoint.storage_uri, rank 0's). The
formats are the two of this package, model-agnostic (they take state dicts): a single verified file
(single_file.py) and a directory of every rank's shards with a manifest of digests (sharded.py). The MNIST
worker's CheckpointManager (async saves, its TrainingState) and the transformer workloads (Lightning's
CheckpointIO and strategy, the finetune loop) write through these formats and publish, find and clean through the
store every program's shell makes (trainer_runtime.run_shell), so a checkpoint of any workload is written, verified,
kept, mirrored and refused in one way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from trainer_contract import checkpoint_layout as layout
from trainer_contract.gang_rounds import note_progress
from trainer_runtime.checkpoints.safe_load import UnsafeCheckpoint
from trainer_runtime.goodput import goodput_account
from trainer_runtime.metrics import live

if TYPE_CHECKING:
    from trainer_runtime.checkpoints.bucket_shares import BucketShares
    from trainer_runtime.distenv import DistEnv
    from trainer_stager.checkpoint_mirror import CheckpointMirror

Found = TypeVar("Found")


def newest(directory: Path, naming: layout.Naming, read: Callable[[Path], Found],
           log: Callable[[str], None]) -> tuple[Path, Found] | None:
    """The newest checkpoint of ``naming`` in ``directory`` that ``read`` verifies, with what it read; each one
    passed over is logged with its reason. A refused one (safe_load's UnsafeCheckpoint: someone planted it) is
    never passed over for an older one: the refusal ends the start."""
    goodput_account().restore_began()  # a round restarted in place: its restore phase begins (rank 0)
    for _, path in layout.list_checkpoints(directory, naming):
        try:
            return path, read(path)
        except UnsafeCheckpoint:
            raise
        except Exception as error:  # a damaged checkpoint: torch's errors share no base class  # noqa: BLE001
            reason = str(error) if isinstance(error, layout.CorruptCheckpoint) else f"{type(error).__name__}: {error}"
            log(f"skipping checkpoint {path.name}: {reason}")
    return None


class CheckpointStore:
    def __init__(self, directory: Path, naming: layout.Naming, *, keep: int, log: Callable[[str], None],
                 mirror: CheckpointMirror | None = None, shares: BucketShares | None = None):
        self.directory, self.naming, self.keep, self.log, self.mirror = directory, naming, keep, log, mirror
        self.shares = shares  # every rank's, with checkpoint.storage_uri (bucket_shares.py)
        self.also_kept: frozenset[str] = frozenset()  # kept beside the newest: the best by a metric, by name

    def newest(self, read: Callable[[Path], Found]) -> tuple[Path, Found] | None:
        return newest(self.directory, self.naming, read, self.log)

    def published(self, path: Path, by_ranks: bool = False) -> None:
        """Rank 0's part once checkpoint ``path`` is whole on the volume: keep the newest ``keep`` there (and
        ``also_kept``), note it for the launchers (a round that published one made progress:
        trainer_contract.gang_rounds), show it in the live metrics (its step and time) and offer it to the mirror,
        which uploads it beside the training and removes from the bucket what the volume no longer keeps; unless
        every rank uploads its own part of it (``by_ranks``: bucket_shares.py)."""
        layout.prune(self.directory, self.keep, self.naming, self.also_kept)
        note_progress(path.name)
        live().checkpoint_written(path)
        if self.mirror is not None and not by_ranks:
            self.mirror.offer(path)

    def restore_from_bucket(self, resume: bool, env: DistEnv) -> None:
        """Every rank, at a start (with RESUME) before it takes up the volume: where the volume holds no checkpoint
        and the run has a bucket, its newest checkpoint fetched, each rank a share (bucket_shares.py)."""
        if resume and self.shares is not None:
            self.shares.restore(self.directory, self.naming, env)

    def remove_stale_temporaries(self) -> None:
        """What a write cut short left behind (checkpoints themselves are whole or absent): removed at a start."""
        for stale in layout.remove_stale_temporaries(self.directory):
            self.log(f"removed {stale.name}, left by an interrupted checkpoint write")
