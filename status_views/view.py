"""One shape for every engine's view of a job, torchx's scheduler interface reduced to what a user asks of it: what
is the job doing (`JobState.lines`, what `--status` prints), and wait until it ends (`follow`, the same poll for
every engine). Each engine's module reads its own JobState: kubernetes.py (kubectl), slurm.py (scontrol) and
local-job's status (its status file)."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class JobState:
    lines: list[str]  # what the status view prints
    change: Hashable = ()  # the facts whose change a wait reports: the state, never the clock
    exit_code: int | None = None  # once the job has ended: its exit code (0 Complete); None while it has not


class ViewError(Exception):
    """The engine could not be read now (a time-out, a refused connection): a wait says so and tries again."""


class JobGone(ViewError):
    """The engine no longer knows the job: its exit code is unknown, a wait ends with 1."""


def follow(read: Callable[[], JobState], interval: float, say: Callable[[str], None], subject: str) -> int:
    """Poll ``read`` until the job has ended, saying its lines each time its state changes; its exit code."""
    said: Hashable = None
    while True:
        try:
            state: JobState | None = read()
        except JobGone as gone:
            say(str(gone))
            return 1
        except ViewError as error:
            say(f"cannot read {subject} now, retrying: {error}")
            state = None
        if state is not None and state.change != said:
            for line in state.lines:
                say(line)
            said = state.change
        if state is not None and state.exit_code is not None:
            return state.exit_code
        time.sleep(interval)
