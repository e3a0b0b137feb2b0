"""The one way to write a file another process reads (a checkpoint, a rendered manifest, local-job's status):
readers see the old file or the whole new one, never a part.

The bytes go to a temporary name (TEMP_PREFIX, which nothing reads and checkpoint clean-up removes), are
flushed and fsynced, renamed into place, and the directory is fsynced, so the rename survives a crash of the
node too. The worker's data download and checkpoints, the generator's --output-dir and local-job share it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from trainer_contract import hooks

TEMP_PREFIX = ".tmp-"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_once(path: Path, payload: bytes) -> bool:
    """Create ``path`` with ``payload`` unless it exists (O_EXCL, one namespace operation, links not followed):
    whether this call created it. Among writers racing for one name, the first stands (a failed round's verdict and
    its summary); another error (a volume that refuses it) raises."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(payload)
    return True


def atomic_write(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the whole new one. The file gets the
    mode a plain open() would give it (0644 under the usual umask): mkstemp's 0600 would hide a run's results
    from the volume's group and from the host user of a `docker run`."""
    atomic_write_with(path, lambda handle: handle.write(payload))


def atomic_write_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """atomic_write, the bytes written by ``write(handle)`` as they come (a checkpoint streamed by torch.save,
    never held whole in memory beside the state it serializes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        hooks.point("before-rename", path=path)  # a crash here leaves only the temporary (tests inject it)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
