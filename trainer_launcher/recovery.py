"""In-place recovery: what a failed round leads to, and how a launcher enters the next one
(trainer_contract.gang_rounds keeps the rounds on the shared volume).

After a round of the gang failed, each pod's launcher decides by the exit code's action in trainer_contract.
exit_codes, the table the Job's podFailurePolicy is rendered from, so a code means in place what it means to
the Job:

- ``fail`` (bad configuration, missing GPUs): the pod ends with it, and the Job fails, as before;
- ``free`` and ``stop`` (a victim of a peer's failure; a worker stopped by SIGTERM while the launcher was not):
  the next round, uncounted; index 0 tells from the gang's notes whether another pod explains the round (then
  that pod counted it), or every pod was a victim, or one vanished whole (then index 0 counts it);
- anything else (a crash, a killed process, a stall): judged once for the gang, then the next round. A round that
  made progress (published a newer checkpoint than the one it resumed from) is a fault, not a crash loop: not
  counted, and it starts the count anew. One that made none is counted, and once more rounds failed without
  progress one after another than max_restarts, the pod exits RESTARTS_EXHAUSTED and the Job fails: a deterministic
  crash still fails it after max_restarts + 1 rounds, while faults separated by training never end a job.
  The other pods end with the same code (shared_end), not as victims: the Job controller may see any pod's end
  first, and a 75 seen first would be ignored and its index given a replacement pod.

A node that keeps failing leaves: when this node's own failure was the gang's root cause in
``node_leaves_after_failures`` rounds with the same code since the gang last published a newer checkpoint (a broken
GPU fails every round where it sits), its verdict says so and the pod exits NODE_LEFT, which the Job ignores and
replaces (on a cluster: elsewhere, once the node named in the line is cordoned); its rounds are excused once per
streak (trainer_contract.gang_rounds). On Slurm nothing replaces a task in the middle of a step, so a node there
does not leave: the budget decides.

A SIGTERM to the launcher (preemption, the Job's deletion) ends the pod as before. A pod lost whole is the Job's
to replace (it counts that pod's failure too): its survivors wait in place and its successor joins them. On Slurm
nothing starts a successor in the middle of a step: the step ends (75) and the batch script requeues the job.
The node that explains a failed round (its own failure or stop; index 0 for a round of victims or of a pod lost
whole; index 0's successor for index 0's own loss) writes the round's one summary (trainer_contract/gang_timeline.py:
what each fault cost, goodput).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from trainer_contract import exit_codes, replica_groups
from trainer_contract.gang_ledger import (
    ENDED_AS_VICTIMS,
    EXPLAINED,
    FIRST_READ_SECONDS,
    MAX_READ_SECONDS,
    STALE_SECONDS,
    VANISHED,
    GangLedger,
)
from trainer_contract.gang_rounds import (
    GENERATION_VARIABLE,
    PROGRESS,
    PROGRESS_VARIABLE,
    GangRounds,
    Progress,
    Verdict,
    leave_after,
    node_name,
)
from trainer_contract.gang_timeline import RoundFailure, Timeline, kind_of

# How long index 0 waits for the verdict of a round another pod failed first (it writes it a moment after its note).
VERDICT_WAIT_SECONDS = 10.0


def shared_end(ended: int) -> int:
    """What a pod ends with once another pod ended the gang with ``ended``: a code that fails the Job (80 past
    max_restarts, 78) is shared, so that whichever pod the Job controller sees first fails the Job; a victim's
    75 there would be ignored and its index given a replacement pod first. Otherwise a victim's PEER_LOST."""
    return ended if ended == exit_codes.OK or exit_codes.action(ended) == "fail" else exit_codes.PEER_LOST


class InPlaceRecovery:
    def __init__(self, rounds: GangRounds, ledger: GangLedger, limit: int, say: Callable[[str], None],
                 tell: Callable[[str], None], replaced: bool = True, environ=os.environ):
        self.rounds, self.ledger, self.limit, self.say, self.tell = rounds, ledger, limit, say, tell
        self.replaced = replaced  # a node lost whole gets a successor (Kubernetes), or none (Slurm: the job requeues)
        # a node leaves after this many rounds since the last checkpoint it failed first with one code (0: never;
        # never where nothing would replace it)
        self.leave_after = leave_after(environ) if replaced else 0
        # a replica group's crash loop ends that group (its index), not the Job
        self.exhaustion_ends = "this replica group ends (the Job fails its index; the other groups go on)" \
            if environ.get(replica_groups.GROUPS, "").strip() else "the Job fails"
        self.host = node_name(environ)
        # (code, rounds) this node failed first with that code since the gang last published a newer checkpoint
        self.own_failures: tuple[int, int] = (0, 0)
        self.generation = 0  # the round this node is in (0: none yet)
        self.resumed_from: Progress | None = None  # the progress noted when this node entered its round
        self.timeline = Timeline(rounds.directory, rounds.job)  # what each fault costs (goodput)
        self.noticed = 0.0  # when this node's last round ended in a failure (unix time)

    @property
    def leader(self) -> bool:
        return self.ledger.node == 0

    def enter(self, join_timeout: float, wait_for_leader: Callable[[], int | None],
              woken: Callable[[], bool] | None = None) -> int | None:
        """Enter the next round: index 0 announces it; another node waits until index 0 has (reading the volume once
        a second, and at once when ``woken()``: index 0's port just came up), then for its port. None to run
        torchrun; else the exit code the pod ends with."""
        first = self.generation == 0
        if self.leader:
            self.generation = self.rounds.announce()
            if first:
                self._explain_predecessors_loss()
        else:
            if not first or self.rounds.open_round() is None:
                self.tell("waiting in place for index 0 to open the gang's next round" if not first
                          else "waiting for index 0 to open the gang's round")
            generation = self.rounds.wait_for_round(join_timeout, self.tell,
                                                    leader_stale=None if self.replaced else STALE_SECONDS,
                                                    woken=woken)
            if generation is None:
                return self._no_round(join_timeout)
            code = wait_for_leader()
            if code is not None:
                return code
            # the store answering is the newest round's (index 0 announces a round before its store is up, and
            # only after the last one's store is gone)
            announced = self.rounds.announced()
            self.generation = max(generation, announced[0] if announced else 0)
            self.rounds.mark_joined(self.generation)
        self.ledger.new_round()
        self.resumed_from = self.rounds.progress()
        os.environ[GENERATION_VARIABLE] = str(self.generation)
        os.environ[PROGRESS_VARIABLE] = str(self.rounds.directory / PROGRESS)  # where the workers' rank 0 notes it
        if not first:
            self.tell(f"round {self.generation} of the gang: new workers, resuming from the newest checkpoint")
        return None

    def _no_round(self, join_timeout: float) -> int:
        code = self._ended_by_another("the gang ended while this pod waited for its next round")
        if code is not None:
            return code
        if not self.replaced:
            self.say(f"index 0 vanished whole (its heartbeat stopped) and nothing starts a successor in this step "
                     f"(Slurm): exiting {exit_codes.PEER_LOST}, so that the batch script requeues the job")
            return exit_codes.PEER_LOST
        self.say(f"index 0 opened no round within the join timeout ({join_timeout:g} s); exiting "
                 f"{exit_codes.STALLED}")
        return exit_codes.STALLED

    def after(self, code: int, signalled: bool) -> int | None:
        """The round failed with ``code`` here: None to start the next round in place; else the pod's exit code."""
        self.noticed = time.time()
        if signalled or code != exit_codes.PEER_LOST:
            self._explain(kind_of(code, signalled), code)
        if self.rounds.progressed(self.generation, self.resumed_from) is not None:
            self.own_failures = (0, 0)  # the gang trained since: this node's failures before no longer add up
        action = exit_codes.action(code)
        if signalled or action in ("done", "fail"):
            return self.end(code)
        self.ledger.note(code, final=False)
        if action in ("free", "stop"):
            if not self.leader:
                return None
            ending = self.ledger.attempt_ending()
            if ending == EXPLAINED:  # the pod with the root cause counts it, or ends the gang: its word decides
                return self._after_explained()
            if ending == VANISHED and not self.replaced:
                # no successor will come: the step ends, and the batch script judges it (requeued, counted unless
                # it made progress); the other nodes stop waiting for a round
                self.say(f"round {self.generation} failed: a node of the gang vanished without a note (lost whole) "
                         f"and nothing starts a successor in this step (Slurm): exiting {exit_codes.PEER_LOST}, so "
                         "that the batch script requeues the job")
                self._explain("pod lost", None)
                self.rounds.end(self.generation, exit_codes.PEER_LOST)
                return exit_codes.PEER_LOST
            if ending == ENDED_AS_VICTIMS:
                self._explain("every worker a victim", code)
                why = "every pod of the gang ended as a victim and none failed first"
            else:
                self._explain("pod lost", None)
                why = "a pod of the gang vanished without a note (lost whole)"
            return self._count(code, why)
        return self._count(code, f"this pod's worker failed with exit code {code}", own=True)

    def _explain(self, kind: str, code: int | None) -> None:
        """This node explains its round's failure: the round's one summary, from this node's notice to now (the
        gang's judgment), unless another node explained it first."""
        if self.generation:
            self.timeline.round_failed(self.generation, RoundFailure(self.noticed, max(time.time(), self.noticed),
                                                                     kind, code))

    def _explain_predecessors_loss(self) -> None:
        """Index 0's successor, opening its first round: the round its predecessor was in, if nobody explained it
        (index 0 itself was lost whole, and with it the gang's round), explained as a pod lost from the predecessor's
        last heartbeat (its mtime: the Job's replacement of the pod falls in the restart). Only a round of this Job's
        (a round number on the volume may be another Job's)."""
        previous = self.generation - 1
        last_beat = self.ledger.predecessor_beat
        if previous < 1 or last_beat is None or self.timeline.failure(previous) is not None \
                or not self.timeline.began(previous):
            return
        when = min(last_beat, time.time())
        self.timeline.round_failed(previous, RoundFailure(when, when, "pod lost", None))

    def _after_explained(self) -> int | None:
        """Index 0, a victim of a pod that noted its failure first: that pod judges the round (or ends the gang) a
        moment after its note; waiting for its word (bounded: it may have been lost whole since) keeps index 0 from
        opening a round the verdict has already ended, which would wait out the join timeout for a gang that is
        gone. None for the next round; else the pod's exit code (the gang's end, shared: shared_end)."""
        deadline = time.monotonic() + VERDICT_WAIT_SECONDS
        pause = FIRST_READ_SECONDS  # the same back-off as the notes' (gang_ledger): at most a read a second
        while self.rounds.ended() is None and not self.rounds.judged(self.generation) \
                and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, MAX_READ_SECONDS)
        code = self._ended_by_another(f"round {self.generation} failed: the pod that failed first ended the gang")
        if code is not None:
            return code
        failures = self.rounds.failures()
        if self.rounds.judged(self.generation) and failures > self.limit:
            self.say(f"round {self.generation} failed: the pod that failed first spent the last restart ({failures} "
                     f"rounds failed in a row without a newer checkpoint, max_restarts {self.limit}) and ends the "
                     "Job; exiting "
                     f"{exit_codes.RESTARTS_EXHAUSTED} with it")
            return exit_codes.RESTARTS_EXHAUSTED
        return None

    def _ended_by_another(self, what: str) -> int | None:
        """The code this pod ends with where another pod ended the gang (shared_end), said; None if none did."""
        ended = self.rounds.ended()
        if ended is None:
            return None
        code = shared_end(ended)
        self.say(f"{what} (a pod exited {ended}); exiting {code}")
        return code

    def _count(self, code: int, why: str, own: bool = False) -> int | None:
        """Judge the round (once for the gang): a fault after progress is not counted; a round without progress
        is, and past max_restarts it ends the pod. A node whose worker failed first (``own``, its verdict) with the
        same code in ``leave_after`` rounds since the gang last trained (a newer checkpoint) leaves: rounds another
        node failed, in between, neither add to its row nor break it (two broken nodes at once take turns)."""
        row = self.own_failures[1] + 1 if self.own_failures[0] == code else 1
        leaving = self.host if own and self.leave_after and row >= self.leave_after else None
        verdict = self.rounds.judge(self.generation, code, self.rounds.progressed(self.generation, self.resumed_from),
                                    leaving=leaving)
        if own and verdict.node == self.rounds.node:
            self.own_failures = (code, row)
        if verdict.leaves is not None and verdict.node == self.rounds.node and verdict.failures <= self.limit:
            return self._leave(verdict, row, why)
        if not verdict.counted:
            self.tell(f"round {self.generation} failed: {why}; restarting in place, not counted: fault after progress "
                      f"(checkpoint {verdict.progress} published in this round; {verdict.failures} of at most "
                      f"{self.limit} restarts spent)")
            return None
        if verdict.failures > self.limit:
            self.say(f"round {self.generation} failed: {why}; {verdict.failures} rounds of this Job have failed in a "
                     f"row without a newer checkpoint, more than max_restarts ({self.limit}) allows (a round that "
                     f"published one starts the count anew): exiting {exit_codes.RESTARTS_EXHAUSTED}, "
                     f"{self.exhaustion_ends}")
            return self.end(exit_codes.RESTARTS_EXHAUSTED)
        self.tell(f"round {self.generation} failed: {why}; restarting in place ({verdict.failures} of at most "
                  f"{self.limit} restarts; no newer checkpoint in this round)")
        return None

    def _leave(self, verdict: Verdict, row: int, why: str) -> int:
        """This node failed first ``row`` rounds since the last checkpoint with the same code: its pod leaves the
        gang, and the Job gives its index a new pod, which joins the round the others wait in."""
        self.say(f"round {self.generation} failed: {why}, the {row} rounds since the last checkpoint this node "
                 f"({verdict.leaves}) failed first with that code: the node leaves the gang "
                 f"(node_leaves_after_failures {self.leave_after}); "
                 f"exiting {exit_codes.NODE_LEFT}, not counted, for a new pod (cordon node {verdict.leaves} if it "
                 f"is broken; {verdict.failures} of at most {self.limit} restarts spent)")
        return self.end(exit_codes.NODE_LEFT)

    def end(self, code: int) -> int:
        """The pod ends with ``code``; one that ends the gang (completed, or failing the Job) says so to those
        waiting in place."""
        if code == exit_codes.OK or exit_codes.action(code) == "fail":
            self.rounds.end(self.generation, code)
        return code
