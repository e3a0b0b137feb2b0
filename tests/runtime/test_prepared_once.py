"""A rank waiting for another's preparation (trainer_runtime.prepared_once) against torch's real TCPStore: one
blocking wait, no request per poll; the verdict at once; a store gone, a timeout and a signal each end the wait
with their own outcome."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import timedelta

import pytest

from trainer_runtime.peer_failures import PeerLost

torch_distributed = pytest.importorskip("torch.distributed")


def preparation(timeout: float = 60):
    from trainer_runtime.prepared_once import Preparation

    return Preparation("prepare the data", "preparing the data", "verdict", "global rank 0", timeout,
                       "DOWNLOAD_TIMEOUT")


@pytest.fixture
def server():
    store = torch_distributed.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    yield store


def client(server):
    return torch_distributed.PrefixStore("default_pg", torch_distributed.TCPStore(
        "127.0.0.1", server.port, None, False, timedelta(seconds=10)))


class Counted:
    """A store that counts what a waiting rank asks of it (its clones' requests included)."""

    def __init__(self, store, calls):
        self.store, self.calls = store, calls

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args):
            self.calls.append(name)
            result = method(*args)
            return Counted(result, self.calls) if name == "clone" else result
        return counted


def test_a_waiting_rank_sends_one_wait_and_learns_the_verdict_at_once(server):
    from trainer_runtime.prepared_once import wait_for

    preparer = client(server)
    calls: list[str] = []
    set_at = []

    def publish():
        time.sleep(1.0)
        set_at.append(time.monotonic())
        preparer.set("verdict", json.dumps({"ok": True, "result": "mnist"}))

    threading.Thread(target=publish).start()
    verdict = wait_for(Counted(client(server), calls), preparation(), lambda line: None)
    woke = time.monotonic() - set_at[0]
    assert verdict == {"ok": True, "result": "mnist"}
    assert calls == ["clone", "wait", "get"], calls  # a second of waiting cost one request, not five checks
    assert woke < 0.1, woke  # the server answers the wait when the key is set (polling: up to 0.2 s late)


def test_a_store_gone_while_waiting_is_a_peer_lost_at_once_in_one_line():
    """The store's host (torchrun of pod 0) ends while a rank waits in it: its connection closes under the wait."""
    import subprocess
    import sys

    from trainer_runtime.prepared_once import wait_for

    host = subprocess.Popen([sys.executable, "-c", (
        "import datetime, time, torch.distributed as d\n"
        "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=10), wait_for_workers=False)\n"
        "print(s.port, flush=True)\ntime.sleep(1.0)")], stdout=subprocess.PIPE, text=True)
    try:
        waiting = torch_distributed.TCPStore("127.0.0.1", int(host.stdout.readline()), None, False,
                                             timedelta(seconds=10))
        began = time.monotonic()
        with pytest.raises(PeerLost, match=r"^global rank 0 went away while preparing the data \(DistNetworkError: "
                                           r"[^\n]+\)$"):
            wait_for(waiting, preparation(), lambda line: None)
        assert time.monotonic() - began < 5  # not the wait's 60 s
    finally:
        host.kill()
        host.wait()


def test_a_preparation_past_its_timeout_is_said_with_the_setting(server):
    from trainer_runtime.prepared_once import wait_for

    with pytest.raises(PeerLost, match=r"^global rank 0 did not finish preparing the data within "
                                       r"DOWNLOAD_TIMEOUT=1 s$"):
        wait_for(client(server), preparation(timeout=1), lambda line: None)


def test_a_signal_while_waiting_is_handled_at_once(server):
    from trainer_runtime.prepared_once import wait_for

    class Stopped(Exception):
        pass

    def stop(signum, frame):
        raise Stopped

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    began = time.monotonic()
    try:
        with pytest.raises(Stopped):
            wait_for(client(server), preparation(timeout=60), lambda line: None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - began < 1.0  # not the wait's 60 s
