"""Goodput: what each fault cost, and how much of the wall clock became training, measured where it happens.

The rounds of a gang that restarts in place (trainer_contract.gang_rounds) leave wall-clock notes in the gang's
directory, under ``timeline/<job>/`` (another Job on the same volume keeps its own):

- ``<round>.failed.<node>``: "<unix time> <code>", by each node's launcher when its torchrun of that round ended in
  a failure (or its pod was stopped: 143); a node lost whole leaves none;
- ``<round>.restore``: when the round's rank 0 began to read the checkpoint it resumes from;
- ``<round>.resumed``: when the round's rank 0 began to train (after the restore);
- the progress note (gang_rounds.PROGRESS): the newest checkpoint published, in which round, and when.

When round G resumes after round F failed, its rank 0 accounts for the fault: everything between the last moment
whose work was kept (the checkpoint F published, else F's own resume) and G's resume is lost, in four phases that
add up to it:

- ``recompute``: training since that moment, to be done again (up to the first node's notice of the fault, so a
  silent hang's wait for the collective timeout counts here);
- ``detect``: from the first node's notice to the last one's (the gang's);
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
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer_contract import exit_codes
from trainer_contract.atomic import atomic_write
from trainer_contract.volume_notes import read_note

TIMELINE = "timeline"
FAULTS = "faults.jsonl"
PHASES = ("detect", "restart", "restore", "recompute")
# faults by kind: what the metrics label and the log line say
KINDS = ("worker failed", "pod lost", "pod stopped", "every worker a victim")
VICTIM_CODES = exit_codes.codes_taking("free")
MAX_FAULTS_READ = 10_000  # faults.jsonl is data on a shared volume: bounded


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

    def round_failed(self, generation: int, node: int, code: int, when: float | None = None) -> None:
        """A node's launcher: its torchrun of round ``generation`` ended with ``code`` (a failure, or a stop)."""
        self._note(f"{generation}.failed.{node}", f"{time.time() if when is None else when:.6f} {code}\n")

    def restore_began(self, generation: int, when: float | None = None) -> None:
        self._note(f"{generation}.restore", f"{time.time() if when is None else when:.6f}\n")

    def resumed(self, generation: int, when: float | None = None) -> None:
        self._note(f"{generation}.resumed", f"{time.time() if when is None else when:.6f}\n")

    def failures(self, generation: int) -> dict[int, tuple[float, int]]:
        """The nodes' notes of round ``generation``'s failure: node -> (time, code); only that round's are read."""
        notes: dict[int, tuple[float, int]] = {}
        for node, path in self._failure_notes().get(generation, {}).items():
            words = (read_note(path) or "").split()
            try:
                notes[node] = (float(words[0]), int(words[1]))
            except (IndexError, ValueError):
                continue
        return notes

    def failed_rounds(self) -> dict[int, dict[int, tuple[float, int]]]:
        """Every round's failure notes: round -> node -> (time, code); what is not a note of ours is passed over."""
        rounds = {generation: self.failures(generation) for generation in self._failure_notes()}
        return {generation: notes for generation, notes in rounds.items() if notes}

    def _failure_notes(self) -> dict[int, dict[int, Path]]:
        """The failure notes by round and node, from one listing of the directory: named, not opened (a resume
        reads one round's, not every round's of the job's life)."""
        found: dict[int, dict[int, Path]] = {}
        if not self.directory.is_dir():
            return found
        for path in self.directory.iterdir():
            generation, kind, node = (path.name.split(".") + ["", ""])[:3]
            if kind != "failed" or not generation.isdigit() or not node.isdigit() or len(generation) > 12:
                continue
            found.setdefault(int(generation), {})[int(node)] = path
        return found

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

    def account(self, generation: int, nodes: int, progress: tuple[int, float | None] | None,
                now: float | None = None) -> Fault | None:
        """Round ``generation``'s rank 0, resuming (its restore noted): the fault it recovers from, appended to
        faults.jsonl, or None (the first round, or no earlier round failed). ``progress``: the round and the time
        of the newest checkpoint published (gang_rounds' note); ``nodes``: the gang's nodes."""
        now = time.time() if now is None else now
        self.resumed(generation, now)
        known = self.faults()
        accounted = max((max(fault.round, fault.through) for fault in known), default=0)
        # the rounds that failed since the last fault accounted for: one fault, from the first of them (another
        # fault during the recovery, a round that never trained, only lengthens its restart)
        failed = sorted(earlier for earlier in self._failure_notes() if accounted < earlier < generation)
        notes = self.failures(failed[0]) if failed else {}
        if not notes:
            return None  # the first round, none failed since, or accounted for already (rank 0 started twice)
        failed_round = failed[0]
        first = min(when for when, _ in notes.values())
        last = max(when for when, _ in notes.values())
        kept = self._time(f"{failed_round}.resumed") or first
        if progress is not None and progress[0] == failed_round and progress[1] is not None:
            kept = max(kept, progress[1])
        restore = self._time(f"{generation}.restore") or now
        kind, code = _kind(notes, nodes)
        fault = Fault(number=len(known) + 1, round=failed_round, kind=kind, code=code,
                      detect=round(max(0.0, last - first), 3), restart=round(max(0.0, restore - last), 3),
                      restore=round(max(0.0, now - max(restore, last)), 3),
                      recompute=round(max(0.0, first - kept), 3), at=round(first, 3), through=failed[-1])
        try:
            with open(self.directory / FAULTS, "a") as handle:
                handle.write(json.dumps(asdict(fault)) + "\n")
        except OSError:
            pass
        return fault


def _kind(notes: dict[int, tuple[float, int]], nodes: int) -> tuple[str, int | None]:
    """What failed, from the nodes' notes: a stopped pod, a pod lost whole, a worker's own failure, or victims all."""
    codes = [code for _, (_, code) in sorted(notes.items())]
    if exit_codes.TERMINATED in codes:
        return "pod stopped", exit_codes.TERMINATED
    if len(notes) < nodes:
        return "pod lost", None
    causes = [code for code in codes if code not in VICTIM_CODES]
    if causes:
        return "worker failed", causes[0]
    return "every worker a victim", codes[0] if codes else None


def goodput_of(first_step: float | None, faults: list[Fault], now: float | None = None) -> float | None:
    """1 - the faults' lost seconds over the wall time since ``first_step`` (unix time); None before it."""
    now = time.time() if now is None else now
    if first_step is None or now <= first_step:
        return None
    return max(0.0, min(1.0, 1.0 - sum(fault.lost for fault in faults) / (now - first_step)))


def totals(faults: list[Fault]) -> dict[str, float]:
    """Seconds lost by phase, over ``faults``."""
    return {phase: round(sum(getattr(fault, phase) for fault in faults), 3) for phase in PHASES}


def gang_nodes(environ: Mapping[str, str] = os.environ) -> int:
    """The gang's nodes, as torchrun tells its workers (WORLD_SIZE / LOCAL_WORLD_SIZE)."""
    try:
        return max(1, int(environ.get("WORLD_SIZE", "1")) // max(1, int(environ.get("LOCAL_WORLD_SIZE", "1"))))
    except ValueError:
        return 1
