"""Write rendered manifests into a directory, all or nothing, removing only what an earlier render wrote there."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

from generator.errors import OutputError
from generator.templating import Manifest
from trainer_contract.atomic import fsync_directory

# The names of the files the last render wrote, so that the next removes those it no longer produces and nothing
# else (a user's own 5-podmonitor.yaml stays). Hidden and without a .json/.yaml/.yml extension: `kubectl apply -f
# DIR` and a GitOps tool's directory source read only those, so they never take it for a manifest.
RECORD = ".gen-manifests"
# The record is read from a directory others write to: a bigger one is not ours, and is treated as absent.
MAX_RECORD_BYTES = 64 * 1024
# Manifests hold no secrets (Secrets are referenced by name): readable by the team and by a GitOps checkout, exactly.
FILE_MODE = 0o644


def write_manifests(manifests: list[Manifest], directory: Path) -> list[Path]:
    """Write one file per manifest into ``directory``, replacing an earlier render.

    Every file, and the record of their names, is written and flushed to a temporary name first and only then
    renamed into place, so a failure leaves the previous files as they were; files the previous render's record
    names that this one no longer produces (the claim, once an existing claim is used) are removed.
    """
    files = {manifest.filename: manifest.text for manifest in manifests}
    files[RECORD] = json.dumps({"files": sorted(files)}, indent=2) + "\n"  # renamed last: after the manifests
    staged: list[tuple[Path, Path]] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        previous = recorded_files(directory)
        for name, text in files.items():
            staged.append((_stage(directory, name, text), directory / name))
        for temp, final in staged:
            os.replace(temp, final)
        for name in sorted(previous - files.keys()):
            _remove_regular_file(directory / name)
        fsync_directory(directory)
    except OSError as exc:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        where = exc.filename or str(directory)
        raise OutputError(f"--output-dir {directory}: cannot write {where}: {exc.strerror or exc}") from None
    return [directory / manifest.filename for manifest in manifests]


def _stage(directory: Path, name: str, text: str) -> Path:
    """``text`` written, flushed and made FILE_MODE under a temporary name beside ``name``."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)  # mkstemp makes 0600; chmod is not masked by the umask
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return Path(temp_name)


def recorded_files(directory: Path) -> set[str]:
    """The plain file names the directory's record lists; none where it is missing, not a regular file (a link, a
    FIFO), too big, or malformed: without a record nothing but this render's own files is touched."""
    try:
        # O_NOFOLLOW: a link is not ours; O_NONBLOCK: a FIFO in its place does not hang the render
        fd = os.open(directory / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return set()
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return set()
        raw = handle.read(MAX_RECORD_BYTES + 1)
    try:
        listed = json.loads(raw.decode("utf-8"))["files"] if len(raw) <= MAX_RECORD_BYTES else None
    except (ValueError, TypeError, KeyError, RecursionError):  # not a record this tool wrote
        return set()
    if not isinstance(listed, list):
        return set()
    return {name for name in listed if _plain_name(name)}


def _plain_name(name: object) -> bool:
    """A name of a file directly in the directory: never a path, '..', a hidden file or the record itself."""
    return (isinstance(name, str) and name != "" and not name.startswith(".") and "/" not in name
            and "\\" not in name and "\x00" not in name)


def _remove_regular_file(path: Path) -> None:
    """Remove ``path`` where it is a regular file: a link or directory put in its place is the user's."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        path.unlink(missing_ok=True)
