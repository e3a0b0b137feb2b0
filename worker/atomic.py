"""The worker's one way to write a file: readers see the old file or the whole new one, never a part.

The bytes go to a temporary name (TEMP_PREFIX, which nothing reads and checkpoint clean-up removes), are
flushed and fsynced, renamed into place, and the directory is fsynced, so the rename survives a crash of the
node too. Torch-free: the data download and the checkpoint code share it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

TEMP_PREFIX = ".tmp-"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, payload: bytes, midway: Callable[[], None] | None = None) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the whole new one.

    ``midway`` runs with half the bytes written (worker.faults puts its crash and stall there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if midway:
                handle.write(payload[:len(payload) // 2])
                handle.flush()
                midway()
                payload = payload[len(payload) // 2:]
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
