"""Every gang failure counts once against the Job's backoffLimit, also when no pod failed first.

The root cause's pod reports its own code (counted, or ignored by design: a preemption); its victims exit
PEER_LOST (75), which the Job's podFailurePolicy ignores. When every pod of a gang attempt exits as a victim (a
network outage, a shared-filesystem stall, a bug that breaks the communication everywhere at once), nothing
would count and the Job would restart the gang forever. So each pod's launcher notes how it ended in
OUTPUT_DIR/.gang/ (the volume the gang shares), and index 0's launcher, itself a victim, waits a few seconds for
the others: if one ended otherwise, that one explains the attempt and index 0 exits 75; if every pod ended as a
victim, index 0 exits STALLED (76), counted: the attempt costs one restart, once.

Each launcher removes its own note when it starts, so index 0 reads the notes of the attempt it is in. Torch-free.
"""

from __future__ import annotations

import time
from pathlib import Path

from worker import exit_codes
from worker.atomic import atomic_write

DIRECTORY = ".gang"
# How long index 0 waits for the other pods' notes: victims of one broken connection exit within seconds of
# each other, and a root cause's launcher notes its failure as soon as torchrun reports it. Only a pod that
# vanished whole (its launcher with it) leaves no note: then index 0 waits this long before exiting 75.
WAIT_SECONDS = 10.0
VICTIM, EXPLAINED = "victim", "explained"


class GangLedger:
    def __init__(self, output_dir: Path, node: int, nodes: int):
        self.directory, self.node, self.nodes = Path(output_dir) / DIRECTORY, node, nodes

    def start(self) -> None:
        """Remove this pod's note of an earlier attempt."""
        for kind in (VICTIM, EXPLAINED):
            (self.directory / f"{self.node}.{kind}").unlink(missing_ok=True)

    def note(self, code: int) -> None:
        """How this pod ends: as a victim (75), or otherwise (its own failure, a signal: the attempt's cause).
        Only into an OUTPUT_DIR that exists: a pod whose gang never assembled writes nothing."""
        kind = VICTIM if code == exit_codes.PEER_LOST else EXPLAINED
        if not self.directory.parent.is_dir():
            return
        try:
            atomic_write(self.directory / f"{self.node}.{kind}", f"{code}\n".encode())
        except OSError:  # the volume is unreachable: index 0 then finds no note from this pod, as if it vanished
            pass

    def nobody_failed_first(self, wait: float = WAIT_SECONDS, poll: float = 0.2) -> bool:
        """True once every pod has noted it ended as a victim; False as soon as one ended otherwise, or when
        ``wait`` seconds pass without every note (a pod that vanished whole is counted, or excused, by the Job)."""
        deadline = time.monotonic() + wait
        while True:
            notes = {path.name for path in self.directory.glob("*.*")} if self.directory.is_dir() else set()
            if any(name.endswith(f".{EXPLAINED}") for name in notes):
                return False
            if all(f"{node}.{VICTIM}" in notes for node in range(self.nodes)):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)
