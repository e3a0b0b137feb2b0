"""Every gang failure counts once against the Job's backoffLimit, also when no pod failed first.

The root cause's pod reports its own code (counted, or ignored by design: a preemption); its victims exit
PEER_LOST (75), which the Job's podFailurePolicy ignores. When every pod of a gang attempt exits as a victim (a
network outage, a shared-filesystem stall, a bug that breaks the communication everywhere at once), nothing
would count and the Job would restart the gang forever. So each pod's launcher notes how it ended in
OUTPUT_DIR/.gang/ (the volume the gang shares), and index 0's launcher, itself a victim, waits a few seconds for
the others: if one ended otherwise, that one explains the attempt and index 0 exits 75; if every pod ended as a
victim, index 0 exits STALLED (76), counted: the attempt costs one restart, once.

Each launcher removes its own note when it starts, so index 0 reads the notes of the attempt it is in. While
it runs it also counts a heartbeat in ``<node>.alive`` (its token, then the count) every second, rewritten in place
(one create when it starts, then no namespace operation: on NFS a rename costs the server a directory change and
leaves other clients' cached names pointing at the old file for the attribute cache's lifetime, while an in-place
write is seen by the next open, close-to-open; and no rename per second per node), and its workers
learn its token; once the gang has assembled, each node's local rank 0 records its launcher's token in
``<node>.attempt`` (a note per node: none grows with the gang). A pod that vanished
whole (SIGKILLed with its launcher, its node lost) either stops counting or, once the Job replaced it, counts
under another token: either way index 0 knows at once that it will never note anything, instead of waiting out
WAIT_SECONDS (a counter, not a time: the pods' clocks need not agree). Torch-free.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from trainer_contract import exit_codes, replica_groups
from trainer_contract.atomic import atomic_write
from trainer_contract.volume_notes import read_note

DIRECTORY = ".gang"
GROUPS_DIRECTORY = ".groups"  # each replica group's gang notes, under OUTPUT_DIR (notes_root)
# How long index 0 waits for the other pods' notes: victims of one broken connection exit within seconds of
# each other, and a root cause's launcher notes its failure as soon as torchrun reports it. Only a pod that
# vanished whole (its launcher with it) leaves no note: then index 0 waits this long before exiting 75.
WAIT_SECONDS = 10.0
HEARTBEAT_SECONDS = 1.0
# Index 0 reads the notes of an attempt that just ended at once, then after 0.05 s, twice as long after each read, at
# most once a second: the notes mostly come within a fraction of a second (the round alarm stops every worker at
# once), and a pod lost whole is waited for at 1 Hz, not 5 (at 1,024 nodes each read opens 1,024 heartbeats).
FIRST_READ_SECONDS = 0.05
MAX_READ_SECONDS = 1.0
# Each heartbeat is this many bytes (its words padded with spaces), written over the last at offset 0 in one write:
# never shorter than the last, so nothing of an older beat is left behind to read.
HEARTBEAT_BYTES = 128
# A pod whose heartbeat has not moved for this long, and that left no note, vanished (3 beats missed).
STALE_SECONDS = 3.0
AttemptEnding = Literal["victims", "explained", "vanished"]
VICTIM, ALIVE = "victim", "alive"
EXPLAINED: Literal["explained"] = "explained"
# with EXPLAINED: how an attempt ended (attempt_ending)
ENDED_AS_VICTIMS: Literal["victims"] = "victims"
VANISHED: Literal["vanished"] = "vanished"
ATTEMPT = "attempt"  # <node>.attempt: the token of that node's launcher in the gang that assembled last
TOKEN_VARIABLE = "INDEXED_TRAINER_GANG_TOKEN"  # the launcher's token, for its workers


def volume_problem(output_dir: Path, node: int) -> str | None:
    """What the shared volume at ``output_dir`` cannot do that the gang's notes and the checkpoints need, in one line,
    or None: a note replaced by rename (atomic_write) and a heartbeat rewritten in place. mountpoint-s3 can do
    neither: found at start, not at the first checkpoint hours later. Tried in the nearest directory that exists
    (nothing is created for a run that may never start), under a name of this node's and process's own."""
    existing = Path(output_dir)
    while not existing.is_dir() and existing != existing.parent:
        existing = existing.parent
    probe = existing / f".indexed-trainer-volume-check-{node}-{os.getpid()}"
    try:
        atomic_write(probe, b"1\n")
        atomic_write(probe, b"2\n")  # a rename over an existing name
        descriptor = os.open(probe, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.pwrite(descriptor, b"3\n", 0)
        finally:
            os.close(descriptor)
        kept = read_note(probe)
    except OSError as error:
        return (f"the shared volume at {existing} cannot hold the gang's notes and checkpoints: "
                f"{type(error).__name__}: {error.strerror or error} (it needs POSIX renames and in-place writes: "
                "NFS, a parallel filesystem, a block volume; not mountpoint-s3)")
    finally:
        try:
            probe.unlink(missing_ok=True)  # whatever failed, the check leaves nothing behind
        except OSError:
            pass
    if kept != "3\n":
        return f"the shared volume at {existing} did not keep a file rewritten in place (read back {kept!r})"
    return None


def notes_root(output_dir: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """Where a gang keeps its notes (DIRECTORY under it): OUTPUT_DIR, or with replica groups each group's own folder
    under it, OUTPUT_DIR/.groups/<G> (its notes in OUTPUT_DIR/.groups/<G>/.gang): each group is a gang of its own, with its own rounds and restart budget
    (trainer_contract/replica_groups.py). A REPLICA_GROUP that is no whole number is the worker's configuration
    error, never a path."""
    group = environ.get(replica_groups.GROUP, "").strip()
    if not environ.get(replica_groups.GROUPS, "").strip() or not group.isdigit() or len(group) > 6:
        return Path(output_dir)
    return Path(output_dir) / GROUPS_DIRECTORY / str(int(group))


def record_attempt(output_dir: Path, tokens: dict[int, str]) -> None:
    """Once the gang has assembled: which launcher (token) is each node of ``tokens`` in this attempt (a node's
    local rank 0 records its own)."""
    directory = Path(output_dir) / DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    for node, token in tokens.items():
        atomic_write(directory / f"{node}.{ATTEMPT}", f"{token}\n".encode())


class GangLedger:
    def __init__(self, output_dir: Path, node: int, nodes: int):
        self.directory, self.node, self.nodes = Path(output_dir) / DIRECTORY, node, nodes
        self.stopped = threading.Event()
        self.token = f"{node}-{os.getpid()}-{time.time_ns()}"
        self.predecessor_beat: float | None = None  # the last heartbeat of this node's earlier pod (unix time)

    def start(self) -> None:
        """Remove this pod's notes of an earlier attempt, start counting its heartbeat, and hand its token to the
        workers torchrun will start (their environment is this process's). The heartbeat an earlier pod of this
        node left says when it was last alive (its mtime): a pod lost whole ends there."""
        try:
            self.predecessor_beat = os.stat(self.directory / f"{self.node}.{ALIVE}", follow_symlinks=False).st_mtime
        except OSError:
            self.predecessor_beat = None
        for kind in (VICTIM, EXPLAINED, ALIVE):
            (self.directory / f"{self.node}.{kind}").unlink(missing_ok=True)
        os.environ[TOKEN_VARIABLE] = self.token
        threading.Thread(target=self._beat, name="gang-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        beat = 0
        while not self.stopped.wait(0 if beat == 0 else HEARTBEAT_SECONDS):
            beat += 1
            self._beat_in_place(f"{self.token} {beat}")

    def _beat_in_place(self, words: str) -> None:
        """One heartbeat, over the last, in place (no rename); a volume that refuses it reads as a pod gone."""
        if not self.directory.parent.is_dir():
            return
        line = f"{words:<{HEARTBEAT_BYTES - 1}}\n".encode()[:HEARTBEAT_BYTES]
        path = self.directory / f"{self.node}.{ALIVE}"
        # not following a link, not waiting on a FIFO someone left there (no reader: ENXIO at once)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            try:
                descriptor = os.open(path, flags, 0o644)
            except FileNotFoundError:  # the first beat: the directory is made then, not asked for every second
                self.directory.mkdir(exist_ok=True)
                descriptor = os.open(path, flags, 0o644)
        except OSError:
            return
        try:
            os.pwrite(descriptor, line, 0)
        except OSError:
            pass
        finally:
            os.close(descriptor)

    def stop(self) -> None:
        self.stopped.set()

    def note(self, code: int, final: bool = True) -> None:
        """How this pod ends (``final``), or its round in place: as a victim (75), or otherwise (its own failure,
        a signal: the attempt's cause). Only into an OUTPUT_DIR that exists: a pod whose gang never assembled
        writes nothing. A launcher that goes on in place keeps counting its heartbeat."""
        if final:
            self.stop()
        self._write(VICTIM if code == exit_codes.PEER_LOST else EXPLAINED, f"{code}\n")

    def _write(self, kind: str, text: str) -> None:
        if not self.directory.parent.is_dir():
            return
        try:
            atomic_write(self.directory / f"{self.node}.{kind}", text.encode())
        except OSError:  # the volume is unreachable: index 0 then finds no note from this pod, as if it vanished
            pass

    def _heartbeat(self, node: int) -> str | None:
        return read_note(self.directory / f"{node}.{ALIVE}")

    def _attempt_token(self, node: int) -> str | None:
        """The token ``node``'s launcher had when the gang last assembled, or None."""
        words = (read_note(self.directory / f"{node}.{ATTEMPT}") or "").split()
        return words[0] if len(words) == 1 else None

    def new_round(self) -> None:
        """A round restarted in place (trainer_contract.gang_rounds): this pod's note of the last one goes."""
        for kind in (VICTIM, EXPLAINED):
            (self.directory / f"{self.node}.{kind}").unlink(missing_ok=True)

    def nobody_failed_first(self, wait: float = WAIT_SECONDS, stale: float = STALE_SECONDS) -> bool:
        """True once every pod has noted it ended as a victim (see ``attempt_ending``)."""
        return self.attempt_ending(wait, stale) == ENDED_AS_VICTIMS

    def attempt_ending(self, wait: float = WAIT_SECONDS, stale: float = STALE_SECONDS) -> AttemptEnding:
        """How the attempt ended: ENDED_AS_VICTIMS once every pod has noted it ended as a victim; EXPLAINED as soon
        as one ended otherwise (its own failure, a signal); VANISHED when one left no note and its heartbeat stood
        still for ``stale`` seconds or counts under another token (the Job replaced it), or when ``wait`` seconds
        pass without every note (a pod that vanished whole is counted, or excused, by the Job). Read with a
        back-off (FIRST_READ_SECONDS doubling to MAX_READ_SECONDS)."""
        now = time.monotonic()
        pause = FIRST_READ_SECONDS
        deadline = now + wait
        beats: dict[int, tuple[str | None, float]] = {}  # per node: the heartbeat last read, and since when
        attempt: dict[int, str | None] = {}  # per node waited for: its launcher's token in this attempt
        while True:
            notes = {path.name for path in self.directory.glob("*.*")} if self.directory.is_dir() else set()
            if any(name.endswith(f".{EXPLAINED}") for name in notes):
                return EXPLAINED
            waiting = [node for node in range(self.nodes) if f"{node}.{VICTIM}" not in notes]
            if not waiting:
                return ENDED_AS_VICTIMS
            now = time.monotonic()
            for node in waiting:
                beat = self._heartbeat(node)
                if node not in attempt:
                    attempt[node] = self._attempt_token(node)
                if attempt[node] is not None and beat is not None and beat.split()[0] != attempt[node]:
                    return VANISHED  # the Job replaced it already: this attempt's pod is gone, without a note
                if node not in beats or beats[node][0] != beat:
                    beats[node] = (beat, now)
                elif beat is not None and now - beats[node][1] >= stale:
                    return VANISHED  # its launcher stopped counting without a note: gone with its pod
            if now >= deadline:
                return VANISHED
            time.sleep(min(pause, max(deadline - now, 0.0)))
            pause = min(pause * 2, MAX_READ_SECONDS)
