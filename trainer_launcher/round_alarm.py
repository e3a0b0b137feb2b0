"""A failed round in place (a built-in program's: trainer_launcher/recovery.py) reaches every pod of the gang at once,
whoever saw it first.

A worker that dies before the process group has formed leaves its peers blocked in the group's connect (gloo's full
mesh, NCCL's bootstrap), waiting for an address that will never be published, until the collective timeout
(COLLECTIVE_TIMEOUT, 300 s by default): measured on 2 pods, one early fault cost every pod 311 s. Past that point a dead
peer breaks its connections and the others fail within seconds, but not before it.

So over several nodes each launcher waits, beside its torchrun, in torchrun's own rendezvous store (node 0's: the static
rendezvous hosts it in node 0's agent) on one key of the round's, in blocking waits (a wait per node per WAIT_SECONDS at
most, never a poll). A launcher whose torchrun returned with a failure of its own (a crash, a killed worker, a stall, a
code that fails the Job) sets that key first; every other launcher wakes at once and stops its workers with SIGKILL: the
round is lost either way, and the next one resumes from the newest published checkpoint (a checkpoint cut off mid-write
was never published). Its pod then ends the round as a victim (75, uncounted), like a worker that lost its peers. Node
0's store closing under a wait stops the workers too: node 0's launcher lets go of it only once its own round has ended
(at once after a failure), or was lost whole; workers still running STORE_LOST_GRACE_SECONDS later (a program with no
collective, a worker hung in NCCL) are stopped. A launcher stopped by a signal (preemption: its workers checkpoint
together with the others), whose workers were stopped, or a victim (75) raises nothing. A program of the user's (no
rounds in place) has no alarm: how its processes end when a peer fails stays its own (its SIGTERM handling, the Job's
policy).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path

from torch.distributed import DistStoreError, TCPStore

from trainer_contract import exit_codes
from trainer_contract.gang_rounds import generation_of
from trainer_launcher import rendezvous_store

KEY = "indexed-trainer/round-{generation}/ended"  # set once, by the first launcher whose torchrun returned
FAILED, OVER = "failed", "over"  # its value: "failed <node> <code>" (the others stop), or "over <node>"
STORE_CLOSED = "store-closed"  # in place of a code: node 0's store closed while this node's round went on
STORE_LOST_GRACE_SECONDS = 10.0  # node 0's store gone: how long this node's round may take to end by itself
# One blocking wait's length: the key wakes it, and every launcher sets the key when its round ends, so this only
# bounds a wait nobody ends; a round lasts longer (weeks), and each wait that times out costs torch's warning line.
WAIT_SECONDS = 86400.0
CONNECT_SECONDS = 10.0  # the wait's connection to node 0's store, which is up before any torchrun joins it
# A connection that failed is tried again this long after, until the round ends: a gang's round opening makes every
# agent, worker and alarm connect to one store at once, and a connect that ran out then (seen with 16 pods on 2 CPUs)
# had left that node's workers without the alarm for the whole round.
CONNECT_RETRY_SECONDS = 1.0
SET_SECONDS = 1.0  # setting the key: a store that does not answer at once has ended its round (node 0's returned)
JOIN_SECONDS = 2.0  # how long a launcher waits for its alarm's thread once the key is set (it wakes at once)


def key(environ=os.environ) -> str:
    """This round's key (each round has a store of its own; the number keeps a late setter out of the next)."""
    return KEY.format(generation=generation_of(environ))


def raises_alarm(code: int, signalled: bool) -> bool:
    """Whether a round that ended here with ``code`` is one the other pods must stop for: a failure of this pod's
    own (a crash, a kill, a stall, a code that fails the Job); not a completed run, a signal to this launcher
    (preemption: the gang checkpoints together, then its workers stop), workers stopped by one, or a victim (75:
    a peer failed or stopped first, and that peer's launcher speaks for the round; a victim's alarm could cut the
    others' checkpoint on a preemption short)."""
    return not signalled and exit_codes.action(code) in ("retry", "fail")


class RoundAlarm:
    """This launcher's wait on the round's key, in a thread beside torchrun; ``fired`` says who failed it.

    Every launcher sets the key when its torchrun returns (compare-and-set: the first value stays), failed or over,
    which also ends its own wait: no thread is left blocked in the store when the round, or the process, ends."""

    def __init__(self, address: tuple[str, int], node: int, stop_workers: Callable[[], list[int]],
                 environ=os.environ):
        self.address, self.node, self.key, self.stop_workers = address, node, key(environ), stop_workers
        self.fired: str | None = None  # "<node> <code>" of the node that failed the round first
        self.stopped: list[int] = []  # the processes it stopped here
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._wait, name="round-alarm", daemon=True)

    @classmethod
    def beside(cls, args, spare: Iterable[int] = ()) -> RoundAlarm | None:
        """The alarm for this launcher's torchrun over several nodes (None alone, standalone, or where torchrun
        does not host the store in node 0's agent), started; its workers are this process's children other than
        ``spare`` (the warm-worker server)."""
        if not rendezvous_store.followers(args):
            return None
        spared = frozenset(spare)
        host = "127.0.0.1" if int(args.node_rank) == 0 else args.master_addr
        alarm = cls((host, int(args.master_port)), int(args.node_rank), lambda: kill_children(spared))
        alarm._thread.start()
        return alarm

    def _connect(self) -> TCPStore:
        # a plain connection first: torch's client logs each refused attempt with a C++ stack
        socket.create_connection(self.address, timeout=CONNECT_SECONDS).close()
        return TCPStore(*self.address, None, False, timedelta(seconds=CONNECT_SECONDS))

    def _client(self) -> TCPStore | None:
        """A connection to node 0's store, tried until this launcher's round ends (None then)."""
        while not self._done.is_set():
            try:
                return self._connect()
            except (OSError, RuntimeError, ValueError):
                self._done.wait(CONNECT_RETRY_SECONDS)
        return None

    def _wait(self) -> None:
        client = self._client()
        if client is None:
            return
        try:
            while True:
                try:
                    client.wait([self.key], timedelta(seconds=WAIT_SECONDS))
                    break
                except DistStoreError:  # the wait's own time ran out: the round goes on
                    if self._done.is_set():
                        return
            ended = client.get(self.key).decode(errors="replace").split()
        except (OSError, RuntimeError, ValueError):
            # node 0's store closed under the wait, or between the wake and the read: node 0's launcher left the round
            # (it lets go of the store at once after a failed round, only after this node counted out after a
            # completed one) or was lost whole. Either way the round is over for the gang. Workers that see it (a
            # collective's broken connection, the data's wait) end on their own within a second, saying why; any
            # still running after the grace are stopped rather than left until the collective timeout (16 pods on
            # 2 CPUs left 13 of 15 stand-ins, which do no collective, to train on when the read came too late).
            if self._done.wait(STORE_LOST_GRACE_SECONDS):
                return
            ended = [FAILED, "0", STORE_CLOSED]
        if len(ended) == 3 and ended[0] == FAILED and ended[1] != str(self.node) and not self._done.is_set():
            self.fired = f"{ended[1]} {ended[2]}"
            self.stopped = self.stop_workers()

    def end(self, code: int, signalled: bool) -> None:
        """This launcher's torchrun returned with ``code``: the key set (the others stop where it failed here first),
        and this launcher's own wait ended."""
        self._done.set()
        value = f"{FAILED} {self.node} {code}" if raises_alarm(code, signalled) else f"{OVER} {self.node}"
        try:
            # a plain connection first: torch's client retries a refused one until its timeout, and a launcher
            # stopped by a signal has only its grace period
            socket.create_connection(self.address, timeout=SET_SECONDS).close()
            TCPStore(*self.address, None, False, timedelta(seconds=SET_SECONDS)).compare_set(self.key, "", value)
        except (OSError, RuntimeError, ValueError):
            pass  # node 0's store is gone: its round has ended, and every wait in it with it
        self._thread.join(JOIN_SECONDS)

    def stopped_first(self, pid: int | None) -> bool:
        """Whether the worker that failed first here (``pid``: torchrun's root cause) was one this alarm stopped: a
        victim of the node that failed the round; not a worker that had failed on its own before the alarm."""
        return self.fired is not None and pid in self.stopped

    def describe(self) -> str:
        node, _, code = (self.fired or "? ?").partition(" ")
        if code == STORE_CLOSED:
            return f"index {node} (its rendezvous store closed: its launcher left the round)"
        return f"index {node} (exit {code})"


def kill_children(spare: frozenset[int], proc: Path = Path("/proc")) -> list[int]:
    """SIGKILL every child of this process (torchrun's workers, or the stand-ins of warm workers, whose workers die
    with them) but ``spare``; the pids killed."""
    me, killed = os.getpid(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in spare:
            continue
        try:
            # the parent is the 4th field, after the command's name in parentheses (which may hold spaces)
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not readable
        if parent == me:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed
