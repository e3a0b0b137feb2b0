"""The ports local-job gives a Job's Service and its pods' metrics (localjob/ports.py): free when chosen, and never
from the kernel's ephemeral range, where an outgoing connection could take one before the pod binds it (a rank 0
exited 76, EADDRINUSE, in a control-plane parity run under load)."""

from __future__ import annotations

import random
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localjob import ports


@pytest.mark.parametrize(("text", "expected"), [
    ("32768\t60999\n", (32768, 60999)),
    ("1024 65535", (1024, 65535)),
    ("", ports.DEFAULT_EPHEMERAL),
    ("60999 32768", ports.DEFAULT_EPHEMERAL),  # inverted
    ("0 100", ports.DEFAULT_EPHEMERAL),
    ("32768 70000", ports.DEFAULT_EPHEMERAL),
    ("32768", ports.DEFAULT_EPHEMERAL),
    ("a b", ports.DEFAULT_EPHEMERAL),
])
def test_the_ephemeral_range_is_read_or_the_linux_default(tmp_path, text, expected):
    source = tmp_path / "ip_local_port_range"
    source.write_text(text)
    assert ports.ephemeral_range(source) == expected


def test_an_unreadable_range_file_means_the_linux_default(tmp_path):
    assert ports.ephemeral_range(tmp_path / "absent") == ports.DEFAULT_EPHEMERAL


@given(st.text(max_size=40))
def test_any_range_file_gives_a_valid_range(text):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "range"
        source.write_text(text)
        low, high = ports.ephemeral_range(source)
    assert 0 < low <= high <= 65535


@pytest.mark.parametrize(("ephemeral", "bands"), [
    ((32768, 60999), [range(ports.LOWEST, 32768), range(61000, 65536)]),
    ((1024, 65535), []),  # the whole space is ephemeral: the kernel's choice is all there is
    ((25000, 65535), [range(ports.LOWEST, 25000)]),
    ((5000, 30000), [range(30001, 65536)]),
    ((ports.LOWEST, 60999), [range(61000, 65536)]),
])
def test_the_candidates_are_the_bands_outside_the_range(ephemeral, bands):
    assert ports.candidates(ephemeral) == bands


def test_a_free_port_is_outside_the_ephemeral_range_and_bindable():
    low, high = ports.ephemeral_range()
    chosen = [ports.free_port() for _ in range(50)]
    assert all(not low <= port <= high for port in chosen), chosen
    for port in chosen[:5]:
        with socket.socket() as listener:
            listener.bind(("", port))
            listener.listen()


@pytest.fixture
def busy():
    """A port a listener holds for the test's duration."""
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_port_in_use_or_avoided_is_never_chosen(monkeypatch, busy):
    monkeypatch.setattr(ports, "candidates", lambda _: [range(busy, busy + 3)])
    assert ports.free_port(rng=random.Random(1)) in (busy + 1, busy + 2)
    assert ports.free_port(frozenset({busy + 1}), rng=random.Random(1)) == busy + 2


def test_without_a_free_candidate_the_kernel_chooses(monkeypatch, busy):
    monkeypatch.setattr(ports, "candidates", lambda _: [range(busy, busy + 1)])
    port = ports.free_port()
    assert port != busy and 0 < port <= 65535


def test_several_ports_are_distinct():
    chosen = ports.free_ports(20)
    assert len(set(chosen)) == 20
