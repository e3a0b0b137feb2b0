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
from trainer_contract.storage import MARKER, scrubbed
from trainer_contract.volume_notes import read_json_note
from trainer_stager.errors import StagingError

MB = 1_000_000
# Files (the Hub) or ranged parts of a file (https://) fetched at once: huggingface_hub's snapshot_download default
# (max_workers=8), which one link's bandwidth needs and the pod's CPUs (hashing) keep up with.
TRANSFERS = 8


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


def duration(seconds: float) -> str:
    """A span as a line says it: seconds under two minutes, minutes under two hours, else hours and minutes."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:02.0f} min"


def pace(done: int, total: int | None, rate: float | None) -> str:
    """Bytes so far, their rate and what is left of them at that rate: "120/840 MB, 95 MB/s, ETA 7 s"."""
    line = amount(done, total)
    if rate is None:
        return line
    line += f", {rate / MB:.0f} MB/s" if rate >= MB or rate == 0 else f", {rate / MB:.2f} MB/s"
    if total and rate > 0 and done < total:
        line += f", ETA {duration((total - done) / rate)}"
    return line


# How often index 0 rewrites its progress record at most (the waiting indexes poll it; the volume may be NFS).
PUBLISH_EVERY = 2.0


@dataclass
class Progress:
    """Index 0's bytes so far, published for the waiting indexes (with their rate) and said every ``every``
    seconds with their rate and the time left at it. ``add`` may be called from several threads (files and
    parts are fetched a few at a time); ``clock`` is the monotonic clock rates are measured on."""

    place: Path | None  # None: said only, not published (a rank's share of a restore, which nobody waits on)
    what: str  # "model org/name@rev"
    say: Callable[[str], None]
    every: float = 10.0
    total: int | None = None
    done: int = 0
    clock: Callable[[], float] = time.monotonic
    rate: float | None = None  # bytes a second over the last publication's span; None before the first
    _published: float | None = None
    _said: float = 0.0
    _mark: tuple[float, int] = (0.0, 0)  # (when, done) the rate is measured from
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        started = self.clock()
        self._said, self._mark = started, (started, self.done)

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count
            now = self.clock()
            if self._published is None or now - self._published >= min(self.every, PUBLISH_EVERY):
                if now - self._mark[0] >= PUBLISH_EVERY / 2:  # a span too short measures the chunking, not the link
                    self.rate = max(self.done - self._mark[1], 0) / (now - self._mark[0])
                    self._mark = (now, self.done)
                self._publish()
                self._published = now
            if now - self._said >= self.every:
                self.say(f"staging {self.what}: {pace(self.done, self.total, self.rate)}")
                self._said = now

    def _publish(self) -> None:
        if self.place is None:
            return
        record = {"what": self.what, "done": self.done, "total": self.total, "rate": self.rate, "at": time.time()}
        atomic_write(progress_file(self.place), json.dumps(record).encode())


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


# How long a waiting index waits for index 0's progress record to change (bytes fetched, or a first record) before
# it takes index 0 for stalled and exits STALLED (76, counted): long enough for a pod still pulling its image, a
# huge archive's unpacking or the last file's verification, short of a day's lost allocation. The environment's
# STALL_VARIABLE (cli.py reads it) sets another.
STALL_SECONDS = 30 * 60
STALL_VARIABLE = "INDEXED_TRAINER_STAGING_STALL_SECONDS"


class LeaderStalled(Exception):
    """Index 0 made no progress staging what this index waits for within the bound."""


def wait_for(place: Path, what: str, say: Callable[[str], None], *, every: float = 10.0,
             poll: float = 0.5, stall: float = STALL_SECONDS, by: str = "index 0") -> dict:
    """Wait until ``by`` (index 0, or the stage Job: initializer.separate_job) has staged ``place``; say what for,
    and its progress, every ``every`` seconds. LeaderFailed when it records a failure, LeaderStalled when its
    progress record stays the same for ``stall`` seconds (measured here: another node's clock may be skewed, an old
    record left by an attempt before counts from when this index began to wait)."""
    started, since = time.monotonic(), time.time()
    if (marker := marker_of(place)) is not None:  # staged before: nothing to wait for, nothing to say
        return marker
    say(f"waiting for {by} to stage {what} at {place}")
    said, checked, seen, changed = started, started, None, started
    while (marker := marker_of(place)) is None:
        _raise_if_failed(place, since, by)
        now = time.monotonic()
        # the stager's progress record, read this often rather than at every poll: every waiting pod reads the one file
        if now - checked >= min(every, stall):
            record, checked = read_json_note(progress_file(place)), now
            if record != seen:
                seen, changed = record, now
            elif now - changed >= stall:
                raise LeaderStalled(_stalled(place, what, now - changed, stall, by))
        if now - said >= every:
            said = now
            say(_waiting_line(place, what, now - started, now - changed, by))
        time.sleep(poll)
    return marker


def _stalled(place: Path, what: str, quiet: float, stall: float, by: str = "index 0") -> str:
    bound = f"the bound is {STALL_VARIABLE}={stall:.0f} s"
    progress = _published(read_json_note(progress_file(place)))
    if progress is None:
        return (f"{by} has not begun staging {what} at {place} in {duration(quiet)}: see whether {by}'s pod "
                f"started (Pending, pulling its image) and its stage step's log; {bound}")
    done, total, _ = progress
    return (f"{by}'s staging of {what} at {place} made no progress for {duration(quiet)} (at "
            f"{amount(done, total)}): see {by}'s stage step's log (a hung download or volume); {bound}")


def _raise_if_failed(place: Path, since: float, by: str = "index 0") -> None:
    """LeaderFailed when ``by`` recorded a failure after this index began to wait (an older one is from an
    attempt before, which its next attempt clears)."""
    record = read_json_note(failure_file(place))
    if record is not None and isinstance(record.get("at", 0), (int, float)) and record.get("at", 0) >= since:
        raise LeaderFailed(str(record.get("message", f"{by} failed"))[:1000])


def _published(record: dict | None) -> tuple[int, int | None, float | None] | None:
    """(done, total, rate) of index 0's progress record, or None where there is none (or it is not one)."""
    if not isinstance(record, dict):
        return None
    try:
        rate = record.get("rate")
        return (int(record["done"]), record["total"] and int(record["total"]),
                float(rate) if isinstance(rate, (int, float)) else None)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _waiting_line(place: Path, what: str, waited: float, quiet: float | None = None, by: str = "index 0") -> str:
    """What a waiting index says: the bytes, rate and time left of ``by`` (index 0, or the stage Job), from its
    record; ``quiet``: how long the record has stayed the same (else its age by the clocks)."""
    record = read_json_note(progress_file(place))
    progress = _published(record)
    if progress is None:
        return f"{by} has not started staging {what} ({waited:.0f} s)"
    done, total, rate = progress
    if quiet is None:
        try:
            quiet = time.time() - float((record or {})["at"])
        except (ValueError, TypeError, KeyError):
            quiet = 0.0
    if quiet > 60:
        return f"{by} is staging {what}: {amount(done, total)} (no progress for {duration(quiet)})"
    return f"{by} is staging {what}: {pace(done, total, rate)}"
