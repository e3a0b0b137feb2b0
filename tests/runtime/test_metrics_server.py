"""The live metrics endpoint is a server inside the training process, so it is bounded: real TCP clients against
trainer_runtime/metrics_server.py as the runtime serves it (metrics.Live)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from localjob.ports import free_port
from trainer_contract import metrics as contract
from trainer_runtime import metrics, metrics_server


@pytest.fixture
def live(monkeypatch):
    monkeypatch.setattr(metrics_server, "CONNECTION_SECONDS", 2.0)
    served = metrics.Live(free_port(), lambda line: None, address="127.0.0.1")
    served._set("step", 7)
    yield served
    served.close()


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return answer.read().decode()


def test_held_connections_cost_a_bounded_number_of_threads_and_a_scrape_still_answers(live):
    """300 clients connect and send nothing (half-open requests): the process starts at most MAX_CONNECTIONS
    threads for them (and as many cut-off timers), closes the rest at once, and answers a scrape once the held
    ones' time is up."""
    before = threading.active_count()
    held = []
    for _ in range(300):
        client = socket.create_connection(("127.0.0.1", live.port), timeout=5)
        held.append(client)
    time.sleep(0.5)
    assert threading.active_count() - before <= 2 * metrics_server.MAX_CONNECTIONS
    began = time.monotonic()
    while True:  # the held connections time out (2 s here), and a scrape gets a slot again
        try:
            assert contract.parse(scrape(live.port))["step"] == 7
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            assert time.monotonic() - began < 15, "no scrape answered"
            time.sleep(0.2)
    for client in held:
        client.close()
    time.sleep(0.3)
    assert threading.active_count() - before <= 2 * metrics_server.MAX_CONNECTIONS


def test_a_client_trickling_its_request_is_cut_off_at_the_connection_time(live):
    """A byte a second keeps each read under the socket's timeout: the connection's own deadline still ends it."""
    client = socket.create_connection(("127.0.0.1", live.port), timeout=10)
    began = time.monotonic()
    closed = False
    for byte in b"GET /metrics HTTP/1.0\r\nX-Slow: " + b"a" * 20:
        try:
            client.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        client.settimeout(1.0)
        try:
            if client.recv(1) == b"":
                closed = True
                break
        except TimeoutError:
            pass
    client.close()
    assert closed and time.monotonic() - began < 6


@pytest.mark.parametrize(("path", "code"), [("/", 404), ("/metrics/../etc/passwd", 404), ("/debug", 404)])
def test_only_the_metrics_path_is_answered(live, path, code):
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(live.port, path)
    assert refused.value.code == code
    assert "step" in scrape(live.port, "/metrics?name[]=x")  # a query is the same path


def test_the_address_variable_binds_loopback_only(monkeypatch):
    """local-job sets ADDRESS_VARIABLE to 127.0.0.1: nothing listens on the machine's other addresses."""
    port = free_port()
    monkeypatch.setattr(metrics, "_live", None)
    served = metrics.live({contract.PORT_VARIABLE: str(port), contract.ADDRESS_VARIABLE: "127.0.0.1"},
                          log=lambda line: None)
    try:
        assert served._server.server_address == ("127.0.0.1", port)
        scrape(port)
    finally:
        served.close()
        monkeypatch.setattr(metrics, "_live", None)


def test_a_replica_groups_quorum_and_its_committed_and_taken_again_steps_are_served(live):
    live.quorum(participants=2, attempted=12, committed=11)
    live.quorum(participants=1, attempted=13, committed=12)
    samples = contract.parse(scrape(live.port))
    assert samples["replica_groups_participating"] == 1
    assert samples['replica_group_steps{committed="true"}'] == 12
    assert samples['replica_group_steps{committed="false"}'] == 1
