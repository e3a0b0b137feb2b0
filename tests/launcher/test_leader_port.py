"""trainer_launcher/leader_port.py: a waiting node learns that index 0's store came up from its port, with one name
lookup per wait, and reads the volume only then or once a second (trainer_contract.gang_rounds.wait_for_round)."""

from __future__ import annotations

import socket
import threading
import time

from trainer_contract import gang_rounds
from trainer_contract.gang_rounds import READ_SECONDS, GangRounds
from trainer_launcher import leader_port
from trainer_launcher.leader_port import LeaderPort


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_port_says_to_read_while_it_answers_at_most_every_quarter_second_and_looks_the_name_up_once(monkeypatch):
    port = free_port()
    watch = LeaderPort("localhost", port)
    assert watch() is False and watch() is False  # nothing listens
    server = socket.create_server(("127.0.0.1", port))
    try:
        assert watch() is True  # it answers: read the volume
        began = time.monotonic()
        said = [watch() for _ in range(10)]  # at once again: not yet
        assert said == [False] * 10 or time.monotonic() - began >= leader_port.OPEN_READ_SECONDS
        time.sleep(leader_port.OPEN_READ_SECONDS)
        assert watch() is True  # still answering (a new round's store, the old one gone between probes)
        assert watch.lookups == 1
    finally:
        server.close()
    monkeypatch.setattr(leader_port, "RESOLVE_SECONDS", 0.0)
    assert watch() is False and watch() is False
    assert watch.lookups == 2  # down again: the name is looked up anew (index 0's replacement has a new address)


def test_a_waiting_node_reads_the_volume_once_a_second_and_joins_as_soon_as_the_port_comes_up(tmp_path, monkeypatch):
    (tmp_path / ".gang").mkdir()
    (tmp_path / ".gang" / "0.alive").write_text("t0 1\n")
    follower = GangRounds(tmp_path, 1, "t1", "job")
    reads = []
    real_read = gang_rounds.read_note
    monkeypatch.setattr(gang_rounds, "read_note", lambda path, *a: reads.append(path.name) or real_read(path, *a))
    port_up = threading.Event()

    def open_the_round():  # index 0 announces the round (as GangRounds.announce writes it), then its store comes up
        (tmp_path / ".gang" / "round").write_text("1 t0\n")
        port_up.set()

    threading.Timer(2.5, open_the_round).start()
    began = time.monotonic()
    generation = follower.wait_for_round(30, print, woken=lambda: port_up.is_set() and not reads.count("woken")
                                         and not reads.append("woken"))
    waited = time.monotonic() - began
    assert generation == 1 and 2.5 <= waited < 2.5 + 0.5  # within a probe of the store, not the next read
    rounds_read = reads.count("round")
    assert 3 <= rounds_read <= 4  # at 0, 1 and 2 s, and when woken: never 20 a second
    assert READ_SECONDS == 1.0


def test_waiting_for_index_0s_port_looks_its_name_up_once_and_probes_at_jittered_times(monkeypatch):
    """A thousand nodes whose round failed together neither ask the DNS at every probe nor probe in step."""
    from trainer_launcher import launch

    port = free_port()
    lookups, sleeps = [], []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: lookups.append(a[0]) or real(*a, **k))
    real_sleep = time.sleep
    monkeypatch.setattr(launch.time, "sleep", lambda seconds: sleeps.append(seconds) or real_sleep(seconds))
    server = []
    threading.Timer(1.5, lambda: server.append(socket.create_server(("127.0.0.1", port)))).start()
    args = launch.parse_args(["--nnodes=2", "--node-rank=1", "--nproc-per-node=1", "--rdzv-backend=static",
                              "--master-addr=localhost", f"--master-port={port}", "--rdzv-conf=timeout=30", "-m", "x"])
    try:
        assert launch.wait_for_leader(args) is None
    finally:
        for listening in server:
            listening.close()
    assert lookups == ["localhost"]  # once for the whole wait (the address stayed; nothing but the port was late)
    assert len(sleeps) >= 4 and len(set(sleeps)) == len(sleeps)  # never two probes the same interval apart
    assert all(0.5 * launch.LEADER_POLL_SECONDS <= gap <= 1.5 * launch.LEADER_POLL_SECONDS for gap in sleeps)
