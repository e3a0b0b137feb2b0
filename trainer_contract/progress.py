"""How progress is written for a person, the same in the worker's log lines and in every status view."""

from __future__ import annotations

import sys

# A process that waits (for the gang, for a peer preparing the data) says what it waits for this often, so that a
# long wait is never silent.
WAIT_REPORT_SECONDS = 15.0


def say(rank: int, message: str) -> None:
    """A line of the program's process of global rank ``rank`` (``Rank 0: epoch ...``, which the status views read),
    in one write: the gang's processes share torchrun's stdout, and a separate write of the newline lets another
    rank's line land in between."""
    sys.stdout.write(f"Rank {rank}: {message}\n")
    sys.stdout.flush()


def format_duration(seconds: float) -> str:
    """A duration as a person reads it: 42 s, 3 min 05 s, 2 h 07 min."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
