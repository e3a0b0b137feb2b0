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
- ``failed/<job>/<generation>``: the Job's failed rounds, one file each, created exclusively, so a round counts
  once however many pods saw it fail. In-place restarts draw from max_restarts: when more rounds than that
  failed, the launcher ends its pod with RESTARTS_EXHAUSTED, which fails the Job (a crash loop still fails it
  within its limits). ``<job>`` is the Job's uid (Kubernetes: the controller-uid label; Slurm: the job id, which a
  requeue keeps), so another Job on the same volume starts with its own budget.

Torch-free: the launcher reads it before importing torch's launcher, the tests without torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from trainer_contract.atomic import atomic_write
from trainer_contract.gang_ledger import ALIVE, DIRECTORY

ROUND = "round"
JOINED = "joined"
FAILED = "failed"
ENDED = "ended"  # "<job> <generation> <code>": a pod ended the gang (its code fails the Job, or it completed)
# The Job's identity (the downward API's controller-uid label; Slurm's job id is read as it is).
JOB_UID_VARIABLE = "INDEXED_TRAINER_JOB_UID"
SLURM_JOB_VARIABLE = "SLURM_JOB_ID"
# values restart_in_place and max_restarts, for the launcher
RESTART_IN_PLACE_VARIABLE = "INDEXED_TRAINER_RESTART_IN_PLACE"
MAX_RESTARTS_VARIABLE = "INDEXED_TRAINER_MAX_RESTARTS"
# The generation of the round the workers run in (their logs say it).
GENERATION_VARIABLE = "INDEXED_TRAINER_GANG_ROUND"
POLL_SECONDS = 0.05


def job_identity(environ=os.environ) -> str | None:
    """The Job's uid (or Slurm job id), as a single path component; None where the launcher runs outside a Job."""
    text = (environ.get(JOB_UID_VARIABLE) or environ.get(SLURM_JOB_VARIABLE) or "").strip()
    safe = "".join(ch for ch in text if ch.isalnum() or ch in "-_.")
    return safe if safe and safe.strip(".") else None


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


class GangRounds:
    """One node's view of the gang's rounds, in ``output_dir``/.gang/."""

    def __init__(self, output_dir: Path, node: int, token: str, job: str | None):
        self.directory, self.node, self.token, self.job = Path(output_dir) / DIRECTORY, node, token, job
        self._local_failures: set[int] = set()  # no Job identity: counted by this launcher alone

    # -- the announcement ------------------------------------------------------------------------------------
    def announced(self) -> tuple[int, str] | None:
        """The round node 0 announced last: (generation, its launcher's token), or None."""
        try:
            generation, token = (self.directory / ROUND).read_text().split()
            return int(generation), token
        except (OSError, ValueError):
            return None

    def joined(self, node: int | None = None) -> int:
        """The generation ``node`` (this one) last joined; 0 before any."""
        try:
            return int((self.directory / f"{self.node if node is None else node}.{JOINED}").read_text())
        except (OSError, ValueError):
            return 0

    def _write(self, name: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.directory / name, text.encode())

    def _leader_token(self) -> str | None:
        try:
            return (self.directory / f"0.{ALIVE}").read_text().split()[0]
        except (OSError, IndexError):
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

    def wait_for_round(self, timeout: float, say: Callable[[str], None], report_every: float = 15.0) -> int | None:
        """A node other than 0 waits until node 0 opens a round it may join; its generation, or None after
        ``timeout`` seconds or once the gang has ended (``ended``)."""
        began = time.monotonic()
        report = began + report_every
        while True:
            generation = self.open_round()
            if generation is not None:
                return generation
            now = time.monotonic()
            if now - began >= timeout or self.ended() is not None:
                return None
            if now >= report:
                say(f"waiting in place for index 0 to open the gang's next round: {now - began:.0f} s of "
                    f"{timeout:g} s")
                report += report_every
            time.sleep(POLL_SECONDS)

    # -- the Job's failed rounds ----------------------------------------------------------------------------
    def count_failure(self, generation: int, code: int) -> int:
        """Round ``generation`` failed (with ``code`` here): counted once for the gang; the Job's failed rounds."""
        if self.job is None:
            self._local_failures.add(generation)
            return len(self._local_failures)
        directory = self.directory / FAILED / self.job
        directory.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(directory / str(generation), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(f"node {self.node} exit {code}\n")
        return self.failures()

    def failures(self) -> int:
        if self.job is None:
            return len(self._local_failures)
        directory = self.directory / FAILED / self.job
        return sum(1 for item in directory.iterdir() if item.name.isdigit()) if directory.is_dir() else 0

    # -- the gang's end ---------------------------------------------------------------------------------------
    def end(self, generation: int, code: int) -> None:
        """This pod ends the gang in round ``generation`` (completed, or a code that fails the Job): the others
        stop waiting for a next round (on Slurm nobody else would end them)."""
        if self.job is not None:
            self._write(ENDED, f"{self.job} {generation} {code}\n")

    def ended(self) -> int | None:
        """The code with which a pod of this Job ended the gang in a round this node joined or waits after."""
        try:
            job, generation, code = (self.directory / ENDED).read_text().split()
        except (OSError, ValueError):
            return None
        if job != self.job or not generation.isdigit() or int(generation) < self.joined():
            return None
        return int(code) if code.lstrip("-").isdigit() else None
