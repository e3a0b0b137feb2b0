"""Goodput: what each fault cost, and how much of the wall clock became training, measured where it happens.

The rounds of a gang that restarts in place (trainer_contract.gang_rounds) leave wall-clock notes in the gang's
directory, under ``timeline/<job>/`` (another Job on the same volume keeps its own), each O(1) in the gang's size:

- ``<round>.failed``: the round's one summary, JSON (RoundFailure: when it was first noticed, when it was judged, what
  failed), by the node that explains the round, created exclusively (the first stands): a node whose round ended
  with a cause of its own (its worker's failure, a stop); index 0 when every pod ended as a victim or one vanished
  whole; index 0's successor when index 0 itself was lost whole (from its predecessor's last heartbeat). A gang of
  1,024 nodes makes one note per failed round, not 1,024, and a resume reads one;
- ``<round>.restore``: when the round's rank 0 began to read the checkpoint it resumes from;
- ``<round>.resumed``: when the round's rank 0 began to train (after the restore);
- the progress note (gang_rounds.PROGRESS): the newest checkpoint published, in which round, and when.

When round G resumes after round F failed, its rank 0 accounts for the fault: everything between the last moment
whose work was kept (the checkpoint F published, else F's own resume) and G's resume is lost, in four phases that
add up to it:

- ``recompute``: training since that moment, to be done again (up to the first node's notice of the fault, so a
  silent hang's wait for the collective timeout counts here);
- ``detect``: from the first node's notice to the round's judgment (its summary): at once for a failure of a node's
  own (the round alarm then stops every pod within a store round trip), the heartbeats' staleness for a pod lost
  whole;
- ``restart``: from there to the restore (the next round opened, a lost pod's replacement, new workers' imports and
  process group);
- ``restore``: from the first read of the checkpoint to the first step (the data and the model the program sets
  up around it included).

``goodput`` = 1 - the faults' lost seconds / the wall time since the Job's first step. Each fault is one line of
``faults.jsonl``. The pods' clocks are assumed to agree (NTP) to well under the phases; a phase is never negative.
Torch-free: the launcher writes its notes before importing torch's launcher, and the tests read them without it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer_contract import exit_codes
from trainer_contract.atomic import atomic_write, write_once
from trainer_contract.volume_notes import read_note

TIMELINE = "timeline"
FAULTS = "faults.jsonl"
PHASES = ("detect", "restart", "restore", "recompute")
# faults by kind: what the metrics label and the log line say
KINDS = ("worker failed", "pod lost", "pod stopped", "every worker a victim")
FAILED = "failed"
SUMMARY_LIMIT = 512  # a round's summary is a short line; anything longer is not ours
MAX_ROUNDS_READ = 64  # a resume reads the summaries of at most this many rounds since the last fault accounted for
MAX_FAULTS_READ = 10_000  # faults.jsonl is data on a shared volume: bounded


@dataclass(frozen=True)
class RoundFailure:
    """A failed round's summary, by the node that explains it."""

    first: float  # unix time of its first notice (the explaining node's)
    judged: float  # unix time the round was judged: the summary's write (the gang knew by then)
    kind: str  # one of KINDS
    code: int | None  # the root cause's exit code, where a node reported one


@dataclass(frozen=True)
class Fault:
    """One fault, accounted for by the round that recovered from it."""

    number: int  # the Job's faults, from 1
    round: int  # the round that failed
    kind: str  # one of KINDS
    code: int | None  # the root cause's exit code, where a node reported one
    detect: float
    restart: float
    restore: float
    recompute: float
    at: float  # unix time of the first node's notice
    through: int = 0  # the last failed round it covers (a fault during its recovery failed that one too)

    @property
    def lost(self) -> float:
        return self.detect + self.restart + self.restore + self.recompute

    def line(self, goodput: float | None) -> str:
        """``fault 3: worker failed (exit 137) in round 3; 4.1 s lost: 0.2 detect, 1.5 restart, 1.2 restore,
        1.2 recompute; goodput 93%``"""
        what = self.kind + (f" (exit {self.code})" if self.code is not None and self.kind == "worker failed" else "")
        phases = ", ".join(f"{getattr(self, phase):.1f} {phase}" for phase in PHASES)
        return (f"fault {self.number}: {what} in round {self.round}; {self.lost:.1f} s lost: {phases}"
                + (f"; goodput {goodput:.0%}" if goodput is not None else ""))


class Timeline:
    """One Job's timeline in the gang's directory ``gang_directory`` (OUTPUT_DIR/.gang)."""

    def __init__(self, gang_directory: Path, job: str | None):
        self.directory = Path(gang_directory) / TIMELINE / (job or "local")

    # -- the notes ------------------------------------------------------------------------------------------
    def _note(self, name: str, text: str) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self.directory / name, text.encode())
        except OSError:
            pass  # a volume that refuses a note costs the accounting, never the run

    def _time(self, name: str) -> float | None:
        words = (read_note(self.directory / name) or "").split()
        try:
            return float(words[0]) if words else None
        except ValueError:
            return None

    def round_failed(self, generation: int, failure: RoundFailure) -> bool:
        """The node that explains round ``generation``'s failure: its summary, created exclusively (whichever node
        explains it first stands); whether this one was written."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return write_once(self.directory / f"{generation}.{FAILED}", (json.dumps(asdict(failure)) + "\n").encode())
        except OSError:
            return False  # a volume that refuses it costs the accounting, never the run

    def restore_began(self, generation: int, when: float | None = None) -> None:
        self._note(f"{generation}.restore", f"{time.time() if when is None else when:.6f}\n")

    def resumed(self, generation: int, when: float | None = None) -> None:
        self._note(f"{generation}.resumed", f"{time.time() if when is None else when:.6f}\n")

    def began(self, generation: int) -> bool:
        """Whether round ``generation`` of this Job reached its restore (a round number on the volume may be
        another Job's)."""
        return self._time(f"{generation}.restore") is not None or self._time(f"{generation}.resumed") is not None

    def failure(self, generation: int) -> RoundFailure | None:
        """Round ``generation``'s summary, or None: none, or not one of ours (data on a shared volume)."""
        text = read_note(self.directory / f"{generation}.{FAILED}", limit=SUMMARY_LIMIT)
        try:
            fields = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(fields, dict) or set(fields) != {"first", "judged", "kind", "code"}:
            return None
        first, judged, kind, code = fields["first"], fields["judged"], fields["kind"], fields["code"]
        times_ok = all(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                       for value in (first, judged))
        code_ok = code is None or (isinstance(code, int) and not isinstance(code, bool))
        if not times_ok or kind not in KINDS or not code_ok:
            return None
        return RoundFailure(float(first), float(judged), kind, code)

    def first_step(self) -> float | None:
        """When the Job first trained: the earliest round's resume."""
        rounds = [int(path.name.split(".")[0]) for path in self.directory.glob("*.resumed")
                  if path.name.split(".")[0].isdigit()] if self.directory.is_dir() else []
        for generation in sorted(rounds):
            when = self._time(f"{generation}.resumed")
            if when is not None:
                return when
        return None

    def faults(self) -> list[Fault]:
        faults = []
        text = read_note(self.directory / FAULTS, limit=MAX_FAULTS_READ * 512) or ""
        for line in text.splitlines()[:MAX_FAULTS_READ]:
            try:
                faults.append(Fault(**json.loads(line)))
            except (ValueError, TypeError):
                continue
        return faults

    def goodput(self, now: float | None = None, faults: list[Fault] | None = None) -> float | None:
        """The share of the wall time since the Job's first step that was not lost to faults; None before it."""
        return goodput_of(self.first_step(), self.faults() if faults is None else faults, now)

    def account(self, generation: int, progress: tuple[int, float | None] | None,
                now: float | None = None) -> Fault | None:
        """Round ``generation``'s rank 0, resuming (its restore noted): the fault it recovers from, appended to
        faults.jsonl, or None (the first round, or no earlier round failed). ``progress``: the round and the time
        of the newest checkpoint published (gang_rounds' note)."""
        now = time.time() if now is None else now
        self.resumed(generation, now)
        known = self.faults()
        accounted = max((max(fault.round, fault.through) for fault in known), default=0)
        # the rounds that failed since the last fault accounted for (every round before this one ended in a
        # failure): one fault, from the first of them (another fault during the recovery, a round that never
        # trained, only lengthens its restart); a summary each, read by name (no listing), the newest rounds only
        failed = [(earlier, failure) for earlier in range(max(accounted + 1, generation - MAX_ROUNDS_READ), generation)
                  if (failure := self.failure(earlier)) is not None]
        if not failed:
            return None  # the first round, none explained since, or accounted for already (rank 0 started twice)
        failed_round, failure = failed[0]
        first, judged = failure.first, max(failure.judged, failure.first)
        kept = self._time(f"{failed_round}.resumed") or first
        if progress is not None and progress[0] == failed_round and progress[1] is not None:
            kept = max(kept, progress[1])
        restore = self._time(f"{generation}.restore") or now
        fault = Fault(number=len(known) + 1, round=failed_round, kind=failure.kind, code=failure.code,
                      detect=round(max(0.0, judged - first), 3), restart=round(max(0.0, restore - judged), 3),
                      restore=round(max(0.0, now - max(restore, judged)), 3),
                      recompute=round(max(0.0, first - kept), 3), at=round(first, 3), through=failed[-1][0])
        try:
            with open(self.directory / FAULTS, "a") as handle:
                handle.write(json.dumps(asdict(fault)) + "\n")
        except OSError:
            pass
        return fault


def kind_of(code: int, signalled: bool = False) -> str:
    """What failed, from the code of the node that explains its round (not a victim's): a pod stopped (its launcher
    signalled, or its worker stopped by SIGTERM), or a worker's own failure."""
    return "pod stopped" if signalled or code == exit_codes.TERMINATED else "worker failed"


def goodput_of(first_step: float | None, faults: list[Fault], now: float | None = None) -> float | None:
    """1 - the faults' lost seconds over the wall time since ``first_step`` (unix time); None before it."""
    now = time.time() if now is None else now
    if first_step is None or now <= first_step:
        return None
    return max(0.0, min(1.0, 1.0 - sum(fault.lost for fault in faults) / (now - first_step)))


def totals(faults: list[Fault]) -> dict[str, float]:
    """Seconds lost by phase, over ``faults``."""
    return {phase: round(sum(getattr(fault, phase) for fault in faults), 3) for phase in PHASES}

