"""Where a staged source lives and how it gets there: fetched into a temporary directory beside its place,
verified, marked, renamed into place in one step; the indexes that do not fetch wait for the marker, saying
what they wait for (index 0's progress file)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainer_contract.atomic import TEMP_PREFIX, atomic_write, fsync_directory
from trainer_contract.downloads import copy_bounded
from trainer_contract.storage import MARKER, scrubbed
from trainer_contract.volume_notes import read_json_note
from trainer_stager.errors import StagingError

MB = 1_000_000


def progress_file(place: Path) -> Path:
    return place.parent / f".progress-{place.name}.json"


def failure_file(place: Path) -> Path:
    """Where index 0 says it failed, so that the waiting indexes stop too (a Slurm step's other tasks keep
    running when one fails)."""
    return place.parent / f".failed-{place.name}.json"


@contextlib.contextmanager
def held(place: Path, what: str, say: Callable[[str], None], *, every: float = 10.0) -> Iterator[None]:
    """This process alone stages ``place`` while inside: another staging of the same source (another Job on the
    same volume) waits here, saying so, and then finds it staged, instead of emptying the temporary directory
    this one fetches into. An advisory lock (flock; NFS emulates it with a lock of the whole file), released
    when the process ends however it ends."""
    place.parent.mkdir(parents=True, exist_ok=True)
    with open(place.parent / f".lock-{place.name}", "a+b") as lock:
        waited = 0.0
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waited % every == 0:
                    say(f"another staging of {what} into {place} is under way (another job on this volume): waiting "
                        "for it")
                time.sleep(0.5)
                waited += 0.5
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class LeaderFailed(Exception):
    """Index 0 failed to stage what this index waits for."""


FAILURE_MESSAGE_LIMIT = 600  # characters: as UTF-8 JSON at most 6 bytes each (a control character's escape): <4 KiB


def record_failure(place: Path, message: str, code: int) -> None:
    """Index 0's failure beside ``place``, which every waiting index reads and repeats: scrubbed, and short enough
    to be read back whole (a note past its limit reads as absent: the waiting indexes would wait on)."""
    record = {"message": scrubbed(message)[:FAILURE_MESSAGE_LIMIT], "code": code, "at": time.time()}
    atomic_write(failure_file(place), json.dumps(record, ensure_ascii=False).encode())


# A marker lists a source and its files' digests: a megabyte is far more than any holds.
MARKER_LIMIT = 1 << 20


def marker_of(place: Path) -> dict | None:
    """The marker of a staged place, or None where nothing is staged (yet), or what is there is no marker (the
    volume's files are read as data: a regular file, bounded, a JSON object)."""
    return read_json_note(place / MARKER, MARKER_LIMIT)


def amount(done: int, total: int | None) -> str:
    return f"{done / MB:.0f}/{total / MB:.0f} MB" if total else f"{done / MB:.0f} MB"


@dataclass
class Progress:
    """Index 0's bytes so far, published for the waiting indexes and said every ``every`` seconds."""

    place: Path
    what: str  # "model org/name@rev"
    say: Callable[[str], None]
    every: float = 10.0
    total: int | None = None
    done: int = 0
    _published: float = field(default=0.0)
    _said: float = field(default=0.0)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, count: int) -> None:
        with self._lock:  # files are fetched a few at a time
            self.done += count
            now = time.monotonic()
            if now - self._published >= min(self.every, 2.0):
                self._publish()
                self._published = now
            if now - self._said >= self.every:
                self.say(f"staging {self.what}: {amount(self.done, self.total)}")
                self._said = now

    def _publish(self) -> None:
        record = {"what": self.what, "done": self.done, "total": self.total, "at": time.time()}
        atomic_write(progress_file(self.place), json.dumps(record).encode())


def copy_stream(stream, target: Path, progress: Progress, digest) -> int:
    """Copy the readable ``stream`` (a bucket's body: its client holds it to the object's size) into the file
    ``target``, feeding ``digest`` and ``progress``; the size."""
    return copy_bounded(stream, target, None, on_chunk=fed(progress, digest))


def fed(progress: Progress, digest) -> Callable[[bytes], None]:
    """What a fetch does with each chunk it writes: ``digest`` and ``progress`` told."""
    def feed(chunk: bytes) -> None:
        digest.update(chunk)
        progress.add(len(chunk))
    return feed


def room(place: Path) -> int:
    """The most a download that announces no size may write beside ``place``: the volume's free space but a reserve
    (a twentieth of the volume), so that a server's endless answer stops before the volume is full, not at it."""
    usage = shutil.disk_usage(place.parent)
    return max(usage.free - usage.total // 20, 0)


def check_room(place: Path, needed: int | None) -> None:
    """Refuse to start a download the volume cannot hold."""
    if not needed:
        return
    free = shutil.disk_usage(place.parent).free
    if free < needed:
        raise StagingError(f"the shared volume has {free / MB:.0f} MB free at {place.parent} and the source needs "
                           f"{needed / MB:.0f} MB: raise shared_volume.size (or free space there)", retryable=False)


def publish(temporary: Path, place: Path, marker: dict) -> None:
    """Write the marker into the verified ``temporary`` directory and rename it into ``place``: readers see
    nothing or all of it. Something at ``place`` without a marker (a copy made by hand) is moved aside."""
    atomic_write(temporary / MARKER, json.dumps(marker, indent=2, sort_keys=True).encode())
    if place.exists():
        aside = place.parent / f"{TEMP_PREFIX}unmarked-{place.name}-{int(time.time())}"
        os.rename(place, aside)
    os.rename(temporary, place)
    fsync_directory(place.parent)
    progress_file(place).unlink(missing_ok=True)


def temporary_for(place: Path) -> Path:
    """An empty directory beside ``place`` to fetch into; what an interrupted fetch left there is removed (only
    index 0 fetches, and its previous pod has ended before a new one starts)."""
    place.parent.mkdir(parents=True, exist_ok=True)
    failure_file(place).unlink(missing_ok=True)  # this attempt is not the one that failed
    temporary = place.parent / f"{TEMP_PREFIX}{place.name}"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    return temporary


def wait_for(place: Path, what: str, say: Callable[[str], None], *, every: float = 10.0,
             poll: float = 0.5) -> dict:
    """Wait until index 0 has staged ``place``; say what for every ``every`` seconds."""
    started, since = time.monotonic(), time.time()
    last = started
    if (marker := marker_of(place)) is not None:  # staged before: nothing to wait for, nothing to say
        return marker
    say(f"waiting for index 0 to stage {what} at {place}")
    while (marker := marker_of(place)) is None:
        _raise_if_failed(place, since)
        time.sleep(poll)
        if time.monotonic() - last >= every:
            last = time.monotonic()
            say(_waiting_line(place, what, last - started))
    return marker


def _raise_if_failed(place: Path, since: float) -> None:
    """LeaderFailed when index 0 recorded a failure after this index began to wait (an older one is from an
    attempt before, which index 0's next attempt clears)."""
    record = read_json_note(failure_file(place))
    if record is not None and isinstance(record.get("at", 0), (int, float)) and record.get("at", 0) >= since:
        raise LeaderFailed(str(record.get("message", "index 0 failed"))[:1000])


def _waiting_line(place: Path, what: str, waited: float) -> str:
    record = read_json_note(progress_file(place)) or {}
    try:
        stale = time.time() - float(record["at"])
        done, total = int(record["done"]), record["total"] and int(record["total"])
    except (ValueError, TypeError, KeyError):
        return f"index 0 has not started staging {what} ({waited:.0f} s)"
    line = f"index 0 is staging {what}: {amount(done, total)}"
    return line + (f" (no progress for {stale:.0f} s)" if stale > 60 else "")
