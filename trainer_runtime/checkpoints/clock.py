"""CHECKPOINT_EVERY_SECONDS: whether a checkpoint is due by time, so that a fault costs at most that much training.

Only rank 0's clock votes (every other rank says no): the gang adds the votes up in a collective each step already
runs (beside the gradients, or beside the stop vote), so every rank learns in the same step that the time has come,
whatever the ranks' clocks say. A checkpoint under FSDP is a collective and under DDP every rank meets at its
barrier: a rank deciding on its own clock would leave the others waiting there.

CHECKPOINT_EVERY_SECONDS=auto: the interval that loses the least training, Young and Daly's √(2 × C × M), from
what a save costs the training (C: the wait of the last save, measured; under CHECKPOINT_ASYNC the copy alone) and
the time between faults (M: interval.py's estimate from the gang's nodes and the faults this Job has seen), never
shorter than a write takes (a save due before the one in flight ends would wait for it). Said in the log whenever
it changes by a tenth.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from trainer_contract.settings import AUTO
from trainer_runtime.checkpoints import interval


class CheckpointClock:
    def __init__(self, every_seconds: float | str, votes: bool, nodes: int = 1,
                 log: Callable[[str], None] = lambda line: None):
        """``every_seconds`` 0 never votes, AUTO picks it; ``votes``: this process is rank 0; ``nodes`` and ``log``:
        AUTO's."""
        self.auto = every_seconds == AUTO
        self.every_seconds = interval.FIRST_SECONDS if self.auto else float(every_seconds)
        self.votes, self.nodes, self.log = votes, nodes, log
        self.write_seconds = 0.0  # how long the last write took (beside the training, or not)
        self.restart()

    def restart(self) -> None:
        """From now: at training's start, and when a save returns (the training goes on)."""
        self.since = time.monotonic()

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Around a save: what it costs the training is measured (AUTO's C), and the interval starts again once the
        training goes on (a synchronous write is not counted as training, so a write slower than the interval never
        makes checkpoints back to back)."""
        began = time.monotonic()
        yield
        if self.auto and self.votes:
            self._choose(time.monotonic() - began)
        self.restart()

    def written(self, seconds: float) -> None:
        """A save's write took ``seconds`` (from its thread, under CHECKPOINT_ASYNC)."""
        self.write_seconds = seconds

    def due(self) -> bool:
        """This process's vote: rank 0's, once ``every_seconds`` have passed since ``restart``."""
        return self.votes and self.every_seconds > 0 and time.monotonic() - self.since >= self.every_seconds

    def _choose(self, cost: float) -> None:
        from trainer_runtime.goodput import goodput_account

        account = goodput_account()  # the faults this Job recovered from, on rank 0 of a round restarted in place
        elapsed = time.time() - account.first_step if account.first_step is not None else 0.0
        chosen = interval.choose(cost, self.write_seconds, self.nodes, len(account.faults), elapsed)
        if abs(chosen.seconds - self.every_seconds) > 0.1 * self.every_seconds:
            self.log(chosen.line())
        self.every_seconds = chosen.seconds
