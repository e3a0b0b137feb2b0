"""Node 0 keeps the rendezvous store up until every other node's agent is out of torchrun's exit barrier.

torchrun's static rendezvous hosts its TCPStore in node 0's agent, which runs in this launcher's process. The exit
barrier ends when the last agent arrives; node 0's agent then returns and its store closes, while a follower's
agent may still be between its arrival and its wait for the barrier's end. That agent loses the connection and
torch logs "Error waiting on exit barrier" with a traceback, although every worker finished and the job completes
(seen on Slurm, 8 ms into the barrier): a traceback in a successful job's log.

torch shares one TCPStore server per port within a process (the static rendezvous asks for multi-tenant stores).
So node 0's launcher opens a handle of its own on that port before torchrun starts, and after a completed round it
lets go only when each follower's launcher, its own torchrun returned, has counted itself out in the same store, or
after LINGER_SECONDS. A failed round lets go at once: the next round (in place) gets a fresh store.
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta

from torch.distributed import TCPStore
from torch.distributed.run import parse_min_max_nnodes

# A key of our own in torchrun's store: the count of followers whose torchrun has returned from a completed round.
LEFT_KEY = "indexed-trainer/left-exit-barrier"
LINGER_SECONDS = 10.0  # node 0 waits this long at most for the followers' count (they arrive within milliseconds)
POLL_SECONDS = 0.02
FOLLOWER_CONNECT_SECONDS = 2.0


def followers(args) -> int:
    """How many other nodes' agents share node 0's store: 0 when there is no such store (one node, standalone, or a
    rendezvous backend other than static, whose store torchrun does not host in node 0's agent)."""
    if args.standalone or args.rdzv_backend != "static" or not args.master_addr or not args.master_port:
        return 0
    _, most = parse_min_max_nnodes(str(args.nnodes))
    return max(most - 1, 0)


def hold(args) -> TCPStore | None:
    """Node 0's own handle on the store's server, opened before torchrun binds the port (torchrun's store then
    shares it); None on the other nodes, without followers, or when the port cannot be had (torchrun then says so
    itself, as it would have)."""
    if int(args.node_rank) != 0 or not followers(args):
        return None
    try:
        # libuv's server, said here because the gang at scale depends on it (torch's default since 2.4, made for jobs
        # past 1,024 ranks: PyTorch's libuv TCPStore tutorial); torchrun's store shares this server
        return TCPStore("127.0.0.1", int(args.master_port), None, True, timedelta(seconds=30),
                        wait_for_workers=False, multi_tenant=True, use_libuv=True)
    except (RuntimeError, OSError, ValueError):  # torchrun reports the port's problem, with its own exit code
        return None


def wait_for_followers(args, store: TCPStore, linger: float = LINGER_SECONDS) -> bool:
    """After a completed round, on node 0: True once every follower has counted itself out, False after ``linger``
    seconds (the run is complete either way; the pod's code does not change). A signal is the caller's."""
    expected = followers(args)
    deadline = time.monotonic() + linger
    try:
        while store.add(LEFT_KEY, 0) < expected:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)
    except (OSError, RuntimeError):
        return False
    return True


def count_out(args) -> bool:
    """After a completed round, on a follower: count this node out in node 0's store. False, quietly, when node 0's
    store no longer answers (it waited LINGER_SECONDS): a plain connection is tried first, since torch's client
    logs each failed attempt with a C++ stack. A signal is the caller's."""
    address = (args.master_addr, int(args.master_port))
    try:
        socket.create_connection(address, timeout=FOLLOWER_CONNECT_SECONDS).close()
        client = TCPStore(args.master_addr, int(args.master_port), None, False,
                          timedelta(seconds=FOLLOWER_CONNECT_SECONDS))
        client.add(LEFT_KEY, 1)
    except (OSError, RuntimeError):
        return False
    return True
