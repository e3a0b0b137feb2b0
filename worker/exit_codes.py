"""The worker's exit codes; worker.launch makes them the pod's. The generator's podFailurePolicy keys on them
(BAD_CONFIG fails the Job, PEER_LOST is not counted); docs/reliability.md lists what each costs."""

OK = 0
# The configuration can never work (a bad EPOCHS, a missing variable): retrying cannot help, so the
# Job's podFailurePolicy fails the whole Job on this code (sysexits.h EX_CONFIG).
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
# This process received SIGTERM (preemption, kubectl delete) and stopped after the checkpoint (128 + 15).
TERMINATED = 143

# One line each, for the termination message, local-job's summary and `run.sh --status`.
MEANINGS = {
    OK: "completed",
    BAD_CONFIG: "bad configuration: retrying cannot help, the Job fails",
    DATA_UNAVAILABLE: "the dataset could not be obtained or failed verification",
    PEER_LOST: "a victim: a peer failed or was stopped first; not counted, the gang restarts from the checkpoint",
    STALLED: "the gang stalled (a peer stopped answering, or the rendezvous did not assemble); counted once",
    GPU_MISSING: "the pod asked for GPUs and sees fewer (resources.gpu.cpu_fallback: false): the Job fails",
    TERMINATED: "stopped by SIGTERM after its checkpoint (preemption, deletion); not counted",
    1: "the program failed (an error of its own)",
    137: "killed (SIGKILL: out of memory, or the grace period ran out)",
}


def meaning(code: int) -> str:
    """What exit code ``code`` of a pod says, in words."""
    if code in MEANINGS:
        return MEANINGS[code]
    if code > 128:
        return f"killed by signal {code - 128}"
    return "the program failed"
