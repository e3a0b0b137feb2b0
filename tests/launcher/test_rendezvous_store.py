"""trainer_launcher/rendezvous_store.py: node 0's handle on torchrun's store, shared with the store torchrun's static
rendezvous makes on the same port, kept after a completed round until the followers have counted themselves out."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from tests.mnist.launch import free_port, worker_env
from trainer_launcher import rendezvous_store


def torchrun_args(node_rank: int, port: int, nnodes: str = "2", backend: str = "static",
                  standalone: bool = False) -> argparse.Namespace:
    return argparse.Namespace(node_rank=node_rank, nnodes=nnodes, rdzv_backend=backend, standalone=standalone,
                              master_addr="127.0.0.1", master_port=port)


@pytest.mark.parametrize(("nnodes", "backend", "standalone", "expected"), [
    ("2", "static", False, 1),
    ("4:4", "static", False, 3),
    ("1", "static", False, 0),  # one node: nobody to wait for
    ("2", "c10d", False, 0),  # torchrun's c10d backend does not host its store in node 0's agent this way
    ("1", "static", True, 0),  # --standalone
])
def test_followers_are_the_other_nodes_of_a_static_rendezvous(nnodes, backend, standalone, expected):
    assert rendezvous_store.followers(torchrun_args(0, 29500, nnodes, backend, standalone)) == expected


def answers(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_node_0s_handle_shares_torchruns_store_and_outlives_it():
    port = free_port()
    held = rendezvous_store.hold(torchrun_args(0, port))
    assert held is not None and rendezvous_store.hold(torchrun_args(1, port)) is None  # node 0's alone
    assert rendezvous_store.hold(torchrun_args(0, free_port(), nnodes="1")) is None  # one node: nobody to wait for
    # torchrun's static rendezvous on node 0: a multi-tenant master store on the same port, in the same process
    agents = TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=10), wait_for_workers=False, multi_tenant=True)
    agents.set("torchelastic/agent/terminal_state/last_member", "1")
    del agents  # torchrun returned: without node 0's handle, the server would close here
    follower = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=5))
    assert follower.get("torchelastic/agent/terminal_state/last_member") == b"1"
    del follower, held
    assert not answers(port)  # the last handle gone, the store is closed: the next round gets a fresh one


def test_node_0_waits_until_each_follower_counted_itself_out():
    port = free_port()
    args = torchrun_args(0, port, nnodes="3")
    held = rendezvous_store.hold(args)
    assert held is not None
    followers = [threading.Timer(0.3 * n, rendezvous_store.count_out, [torchrun_args(n, port, nnodes="3")])
                 for n in (1, 2)]
    began = time.monotonic()
    for follower in followers:
        follower.start()
    assert rendezvous_store.wait_for_followers(args, held, linger=20)
    assert 0.5 < time.monotonic() - began < 10  # the second follower's count ended the wait, not the linger
    for follower in followers:
        follower.join()


def test_node_0_stops_waiting_after_the_linger_when_a_follower_never_counts_out():
    port = free_port()
    args = torchrun_args(0, port)
    held = rendezvous_store.hold(args)
    began = time.monotonic()
    assert not rendezvous_store.wait_for_followers(args, held, linger=0.5)
    assert 0.5 <= time.monotonic() - began < 5


def test_a_follower_whose_node_0_is_gone_gives_up_at_once_and_quietly(capfd):
    port = free_port()
    began = time.monotonic()
    assert not rendezvous_store.count_out(torchrun_args(1, port))
    assert time.monotonic() - began < 3
    said = capfd.readouterr()
    assert said.out == "" and said.err == ""  # no C++ stack from torch's client retrying a refused connection


def test_a_sigterm_while_node_0_waits_ends_the_wait_and_the_pod_still_succeeds(capsys):
    """After torchrun returned, torch's SIGTERM handler is still the launcher's: a preemption in the wait raises
    SignalException, which ends the wait at once (the run is complete: the pod exits 0, saying why)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from trainer_launcher import launch

    def terminate(signum, frame):
        raise SignalException("SIGTERM", sigval=signal.SIGTERM)

    args = torchrun_args(0, free_port())
    held = rendezvous_store.hold(args)
    previous = signal.signal(signal.SIGALRM, terminate)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        began = time.monotonic()
        launch.leave_exit_barrier(args, held)  # nobody counts out: only the signal ends the wait
        assert time.monotonic() - began < 3
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert "SIGTERM received after the run completed, while leaving torchrun's exit barrier; exiting 0" in \
        capsys.readouterr().err


@pytest.mark.slow
def test_two_nodes_leave_the_exit_barrier_and_node_0_goes_last(tmp_path):
    """Two launchers over a static rendezvous, a program of the user's that only says its rank: node 0's waits
    for node 1's count (no line about the linger), and torch's agents log no exit-barrier error."""
    program = tmp_path / "hello.py"
    program.write_text("import os\nprint('rank', os.environ['RANK'], flush=True)\n")
    port = free_port()
    env = worker_env(tmp_path, tmp_path / "out")
    nodes = [subprocess.Popen([sys.executable, "-m", "worker.launch", "--nnodes=2", "--nproc-per-node=1",
                               f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}",
                               str(program)], env={**env, "JOB_COMPLETION_INDEX": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    logs = [node.communicate(timeout=180)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], logs
    assert "rank 0" in logs[0] and "rank 1" in logs[1]
    assert "not every other node said" not in logs[0], logs[0]
    assert "no longer answered" not in logs[1], logs[1]  # node 0 was still there to count node 1 out
    assert not any("Error waiting on exit barrier" in log for log in logs), logs
