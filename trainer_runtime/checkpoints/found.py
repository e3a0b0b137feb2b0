"""A checkpoint found on the volume and verified: what rank 0 tells every rank it resumes from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_runtime.checkpoints.state import TrainingState


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    state: TrainingState
    # the model and optimizer state of a single-file checkpoint, read once by rank 0 and sent to every rank;
    # None for a sharded one, which each rank reads its part of
    tensors: dict[str, Any] | None = None
