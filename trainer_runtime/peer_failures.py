"""Which failures are the gang's communication (this rank a victim, or the leader giving up on a silent peer) and
which are this rank's own: the one mapping to exit codes for every workload (MNIST, finetune, sft, QA), so that a
peer's death costs the gang a restart, not a counted failure, whatever the program.

A victim exits PEER_LOST (75, not counted); rank 0 whose wait for a peer ran out exits STALLED (76, counted once:
a peer that stops answering exits nowhere); anything else (a RuntimeError of the model, the data, a bug) is not
this module's and propagates, counted as a failure."""

from __future__ import annotations

import re

import torch.distributed as dist

from trainer_contract import exit_codes

# Where gloo's transport raises from: torch wraps these in a plain RuntimeError whose first line names the
# source file ("[.../gloo/transport/tcp/pair.cc:545] Read error ...: Connection reset by peer", also inside
# "Gloo connectFullMesh failed with [...]"); it gives no exception type for them, unlike the store
# (DistStoreError), the network (DistNetworkError) and NCCL (DistBackendError).
_GLOO_TRANSPORT = re.compile(r"\[[^\]\s]*/gloo/transport/[^\]\s]*:\d+\]")


class PeerLost(RuntimeError):
    """A peer this rank waited for went away, gave up or did not answer in time (PEER_LOST: this rank a victim)."""


def is_communication_error(exc: BaseException) -> bool:
    """A failure of the gang's communication, by type (torch.distributed's DistError family) or, for gloo,
    by the transport's own source location; never by loose words."""
    if isinstance(exc, dist.DistError):
        return True
    return isinstance(exc, RuntimeError) and bool(_GLOO_TRANSPORT.search(_first_line(exc)))


def is_timeout(exc: BaseException) -> bool:
    """A peer that stopped answering: the store's or gloo's wait ran out (no type of its own in torch)."""
    text = _first_line(exc).lower()
    return "timed out" in text or "timeout" in text


def exit_for(exc: BaseException, is_rank0: bool) -> tuple[int, str] | None:
    """The exit code and the line that says it, for a communication failure; None for this rank's own."""
    if isinstance(exc, PeerLost):
        return exit_codes.PEER_LOST, f"error: {exc}"
    if not is_communication_error(exc):
        return None
    first_line = _first_line(exc) or type(exc).__name__
    if is_rank0 and is_timeout(exc):
        return exit_codes.STALLED, (f"error: a peer stopped answering ({first_line}); exiting so that the gang "
                                    "restarts from the last checkpoint")
    return exit_codes.PEER_LOST, (f"error: lost contact with a peer ({first_line}); exiting so that the gang "
                                  "restarts from the last checkpoint")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
