"""Rank 0's mirror of the volume's checkpoints in a bucket (checkpoint.storage_uri), beside the training: the MNIST
worker's (through its checkpoint manager) and the transformer workloads', each program's by its own naming; and,
through node 0's launcher (trainer_launcher/checkpoint_watch.py), those a user's program writes by the convention.

Each checkpoint the manager publishes is offered; a thread uploads the newest one offered (an older one still
waiting is skipped: a restore wants the newest), then removes from the bucket what the volume no longer keeps, so
the bucket holds what the volume holds. The training never waits for an upload, except at the end of the
process (``close``), which tries the newest checkpoint once more when it is not in the bucket yet. A failed upload
is said and left for the next checkpoint (the one on the volume is intact); a refused one (credentials, no such
bucket) stops the mirror with one line saying why. Torch-free.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer_contract import checkpoint_layout as layout
from trainer_contract.settings import ConfigError
from trainer_contract.storage import URI_VARIABLES, StorageUri, parse, scrubbed
from trainer_stager.errors import StagingError, missing_library


def mirror_from(environ: Mapping[str, str], config: Any, log: Callable[[str], None]) -> CheckpointMirror | None:
    """The mirror checkpoint.storage_uri asks for (rendered as INDEXED_TRAINER_CHECKPOINT_URI), or None; of the
    checkpoints a program's ``config`` (a built-in program's, or OwnProgramCheckpoints) says where
    (``checkpoint_dir``) and how (``checkpoint_naming``)."""
    text = environ.get(URI_VARIABLES["checkpoint"])
    if not text:
        return None
    if importlib.util.find_spec("boto3") is None:
        raise ConfigError([f"checkpoint.storage_uri {missing_library(text, 'boto3')}"])
    return CheckpointMirror(parse(text, "checkpoint"), config.checkpoint_dir, config.checkpoint_naming, log)


class CheckpointMirror:
    def __init__(self, uri: StorageUri, directory: Path, naming: layout.Naming, log: Callable[[str], None]):
        from trainer_stager import checkpoint_bucket as remote  # boto3, only when a bucket is asked for

        self.remote = remote
        self.uri, self.directory, self.naming, self.log = uri, directory, naming, log
        self.condition = threading.Condition()
        self.offered: Path | None = None
        self.closing = False
        self.stopped: str | None = None  # why the mirror gave up, when it did
        self.mirrored: str | None = None  # the newest checkpoint this process put in the bucket
        # set by the thread as it ends; close() waits on it, not on Thread.join: a join a signal handler's exception
        # interrupted (the launcher's SIGTERM) marks a running thread stopped in CPython before 3.13, and the next
        # join would return at once, the upload in flight cut off by the exit
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name="checkpoint-mirror", daemon=True)
        self.thread.start()

    def offer(self, checkpoint: Path) -> None:
        """``checkpoint`` is published on the volume: upload it when the thread is free (returns at once)."""
        with self.condition:
            if self.stopped is None:
                self.offered = checkpoint
                self.condition.notify_all()

    def close(self) -> None:
        """Upload what is still offered, and the volume's newest checkpoint if the bucket lacks it; then stop. A
        signal's exception may interrupt the wait: calling close() again waits for the same upload."""
        with self.condition:
            self.closing = True
            self.condition.notify_all()
        self.finished.wait()

    def _run(self) -> None:
        try:
            self._mirror_until_closed()
        finally:
            self.finished.set()

    def _mirror_until_closed(self) -> None:
        while True:
            with self.condition:
                while self.offered is None and not self.closing:
                    self.condition.wait()
                checkpoint, self.offered = self.offered, None
            if checkpoint is None:  # closing: last, the newest on the volume, unless it is in the bucket
                newest = layout.list_checkpoints(self.directory, self.naming)
                if newest and self.stopped is None and self.mirrored != newest[0][1].name:
                    self._try(newest[0][1])
                return
            if self.stopped is None:
                self._try(checkpoint)

    def _try(self, checkpoint: Path) -> None:
        try:
            self._mirror(checkpoint)
        except Exception as error:  # a mirror's bug must not end the training: said, and the next one tries
            self.log(f"checkpoint mirror: {checkpoint.name} not mirrored: {type(error).__name__}: "
                     f"{scrubbed(str(error))}")

    def _mirror(self, checkpoint: Path) -> None:
        def say(line: str) -> None:
            self.log(f"checkpoint mirror: {line}")

        try:
            self.remote.upload(self.uri, checkpoint, say)
            self.uploaded(checkpoint)
        except (StagingError, FileNotFoundError) as error:
            if not checkpoint.exists():  # pruned by newer checkpoints while it waited: the newest is what matters
                say(f"{checkpoint.name} left the volume before it was uploaded; skipped")
                return
            if isinstance(error, FileNotFoundError) or error.retryable:
                say(f"{checkpoint.name} is not in the bucket: {error}; the volume's copy is intact, the next "
                    "checkpoint tries again")
                return
            with self.condition:
                self.stopped = str(error)
            self.log(f"checkpoint mirror stopped: {error}; checkpoints stay on the volume only")

    def uploaded(self, checkpoint: Path) -> None:
        """``checkpoint`` is complete in the bucket (uploaded here, or by every rank: trainer_runtime's
        bucket_shares): what the volume no longer keeps is removed from the bucket."""
        self.mirrored = checkpoint.name
        kept = {path.name for _, path in layout.list_checkpoints(self.directory, self.naming)} | {checkpoint.name}
        removed = self.remote.remove_except(self.uri, kept, self.naming)
        if removed:
            self.log(f"checkpoint mirror: removed {', '.join(removed)} from {self.uri.text} (no longer on the volume)")
