"""trainer_launcher/round_alarm.py against a real TCPStore and real processes: the first launcher whose round ends
sets the round's key, the others' waits wake at once and stop their workers only where it failed; every wait ends
with its own launcher's round. The end-to-end run (a worker lost before the process group formed) is under local-job:
tests/localjob/test_gang_on_local_job.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore

from tests.conftest import OUTSIDE
from tests.mnist.launch import free_port
from trainer_contract import exit_codes
from trainer_launcher import round_alarm
from trainer_launcher.round_alarm import RoundAlarm


@pytest.fixture
def store():
    """Node 0's store, as torchrun's static rendezvous hosts it (a server in node 0's launcher)."""
    port = free_port()
    server = TCPStore("127.0.0.1", port, None, True, timedelta(seconds=10), wait_for_workers=False, multi_tenant=True)
    yield port, server


class Workers:
    """What an alarm stops: the calls, and when."""

    def __init__(self):
        self.stopped = threading.Event()

    def __call__(self) -> list[int]:
        self.stopped.set()
        return [4242]


def alarms(port: int, nodes: int, generation: int = 3) -> list[tuple[RoundAlarm, Workers]]:
    made = []
    for node in range(nodes):
        workers = Workers()
        alarm = RoundAlarm(("127.0.0.1", port), node, workers, {"INDEXED_TRAINER_GANG_ROUND": str(generation)})
        alarm._thread.start()
        made.append((alarm, workers))
    return made


def test_a_failed_round_stops_every_other_nodes_workers_at_once_and_is_told_by_who(store):
    port, _ = store
    (zero, zero_workers), (one, one_workers), (two, two_workers) = alarms(port, 3)
    time.sleep(0.3)  # every wait is in the store
    began = time.monotonic()
    one.end(137, signalled=False)  # node 1's worker crashed: its torchrun returned
    assert zero_workers.stopped.wait(5) and two_workers.stopped.wait(5)
    assert time.monotonic() - began < 5  # not a poll's period, nor the collective timeout
    assert not one_workers.stopped.is_set() and one.fired is None
    assert zero.fired == "1 137" and zero.describe() == "index 1 (exit 137)"
    assert zero.stopped_first(4242) and not zero.stopped_first(99) and not one.stopped_first(4242)
    for alarm in (zero, two):
        alarm.end(exit_codes.PEER_LOST, signalled=False)
        assert not alarm._thread.is_alive()


@pytest.mark.parametrize(("code", "signalled"), [(0, False), (exit_codes.TERMINATED, False), (137, True),
                                                 (exit_codes.PEER_LOST, False)])
def test_a_round_over_or_stopped_by_a_signal_stops_nobody_and_ends_every_wait(store, code, signalled):
    """A completed round, workers stopped by SIGTERM, a launcher preempted (its gang checkpoints together), a victim
    whose peer speaks for the round: the first to end sets the key to "over"; the others' waits end without stopping
    anything, and a failure after that stops nobody either (the round is over for the gang)."""
    port, _ = store
    (zero, zero_workers), (one, one_workers) = alarms(port, 2)
    time.sleep(0.3)
    zero.end(code, signalled=signalled)
    one._thread.join(5)
    assert not one._thread.is_alive() and not zero._thread.is_alive()
    one.end(137, signalled=False)
    assert not zero_workers.stopped.is_set() and not one_workers.stopped.is_set()
    assert zero.fired is None and one.fired is None


def test_an_alarm_outlasts_its_waits_running_out(store, monkeypatch):
    """A round lasts longer than one wait (weeks against a day): a wait that runs out is waited again, and the
    alarm still stops the workers when the round fails after it."""
    monkeypatch.setattr(round_alarm, "WAIT_SECONDS", 0.3)
    port, _ = store
    (zero, zero_workers), (one, _) = alarms(port, 2)
    time.sleep(1.2)  # several waits ran out
    assert zero._thread.is_alive()
    one.end(137, signalled=False)
    assert zero_workers.stopped.wait(5) and zero.fired == "1 137"


def test_a_rounds_key_is_its_own(store):
    """A launcher of the next round (a later generation) is not stopped by a late setter of the last one's."""
    port, _ = store
    [(late, late_workers)] = alarms(port, 1, generation=4)
    time.sleep(0.3)
    [(earlier, _)] = alarms(port, 1, generation=3)
    earlier.node = 1
    earlier.end(137, signalled=False)
    time.sleep(0.5)
    assert not late_workers.stopped.is_set() and late._thread.is_alive()
    late.end(0, signalled=False)
    assert not late._thread.is_alive()


def test_without_a_store_the_alarm_tries_until_its_round_ends_and_stops_nobody(monkeypatch):
    monkeypatch.setattr(round_alarm, "CONNECT_SECONDS", 0.5)
    monkeypatch.setattr(round_alarm, "CONNECT_RETRY_SECONDS", 0.2)
    port = free_port()  # nothing listens there
    [(alarm, workers)] = alarms(port, 1)
    time.sleep(1.0)
    assert alarm._thread.is_alive()  # still trying: the round goes on
    alarm.end(137, signalled=False)  # says nothing, raises nothing, and ends the tries
    assert not alarm._thread.is_alive() and not workers.stopped.is_set()


def test_an_alarm_whose_first_connects_fail_still_stops_its_workers(monkeypatch):
    """A round's opening makes every agent, worker and alarm of the gang connect to one store at once: a connect that
    runs out then is tried again, so the node's workers are not left without the alarm for the whole round (16 pods
    on 2 CPUs, python -m bench.gang, left 6 of them to train on after index 0 had failed)."""
    monkeypatch.setattr(round_alarm, "CONNECT_SECONDS", 0.5)
    monkeypatch.setattr(round_alarm, "CONNECT_RETRY_SECONDS", 0.2)
    port = free_port()
    [(alarm, workers)] = alarms(port, 1)
    time.sleep(1.5)  # its first connects failed: nothing listened yet
    server = TCPStore("127.0.0.1", port, None, True, timedelta(seconds=10), wait_for_workers=False,
                      multi_tenant=True)
    time.sleep(1.0)  # it connects on a later try
    failing = RoundAlarm(("127.0.0.1", port), 1, Workers(), {"INDEXED_TRAINER_GANG_ROUND": "3"})
    failing._thread.start()
    failing.end(137, signalled=False)  # node 1's worker crashed
    assert workers.stopped.wait(5) and alarm.fired == "1 137"
    alarm.end(exit_codes.PEER_LOST, signalled=False)
    del server


def closed_under_the_wait(monkeypatch, key_set: bool):
    """Node 0's store with both nodes' alarms waiting in it, closed (after setting a failed round's key, or not)."""
    monkeypatch.setattr(round_alarm, "STORE_LOST_GRACE_SECONDS", 1.0)
    port = free_port()
    server = TCPStore("127.0.0.1", port, None, True, timedelta(seconds=10), wait_for_workers=False, multi_tenant=True)
    made = alarms(port, 2)
    time.sleep(0.3)  # both waits are in the store
    if key_set:
        server.set(round_alarm.key({"INDEXED_TRAINER_GANG_ROUND": "3"}), f"{round_alarm.FAILED} 0 137")
    del server
    return made


@pytest.mark.parametrize("key_set", [True, False], ids=["after-setting-the-key", "lost-whole"])
def test_node_0s_store_closing_under_the_wait_stops_the_workers_still_running_after_the_grace(monkeypatch, key_set):
    """Node 0's launcher lets go of its store at once after a failed round (its key just set), and a node lost whole
    takes it along: a follower whose read of the key came after the close (16 pods on 2 CPUs: 13 of 15 trained on)
    or that never saw a key stops its workers all the same once they outlived the grace, and says whose store it
    was; node 0's own alarm does not."""
    (zero, zero_workers), (one, one_workers) = closed_under_the_wait(monkeypatch, key_set)
    if not key_set:
        assert not one_workers.stopped.wait(0.5)  # the grace: workers that see it end by themselves, saying why
    assert one_workers.stopped.wait(10)
    assert one.fired in ("0 137", f"0 {round_alarm.STORE_CLOSED}")
    assert one.describe() in ("index 0 (exit 137)", "index 0 (its rendezvous store closed: its launcher left the round)")
    assert one.stopped_first(4242)
    zero._thread.join(5)
    assert not zero_workers.stopped.is_set() and zero.fired is None
    one.end(exit_codes.PEER_LOST, signalled=False)  # the store is gone: says nothing, raises nothing
    assert not one._thread.is_alive()


def test_a_round_that_ends_within_the_grace_after_node_0s_store_closed_stops_nothing(monkeypatch):
    """The workers saw node 0 go (gloo's broken connection, the data's wait) and ended on their own, with their
    own line: their torchrun returned within the grace, and the alarm stopped nobody."""
    (zero, _), (one, one_workers) = closed_under_the_wait(monkeypatch, key_set=False)
    time.sleep(0.3)
    one.end(exit_codes.PEER_LOST, signalled=False)
    assert not one._thread.is_alive() and not one_workers.stopped.is_set() and one.fired is None
    zero.end(exit_codes.PEER_LOST, signalled=False)


def test_only_several_nodes_over_the_static_rendezvous_wait():
    args = SimpleNamespace(standalone=False, rdzv_backend="static", master_addr="127.0.0.1", master_port=1,
                           nnodes="1", node_rank=0)
    assert RoundAlarm.beside(args) is None
    assert RoundAlarm.beside(SimpleNamespace(**{**vars(args), "standalone": True, "nnodes": "2"})) is None


# In a process of its own: this one's children may be servers that other tests' fixtures started.
KILLING = """
import json, subprocess, sys
from trainer_launcher.round_alarm import kill_children
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
killed = kill_children(frozenset({children[0].pid}))
codes = [child.wait(10) for child in children[1:]]
alive = children[0].poll() is None
children[0].kill()
print(json.dumps({"killed": sorted(killed), "others": sorted(c.pid for c in children[1:]), "codes": codes,
                  "spared_alive": alive}))
"""


def test_the_workers_are_every_child_but_the_spared_ones():
    """torchrun's workers (or warm workers' stand-ins) are the launcher's children; the warm-worker server is one too
    and must live on for the next round."""
    result = subprocess.run([sys.executable, "-c", KILLING], capture_output=True, text=True, timeout=60,
                            cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["killed"] == seen["others"] and seen["codes"] == [-9, -9] and seen["spared_alive"]
