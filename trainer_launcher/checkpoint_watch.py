"""Node 0's watch over a user's program's checkpoints (checkpoint.storage_uri with entrypoint.script or .module and
the indexed-trainer launcher): the program writes each checkpoint into INDEXED_TRAINER_CHECKPOINT_DIR as the
convention of trainer_contract/checkpoint_layout.py's OWN_PROGRAM says (one file or directory, renamed into place
when whole), and needs no code of ours; this thread polls the directory beside torchrun and offers its newest entry
to the same CheckpointMirror the built-in programs use, which uploads it and removes from the bucket what the
directory no longer holds. Training never waits for an upload; when torchrun returns, however it ended, the newest
is offered once more and the mirror closed (it finishes the upload in flight).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from trainer_contract import checkpoint_layout as layout
from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import OwnProgramCheckpoints
from trainer_contract.settings import ConfigError
from trainer_contract.storage import URI_VARIABLES, StorageUriError
from trainer_stager.checkpoint_mirror import CheckpointMirror, mirror_from

# How often the directory is looked at: a checkpoint reaches the bucket within this of its rename.
POLL_SECONDS = 2.0


class CheckpointWatch:
    def __init__(self, mirror: CheckpointMirror, directory: Path, log: Callable[[str], None],
                 every: float = POLL_SECONDS):
        self.mirror, self.directory, self.log, self.every = mirror, directory, log, every
        self.offered: str | None = None  # the newest entry offered so far
        self.trouble: str | None = None  # the last error reading the directory, said once
        self.stopping = threading.Event()
        self.stopped = threading.Event()  # the thread's end: close() waits on it, not on Thread.join (the mirror's why)
        self.thread = threading.Thread(target=self._run, name="checkpoint-watch", daemon=True)
        self.thread.start()

    def poll(self) -> None:
        """Offer the directory's newest checkpoint to the mirror, unless it was offered already."""
        try:
            newest = layout.list_checkpoints(self.directory, layout.OWN_PROGRAM)
        except OSError as error:
            if str(error) != self.trouble:
                self.trouble = str(error)
                self.log(f"checkpoint mirror: cannot read {self.directory}: {error}; trying again")
            return
        if newest and newest[0][1].name != self.offered:
            self.offered = newest[0][1].name
            self.mirror.offer(newest[0][1])

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.poll()
                self.stopping.wait(self.every)
        finally:
            self.stopped.set()

    def close(self) -> None:
        """Stop watching, offer the newest once more and wait for the mirror to finish; again after a signal's
        exception interrupted it (trainer_launcher/launch.py's close_watch)."""
        self.stopping.set()
        self.stopped.wait()
        self.poll()
        self.mirror.close()


def watch_from(environ: Mapping[str, str], node_rank: str, log: Callable[[str], None]) -> CheckpointWatch | None:
    """Node 0's watch when the render asks for one (the checkpoint URI and the user's program's checkpoint
    directory both set), else None; ConfigError (one line each) when it cannot be: boto3 missing, a bad URI."""
    if str(node_rank) != "0" or not environ.get(URI_VARIABLES["checkpoint"]) \
            or not environ.get(layout.CHECKPOINT_DIR_VARIABLE):
        return None
    config = load_config(environ, config_class=OwnProgramCheckpoints)
    try:
        mirror = mirror_from(environ, config, log)
    except StorageUriError as error:
        raise ConfigError([f"{URI_VARIABLES['checkpoint']}: {error}"]) from None
    return CheckpointWatch(mirror, config.checkpoint_dir, log) if mirror is not None else None
