"""Whether node 0's rendezvous port answers: what lets a node waiting for the gang's next round read the shared
volume once a second and still join within a probe of the round's store (trainer_contract.gang_rounds:
wait_for_round's ``woken``).

Node 0 starts a round's store only after it announced the round, so while its port answers a new round may be there
to read: the waiting node reads the volume then, at most every OPEN_READ_SECONDS. Not only when the port comes up:
the last round's store may close and the next open between two probes (the simulation, bench/scale.py, showed
every recovery waiting for the next once-a-second read that way). A port answers only briefly before the waiting
node joins (the last round's store, until node 0's torchrun returns; the new one, until this node joins), so the
volume is read a few more times a round, not five times a second for long. The name is resolved once per wait (a
thousand pods probing ten times a second would otherwise ask the cluster's DNS ten thousand times a second) and
again, at most every RESOLVE_SECONDS, while nothing answers: index 0's replacement has a new address. Torch-free.
"""

from __future__ import annotations

import socket
import time

PROBE_TIMEOUT_SECONDS = 0.2
RESOLVE_SECONDS = 5.0
OPEN_READ_SECONDS = 0.25


class LeaderPort:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.address: tuple | None = None
        self.resolved_at = -RESOLVE_SECONDS
        self.was_open: bool | None = None  # None: not probed yet
        self.woke_at = -OPEN_READ_SECONDS  # when it last said to read
        self.lookups = 0  # name lookups made (the tests count them)

    def answers(self) -> bool:
        """Whether the port accepts a connection now; the name looked up on the first probe and again, at most every
        RESOLVE_SECONDS, while nothing answers. ``reason`` says why not."""
        now = time.monotonic()
        if self.address is None or (not self.was_open and now - self.resolved_at >= RESOLVE_SECONDS):
            self.resolved_at = now
            self.lookups += 1
            try:
                family, kind, protocol, _, address = socket.getaddrinfo(
                    self.host, self.port, type=socket.SOCK_STREAM)[0]
                self.address = (family, kind, protocol, address)
            except (OSError, IndexError):
                self.address = None
        is_open = False
        if self.address is not None:
            family, kind, protocol, address = self.address
            try:
                with socket.socket(family, kind, protocol) as probe:
                    probe.settimeout(PROBE_TIMEOUT_SECONDS)
                    probe.connect(address)
                is_open = True
            except OSError:
                is_open = False
        self.was_open = is_open
        return is_open

    @property
    def reason(self) -> str:
        """Why the port did not answer at the last probe."""
        return "its name does not resolve yet" if self.address is None else "not listening yet"

    def __call__(self) -> bool:
        """True when the port answers and OPEN_READ_SECONDS have passed since it last said so."""
        if not self.answers():
            return False
        now = time.monotonic()
        if now - self.woke_at >= OPEN_READ_SECONDS:
            self.woke_at = now
            return True
        return False
