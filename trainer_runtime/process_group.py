"""Start the gang's process group so that destroying it really ends it.

torch.distributed.nn.functional binds ``group.WORLD`` as default arguments when it is first imported, and
torch.optim imports it lazily (through torch._dynamo) when the first optimizer is built. Imported after
init_process_group, those defaults hold the default group for good: destroy_process_group cannot free it,
gloo's worker threads outlive it, and one of them may release the last collective's tensors while the
interpreter shuts down. That is std::terminate, SIGABRT, and a rank that finished its work exits -6, so torchrun
reports the gang failed (about 1 two-rank run in 10 here). Importing the module first keeps the group freeable.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist


def init_process_group(backend: str, **kwargs) -> None:
    import torch.distributed.nn  # noqa: F401  (must precede init_process_group; see the module docstring)

    dist.init_process_group(backend, **kwargs)


def round_store(nodes: int, timeout: timedelta):
    """The store of this round's process group where torchrun's agent serves one store for every round in place
    (one node: its rendezvous' store outlives a failed round), under a prefix of the round's own; None elsewhere (the
    default: env://). In that shared store the previous round's addresses stay under the same keys, and a rank that
    reads its peer's before the peer has written it again connects to a dead address (gloo: "connectFullMesh
    failed ... Connection refused"), failing a round that should start. Only on one node, where every rank counts
    the same restarts (several nodes' agents count their own, and a failed round there gets a fresh store)."""
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if nodes != 1 or restarts is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                           timeout=timeout)
    return dist.PrefixStore(f"indexed-trainer/round-{restarts}", shared)


def init_round_group(backend: str, nodes: int, rank: int, world_size: int, timeout: timedelta, **kwargs) -> bool:
    """This round's group on its round store (``round_store``) where torchrun serves one store for every round in
    place, and True; False elsewhere, where env:// is right (the caller's own start, or a framework's that starts a
    group only where none is up: Lightning). ``kwargs``: more of init_process_group's (device_id)."""
    store = round_store(nodes, timeout) if world_size > 1 else None
    if store is None:
        return False
    init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
    return True


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
