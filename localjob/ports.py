"""Ports a pod binds later: free now, and outside the kernel's ephemeral range.

local-job chooses the Service's port once per Job and each pod of it binds that port when it starts, a replacement
tens of seconds later. A port the kernel hands out for outgoing connections (``bind(0)`` returns one) can become
any connection's source port in between, and the pod then fails to listen (EADDRINUSE): seen under load, where a
rank 0 exited 76 in a test that expected its planned 75. Ports below or above the ephemeral range are given only
to whoever binds them by number.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default where the file cannot be read; other systems' ranges (49152-65535) leave the low band free too.
DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 20000  # below this, ports that services claim by number (8080, 9000, 9090, the kubelet's 10250, ...)
TRIES = 64


def ephemeral_range(source: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    try:
        low, high = (int(word) for word in source.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def candidates(ephemeral: tuple[int, int]) -> list[range]:
    """The bands outside the ephemeral range (each empty one left out)."""
    low, high = ephemeral
    return [band for band in (range(LOWEST, low), range(high + 1, 65536)) if len(band) > 0]


def bindable(port: int) -> bool:
    """Whether a listener could bind ``port`` on every address now (as a pod's TCPStore or metrics server does)."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port(avoid: frozenset[int] = frozenset(), rng: random.Random | None = None) -> int:
    """A free port outside the ephemeral range (not in ``avoid``); the kernel's choice if none is found."""
    rng = rng or random.SystemRandom()
    bands = candidates(ephemeral_range())
    for _ in range(TRIES if bands else 0):
        port = rng.choice(rng.choices(bands, weights=[len(band) for band in bands])[0])
        if port not in avoid and bindable(port):
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports outside the ephemeral range."""
    chosen: list[int] = []
    for _ in range(count):
        chosen.append(free_port(frozenset(chosen)))
    return chosen
