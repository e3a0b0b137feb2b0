"""In-place recovery's rounds: the launchers of a gang re-form it without any pod being recreated.

A round is one torchrun call on every node. When a round fails, each pod's launcher stays up and starts the next
one (new worker processes, resuming from the newest checkpoint) instead of ending its pod; a pod that was lost
whole is replaced by the Job and its successor joins the round the others wait in. Node 0 hosts the rendezvous
store (torchrun's static rendezvous), recreated with every round, so the rounds are numbered on the volume the
gang shares (OUTPUT_DIR/.gang/):

- ``round``: "<generation> <token>", written by node 0's launcher (its token, trainer_contract.gang_ledger) just
  before it starts the round's store, and only after its previous round's torchrun returned (the old store is
  gone): a node that reads generation G and then finds the port open talks to round G's store or a later one,
  never to a stale one.
- ``<node>.joined``: the generation that node last joined; a pod's successor inherits it. A node joins an announced
  round only if it has not joined it before (its own earlier failure, or its predecessor's, was in it) and only
  if node 0's heartbeat carries the announcing token (a round announced by a node 0 that has since died is
  nobody's).
- ``progress``: "<generation> <checkpoint>", the newest checkpoint the program's rank 0 published and the round it
  was published in (the runtime's checkpoint store writes it where PROGRESS_VARIABLE says).
- ``failed/<job>/<generation>``: the Job's failed rounds, one file each, created exclusively, so a round is judged
  once however many pods saw it fail: "node <n> exit <code>", counted, or with " after-progress <checkpoint>" when
  the round had published a newer checkpoint than the one it resumed from (a fault, not a crash loop: not
  counted). In-place restarts draw from max_restarts: when more rounds than that failed without progress one after
  another (a round that published a checkpoint starts the count anew), the launcher ends its pod with
  RESTARTS_EXHAUSTED, which fails the Job (a deterministic crash, which fails before its next checkpoint, still
  fails it after max_restarts + 1 such rounds; faults separated by training never add up, however long the job).
  ``<job>`` is the Job's uid (Kubernetes: the controller-uid label; Slurm: the job id, which a requeue keeps), so
  another Job on the same volume starts with its own budget.
  A node whose own failure was the root cause of ``node_leaves_after_failures`` rounds since the last checkpoint,
  with the same code, leaves: its verdict line ends " leaves <host>" (written in the same exclusive create, so no
  pod ever reads the verdict without it) and its pod exits NODE_LEFT, which the Job ignores and replaces. An
  index's first departure in a streak excuses the rounds it failed (a broken node is not the job's failure); a
  second one in the same streak excuses none (the fault follows the index, or the scheduler gave the same node
  back), so a crash loop confined to one index still ends after max_restarts + 1 rounds.

Torch-free: the launcher reads it before importing torch's launcher, the tests without torch.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from trainer_contract.atomic import atomic_write, write_once
from trainer_contract.gang_ledger import ALIVE, DIRECTORY
from trainer_contract.volume_notes import read_note

ROUND = "round"
JOINED = "joined"
FAILED = "failed"
ENDED = "ended"  # "<job> <generation> <code>": a pod ended the gang (its code fails the Job, or it completed)
PROGRESS = "progress"
AFTER_PROGRESS = "after-progress"  # the word in a failed round's file that says it was not counted
# A failed round's file, as judge() writes it: the node, its exit code, and the checkpoint when not counted
LEAVES = "leaves"  # the word in a failed round's file that says its node left the gang (and where it ran)
_VERDICT = re.compile(rf"node [0-9]{{1,6}} exit -?[0-9]{{1,4}}( {AFTER_PROGRESS} \S{{1,400}})?( {LEAVES} \S{{1,253}})?")
# Where the workers' rank 0 notes each checkpoint it publishes (PROGRESS, in the gang's directory): set by a launcher
# that restarts rounds in place; the Slurm script reads the same file (PROGRESS_PATH, under OUTPUT_DIR).
PROGRESS_VARIABLE = "INDEXED_TRAINER_GANG_PROGRESS"
PROGRESS_PATH = f"{DIRECTORY}/{PROGRESS}"
# The Job's identity (the downward API's controller-uid label; Slurm's job id is read as it is).
JOB_UID_VARIABLE = "INDEXED_TRAINER_JOB_UID"
SLURM_JOB_VARIABLE = "SLURM_JOB_ID"
SLURM_RESTART_VARIABLE = "SLURM_RESTART_COUNT"  # a requeued job's start: its own step of the same job
# values restart_in_place and max_restarts, for the launcher
RESTART_IN_PLACE_VARIABLE = "INDEXED_TRAINER_RESTART_IN_PLACE"
MAX_RESTARTS_VARIABLE = "INDEXED_TRAINER_MAX_RESTARTS"
LEAVE_AFTER_VARIABLE = "INDEXED_TRAINER_NODE_LEAVES_AFTER"  # values node_leaves_after_failures
LEAVE_AFTER_DEFAULT = 2
# The node a pod runs on (Kubernetes: the downward API's spec.nodeName; Slurm: its own variable), for the line that
# names a node that keeps failing, so that an operator can cordon it.
NODE_NAME_VARIABLE = "INDEXED_TRAINER_NODE_NAME"
SLURM_NODE_NAME_VARIABLE = "SLURMD_NODENAME"
# The generation of the round the workers run in (their logs say it).
GENERATION_VARIABLE = "INDEXED_TRAINER_GANG_ROUND"
# A node waiting for the next round reads the volume at most this often, and probes node 0's port (no volume) this
# often to learn sooner (wait_for_round).
READ_SECONDS = 1.0
PROBE_SECONDS = 0.1


def lost_nodes_replaced(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a node lost whole gets a successor: a Kubernetes Job recreates its pod; Slurm starts no task in
    the middle of a step (the batch script requeues the whole job instead)."""
    return bool(environ.get(JOB_UID_VARIABLE, "").strip()) or not environ.get(SLURM_JOB_VARIABLE, "").strip()


def job_identity(environ=os.environ) -> str | None:
    """The Job's uid (or Slurm job id), as a single path component; None where the launcher runs outside a Job."""
    text = (environ.get(JOB_UID_VARIABLE) or environ.get(SLURM_JOB_VARIABLE) or "").strip()
    safe = "".join(ch for ch in text if ch.isalnum() or ch in "-_.")
    return safe if safe and safe.strip(".") else None


class Progress(NamedTuple):
    """The newest checkpoint published, the round it was published in (0: outside any round), and when (unix
    time; None in a note that does not say)."""

    generation: int
    checkpoint: str
    time: float | None = None


def read_progress(path: Path) -> Progress | None:
    """The progress noted at ``path`` (PROGRESS), or None: none yet, or not a note of ours."""
    words = (read_note(path) or "").split()
    if len(words) not in (2, 3) or not words[0].isdigit() or len(words[0]) > 12:
        return None
    when = None
    if len(words) == 3:
        try:
            when = float(words[2])
        except ValueError:
            return None
        if not math.isfinite(when):
            return None
    return Progress(int(words[0]), words[1], when)


def note_progress(checkpoint: str, environ: Mapping[str, str] = os.environ, when: float | None = None) -> None:
    """The workers' rank 0 published ``checkpoint`` (its name): noted for the launchers, where one restarts rounds
    in place (PROGRESS_VARIABLE), with the round it runs in and the time. A volume that refuses the note costs the
    budget rule its evidence (the round then counts), never the checkpoint."""
    path = environ.get(PROGRESS_VARIABLE)
    name = "".join(checkpoint.split())  # one word: a name with white space would not read back
    if not path or not name:
        return
    generation = environ.get(GENERATION_VARIABLE, "0").strip()
    stamp = time.time() if when is None else when
    try:
        atomic_write(Path(path), f"{int(generation) if generation.isdigit() else 0} {name} {stamp:.6f}\n".encode())
    except OSError:
        pass


def gang_directory(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The gang's directory, for its workers: where the launcher that restarts rounds in place keeps them."""
    path = environ.get(PROGRESS_VARIABLE)
    return Path(path).parent if path else None


def generation_of(environ: Mapping[str, str] = os.environ) -> int:
    """The round the workers run in (0: outside any round)."""
    text = environ.get(GENERATION_VARIABLE, "").strip()
    return int(text) if text.isdigit() and len(text) <= 12 else 0


class Verdict(NamedTuple):
    """How a failed round was judged, once for the gang: ``counted`` against max_restarts, or a fault after
    ``progress`` (the checkpoint the round published); ``failures``: the Job's counted rounds so far; ``node``: the
    node that judged it (the root cause's, or index 0's for a round without one) and its exit code there;
    ``leaves``: the host that node left from, when it left."""

    counted: bool
    progress: str | None
    failures: int
    node: int = -1
    code: int = 0
    leaves: str | None = None


def leave_after(environ: Mapping[str, str] = os.environ) -> int:
    """values node_leaves_after_failures: how many rounds since the last checkpoint a node may be the root cause of,
    with the same code, before it leaves (0: never)."""
    text = environ.get(LEAVE_AFTER_VARIABLE, "").strip()
    return int(text) if text.isdigit() and len(text) <= 4 else LEAVE_AFTER_DEFAULT


def node_name(environ: Mapping[str, str] = os.environ) -> str:
    """The host this pod runs on, as one word for a verdict's line ("unknown" where nothing says)."""
    text = environ.get(NODE_NAME_VARIABLE) or environ.get(SLURM_NODE_NAME_VARIABLE) or ""
    word = "".join(ch for ch in text.strip() if ch.isalnum() or ch in "-_.")[:253]
    return word or "unknown"


def in_place_settings(environ=os.environ) -> tuple[bool, int]:
    """Whether a failed round restarts in place (values restart_in_place), and the rounds that may fail before the
    Job does (values max_restarts). Unset (a launcher run by hand, `docker run`): not in place, the launcher exits
    with the worker's code as torchrun would."""
    enabled = environ.get(RESTART_IN_PLACE_VARIABLE, "false").strip().lower() == "true"
    try:
        limit = max(0, int(environ.get(MAX_RESTARTS_VARIABLE, "3")))
    except ValueError:
        limit = 3
    return enabled, limit


def _parsed_verdict(line: str) -> tuple[int, int, str | None, str | None] | None:
    """A failed round's line as judge() writes it: (node, code, the checkpoint it published or None, the host its
    node left from or None); None for anything else."""
    line = line.strip()
    if not _VERDICT.fullmatch(line):
        return None
    words = line.split()
    after = words[words.index(AFTER_PROGRESS) + 1] if AFTER_PROGRESS in words else None
    leaves = words[words.index(LEAVES) + 1] if LEAVES in words else None
    return int(words[1]), int(words[3]), after, leaves


class GangRounds:
    """One node's view of the gang's rounds, in ``output_dir``/.gang/."""

    def __init__(self, output_dir: Path, node: int, token: str, job: str | None, step: str = ""):
        self.directory, self.node, self.token, self.job = Path(output_dir) / DIRECTORY, node, token, job
        # the gang's end is this step's: a requeued Slurm job (the same job id, its restart count) goes on
        self._ended_key = f"{job}.{step}" if job is not None and step else job
        self._local_verdicts: dict[int, str] = {}  # no Job identity: judged by this launcher alone

    # -- the announcement ------------------------------------------------------------------------------------
    def announced(self) -> tuple[int, str] | None:
        """The round node 0 announced last: (generation, its launcher's token), or None."""
        try:
            generation, token = (read_note(self.directory / ROUND) or "").split()
            return int(generation), token
        except ValueError:
            return None

    def joined(self, node: int | None = None) -> int:
        """The generation ``node`` (this one) last joined; 0 before any."""
        try:
            return int(read_note(self.directory / f"{self.node if node is None else node}.{JOINED}") or "0")
        except ValueError:
            return 0

    def _write(self, name: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.directory / name, text.encode())

    def _leader_token(self) -> str | None:
        try:
            return (read_note(self.directory / f"0.{ALIVE}") or "").split()[0]
        except IndexError:
            return None

    def announce(self) -> int:
        """Node 0: the next round, after every earlier one (its previous torchrun has returned)."""
        current = self.announced()
        generation = max(current[0] if current else 0, self.joined()) + 1
        self._write(ROUND, f"{generation} {self.token}\n")
        self.mark_joined(generation)
        return generation

    def mark_joined(self, generation: int) -> None:
        self._write(f"{self.node}.{JOINED}", f"{generation}\n")

    def open_round(self) -> int | None:
        """A node other than 0: the generation of a round it may join now, or None (wait): announced by the node 0
        that is alive, and not joined by this node (or its predecessor) before."""
        current = self.announced()
        if current is None or current[1] != self._leader_token():
            return None
        return current[0] if current[0] > self.joined() else None

    def wait_for_round(self, timeout: float, say: Callable[[str], None], report_every: float = 15.0,
                       leader_stale: float | None = None, woken: Callable[[], bool] | None = None) -> int | None:
        """A node other than 0 waits until node 0 opens a round it may join; its generation, or None after
        ``timeout`` seconds, once the gang has ended (``ended``), or (``leader_stale``: where no successor would
        come) once node 0's heartbeat has stood still that long.

        The volume is read once a second (READ_SECONDS: a thousand pods waiting read it a thousand times a second,
        not twenty thousand), and at once whenever ``woken()`` says so: the launcher's probe of node 0's port, which
        costs the volume nothing, says when a store has come up there (node 0 opens a round's store only after
        announcing it), so a round is joined within PROBE_SECONDS of its store, not of the next read."""
        began = time.monotonic()
        report = began + report_every
        beat, beat_since = self._leader_beat(), began
        read_at = began
        while True:
            now = time.monotonic()
            if now >= read_at or (woken is not None and woken()):
                generation = self.open_round()
                if generation is not None:
                    return generation
                now = time.monotonic()
                if now - began >= timeout or self.ended() is not None:
                    return None
                current = self._leader_beat()
                if current != beat:
                    beat, beat_since = current, now
                elif leader_stale is not None and current is not None and now - beat_since >= leader_stale:
                    return None
                read_at = now + READ_SECONDS
            if now >= report:
                say(f"waiting in place for index 0 to open the gang's next round: {now - began:.0f} s of "
                    f"{timeout:g} s")
                report += report_every
            time.sleep(PROBE_SECONDS if woken is not None else max(read_at - now, 0.0))

    def _leader_beat(self) -> str | None:
        return read_note(self.directory / f"0.{ALIVE}")

    # -- progress, and the Job's failed rounds ------------------------------------------------------------------
    def progress(self) -> Progress | None:
        """The newest checkpoint the workers published, and in which round."""
        return read_progress(self.directory / PROGRESS)

    def progressed(self, generation: int, resumed_from: Progress | None) -> Progress | None:
        """The checkpoint round ``generation`` published after the one it resumed from (``resumed_from``: the
        progress noted when this node entered the round), or None: the round made no progress."""
        current = self.progress()
        if current is None or current.generation != generation:
            return None
        if resumed_from is not None and resumed_from.generation < generation \
                and resumed_from.checkpoint == current.checkpoint:
            return None  # the same checkpoint again: no newer one
        return current

    def judge(self, generation: int, code: int, progress: Progress | None, leaving: str | None = None) -> Verdict:
        """Round ``generation`` failed (with ``code`` here): judged once for the gang, by the first node to judge it
        (counted, or not for a round that made ``progress``; ``leaving``: this node's host, where it leaves the gang
        if its verdict stands); the verdict that stands, and the Job's failures."""
        line = f"node {self.node} exit {code}" + (f" {AFTER_PROGRESS} {progress.checkpoint}" if progress else "") \
            + (f" {LEAVES} {leaving}" if leaving else "")
        if self.job is None:
            self._local_verdicts.setdefault(generation, line)
            return self._verdict(self._local_verdicts[generation])
        directory = self.directory / FAILED / self.job
        directory.mkdir(parents=True, exist_ok=True)
        if not write_once(directory / str(generation), (line + "\n").encode()):
            return self._verdict(read_note(directory / str(generation)) or "")
        return self._verdict(line)

    def _verdict(self, line: str) -> Verdict:
        parsed = _parsed_verdict(line)
        if parsed is None:
            return Verdict(True, None, self.failures())
        node, code, after, leaves = parsed
        return Verdict(after is None, after, self.failures(), node, code, leaves)

    def count_failure(self, generation: int, code: int) -> int:
        """Round ``generation`` failed without progress: counted once for the gang; the Job's counted rounds."""
        return self.judge(generation, code, None).failures

    def judged(self, generation: int) -> bool:
        """Whether round ``generation`` has its verdict (written by whichever node judged it first)."""
        if self.job is None:
            return generation in self._local_verdicts
        return read_note(self.directory / FAILED / self.job / str(generation)) is not None

    def verdicts(self) -> list[bool]:
        """Whether each failed round of the Job was counted (False: a fault after progress), by round."""
        return [counted for _, counted, _, _ in self._judged_rounds()]

    def _judged_rounds(self) -> list[tuple[int, bool, int, str | None]]:
        """The Job's failed rounds, in order: (generation, counted, the node that judged it, the host it left)."""
        return list(reversed(list(self._judged_newest_first())))

    def _judged_newest_first(self) -> Iterator[tuple[int, bool, int, str | None]]:
        """The Job's failed rounds, newest first, each read only when asked for (the budget reads its streak, not
        the job's life)."""
        if self.job is None:
            lines: Iterable[tuple[int, str | None]] = sorted(self._local_verdicts.items(), reverse=True)
        else:
            # only what judge() writes counts: a round's number, a verdict's line (a FIFO, a link, or a file of
            # another shape left on the volume spends nothing)
            directory = self.directory / FAILED / self.job
            try:
                names = os.listdir(directory)
            except OSError:
                names = []
            generations = sorted((int(name) for name in names  # as judge() names them: no sign, no leading zero
                                  if name.isascii() and name.isdigit() and len(name) <= 12
                                  and name == str(int(name))), reverse=True)
            lines = ((generation, read_note(directory / str(generation))) for generation in generations)
        for generation, line in lines:
            parsed = _parsed_verdict(line or "")
            if parsed is not None:
                node, _, after, leaves = parsed
                yield generation, after is None, node, leaves

    def failures(self) -> int:
        """The rounds that count against max_restarts: those that failed without progress one after another, since
        the newest round that published a checkpoint (whether that round failed after it, or ended unjudged: the
        whole gang preempted). A crash loop spends the budget; faults separated by training never add up. An
        index that left once in the streak has the rounds it failed up to then excused (a broken node left); one
        that left twice has none (the fault follows the index)."""
        progress, announced = self.progress(), self.announced()
        # a progress note from a round not yet announced is not the gang's (a note planted on the volume): no reset
        newest = progress.generation if progress and (announced is None or progress.generation <= announced[0]) \
            else 0
        streak: list[tuple[int, int, str | None]] = []
        for generation, counted, node, leaves in self._judged_newest_first():
            if not counted or generation < newest:  # a later round published a checkpoint
                break
            streak.append((generation, node, leaves))
        departures: dict[int, list[int]] = {}  # per node: the generations it left in, within the streak
        for generation, node, leaves in streak:
            if leaves is not None:
                departures.setdefault(node, []).append(generation)
        excused = {node: generations[0] for node, generations in departures.items() if len(generations) == 1}
        return sum(1 for generation, node, _ in streak if generation > excused.get(node, -1))

    # -- the gang's end ---------------------------------------------------------------------------------------
    def end(self, generation: int, code: int) -> None:
        """This pod ends the gang in round ``generation`` (completed, or a code that fails the Job): the others
        stop waiting for a next round (on Slurm nobody else would end them)."""
        if self._ended_key is not None:
            self._write(ENDED, f"{self._ended_key} {generation} {code}\n")

    def ended(self) -> int | None:
        """The code with which a pod of this Job ended the gang in a round this node joined or waits after."""
        try:
            job, generation, code = (read_note(self.directory / ENDED) or "").split()
        except ValueError:
            return None
        if job != self._ended_key or not generation.isdigit() or int(generation) < self.joined():
            return None
        return int(code) if code.lstrip("-").isdigit() else None
