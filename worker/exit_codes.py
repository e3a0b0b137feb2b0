"""The worker's exit codes. The generator's podFailurePolicy keys on BAD_CONFIG; docs/ and the README list them."""

OK = 0
# The configuration can never work (a bad EPOCHS, a missing variable): retrying cannot help, so the
# Job's podFailurePolicy fails the whole Job on this code (sysexits.h EX_CONFIG).
BAD_CONFIG = 78
# The dataset could not be obtained or failed verification (sysexits.h EX_UNAVAILABLE).
DATA_UNAVAILABLE = 69
# A peer died, the rendezvous or a collective timed out, or a peer asked the gang to stop: the gang
# must be restarted from the last checkpoint (sysexits.h EX_TEMPFAIL).
PEER_LOST = 75
# This process received SIGTERM (preemption, kubectl delete) and stopped after the checkpoint (128 + 15).
TERMINATED = 143
