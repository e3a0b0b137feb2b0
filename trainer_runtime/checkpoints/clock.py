"""CHECKPOINT_EVERY_SECONDS: whether a checkpoint is due by time, so that a fault costs at most that much training.

Only rank 0's clock votes (every other rank says no): the gang adds the votes up in a collective each step already
runs (beside the gradients, or beside the stop vote), so every rank learns in the same step that the time has come,
whatever the ranks' clocks say. A checkpoint under FSDP is a collective and under DDP every rank meets at its
barrier: a rank deciding on its own clock would leave the others waiting there.
"""

from __future__ import annotations

import time


class CheckpointClock:
    def __init__(self, every_seconds: float, votes: bool):
        """``every_seconds`` 0 never votes; ``votes``: this process is rank 0."""
        self.every_seconds, self.votes = every_seconds, votes
        self.restart()

    def restart(self) -> None:
        """From now: at training's start, and when a checkpoint's save returns (the training goes on). A synchronous
        write is not counted as training, so a write slower than the interval never makes checkpoints back to
        back."""
        self.since = time.monotonic()

    def due(self) -> bool:
        """This process's vote: rank 0's, once ``every_seconds`` have passed since ``restart``."""
        return self.votes and self.every_seconds > 0 and time.monotonic() - self.since >= self.every_seconds
