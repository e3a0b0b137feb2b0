"""The worker's exit codes, each with its meaning and the action the targets take on it: one table
(``CODES``), which the Job's podFailurePolicy, the Slurm script's requeue, local-job's summary, the status
views and the launcher all read. worker.launch makes the worker's code the pod's; docs/reliability.md lists what
each costs.

Actions:
    retry  counted against max_restarts, then the gang restarts from its checkpoint
    free   a victim: the gang restarts, but the root cause is counted on the peer's own pod, not here
    stop   stopped on request (SIGTERM) after the checkpoint: restarted without counting where the engine can
           tell a disruption (Kubernetes: the DisruptionTarget condition; Slurm: always)
    fail   retrying cannot help: the whole job fails at once
    leave  the pod ends, not counted, and the engine replaces it where its index is still wanted: its node keeps
           failing the gang (the launcher gives this code: trainer_launcher/recovery.py), or a replica group stopped
           on request, holding nothing the other groups lack
    done   the index completed
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

Action = Literal["done", "retry", "free", "stop", "fail", "leave"]


@dataclass(frozen=True)
class ExitCode:
    code: int
    action: Action
    meaning: str  # one line, for the termination message, local-job's summary and the status views
    summary: str = ""  # a few words, where a target's script names why it acts (the Slurm script's requeue)


OK = 0
# The configuration can never work (a bad EPOCHS, a missing variable): retrying cannot help (sysexits.h
# EX_CONFIG).
BAD_CONFIG = 78
# The dataset could not be obtained or failed verification (sysexits.h EX_UNAVAILABLE).
DATA_UNAVAILABLE = 69
# This process is a victim: a peer died or went away, or asked the gang to stop (preemption). The gang must
# be restarted from the last checkpoint; the root cause is counted (or ignored) on the peer's own pod, so
# this code is never counted against the Job's backoffLimit (sysexits.h EX_TEMPFAIL).
PEER_LOST = 75
# The gang stalled: rank 0 gave up on a peer that stopped answering (a collective timed out), or the
# launcher's rendezvous did not assemble the gang within its join timeout. Nobody else exits with a root
# cause here, so this one is counted (sysexits.h EX_PROTOCOL).
STALLED = 76
# The pod asked for GPUs (resources.gpu.accelerator_count) and sees fewer, with resources.gpu.cpu_fallback
# false: a node without working GPUs; the Job fails at once rather than train on the CPU for days.
GPU_MISSING = 79
# More of the gang's rounds failed than max_restarts allows, counted by the launchers that restarted them in place
# (trainer_contract.gang_rounds): the Job fails at once, as it would have had every round cost a pod. With replica
# groups it is one group's crash loop: its index fails (the Job's FailIndex), the other groups go on.
RESTARTS_EXHAUSTED = 80
# The launcher ends its pod because its own node was the root cause of the gang's last rounds, one after another,
# with the same code (values node_leaves_after_failures): a broken GPU fails every round on the node it sits in. The
# Job ignores it and replaces the pod (on a cluster, elsewhere once the node is cordoned: the message names it).
NODE_LEFT = 81
# A replica group stopped on request (SIGTERM: a scale-down's removed index, a deletion, a preemption) between two of
# the job's steps: the other groups hold everything it had, so its leave costs nothing and is never counted; the Job
# replaces its pod where its index is still in range.
GROUP_LEFT = 82


def signal_exit_code(signum: int) -> int:
    """A process killed by (or stopping on) signal ``signum``, as container runtimes and shells report it."""
    return 128 + signum


# This process received SIGTERM (preemption, kubectl delete) and stopped after the checkpoint.
TERMINATED = signal_exit_code(signal.SIGTERM)

CODES = (
    ExitCode(OK, "done", "completed"),
    ExitCode(BAD_CONFIG, "fail", "bad configuration: retrying cannot help, the Job fails", "bad configuration"),
    ExitCode(DATA_UNAVAILABLE, "retry", "the dataset could not be obtained or failed verification"),
    ExitCode(PEER_LOST, "free",
             "a victim: a peer failed or was stopped first; not counted, the gang restarts from the checkpoint"),
    ExitCode(STALLED, "retry",
             "the gang stalled (a peer stopped answering, or the rendezvous did not assemble); counted once"),
    ExitCode(GPU_MISSING, "fail",
             "the pod asked for GPUs and sees fewer (resources.gpu.cpu_fallback: false): the Job fails",
             "fewer GPUs than asked for and resources.gpu.cpu_fallback is false"),
    ExitCode(RESTARTS_EXHAUSTED, "fail",
             "more of the gang's rounds failed without progress than max_restarts allows (restarted in place; a "
             "round that published a newer checkpoint is not counted): the Job fails (with replica groups: this "
             "group's index, while enough groups remain)",
             "more failed rounds than max_restarts"),
    ExitCode(NODE_LEFT, "leave",
             "this pod's node failed the gang's rounds with the same code since its last checkpoint: the pod leaves, not "
             "counted, and the Job replaces it (cordon the node the message names)", "the node keeps failing"),
    ExitCode(GROUP_LEFT, "leave",
             "a replica group stopped on request between two steps (a scale-down, deletion, preemption): the other "
             "groups hold its state; not counted, replaced while its index is in range", "a replica group left"),
    ExitCode(TERMINATED, "stop", "stopped by SIGTERM after its checkpoint (preemption, deletion); not counted",
             "stopped by SIGTERM after checkpointing"),
)
# Codes that are not the worker's own but that a pod often ends with, worded for the same views.
_OTHER_MEANINGS = {
    1: "the program failed (an error of its own)",
    137: "killed (SIGKILL: out of memory, or the grace period ran out)",
}


def taking(action: Action) -> tuple[ExitCode, ...]:
    """The codes whose action is ``action``, in ascending order."""
    return tuple(sorted((item for item in CODES if item.action == action), key=lambda item: item.code))


def codes_taking(*actions: Action) -> tuple[int, ...]:
    """The numbers of the codes whose action is one of ``actions``, in ascending order."""
    return tuple(sorted(item.code for item in CODES if item.action in actions))


def action(code: int) -> Action:
    """What the targets do on exit code ``code``: a code not in the table is the program's own failure (retry)."""
    return next((item.action for item in CODES if item.code == code), "retry")


def meaning(code: int) -> str:
    """What exit code ``code`` of a pod says, in words."""
    known = next((item.meaning for item in CODES if item.code == code), None) or _OTHER_MEANINGS.get(code)
    if known:
        return known
    if code > 128:
        return f"killed by signal {code - 128}"
    return "the program failed"
