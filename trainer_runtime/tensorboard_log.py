"""Rank 0's TensorBoard curves in OUTPUT_DIR/tensorboard (TENSORBOARD=true, the default), every program's one
writer of them.

    tensorboard --logdir runs/local        # or the volume's OUTPUT_DIR

A program chooses its x-axis: MNIST the training images processed so far (the same at any world size and batch
size, so the curves of a run resumed with another number of processes continue in place), the transformer workloads
the optimizer step (the same at any world size under GLOBAL_BATCH_SIZE).

A resumed run opens the writer with ``purge_step`` just past its checkpoint's point: TensorBoard then drops what the
interrupted run logged after the checkpoint, and keeps what it logged at it (the resumed run does not log that point
again), so no point appears twice and none is lost, as metrics.jsonl keeps its records up to the checkpoint. A fresh
run in an OUTPUT_DIR that has curves (one killed before its first checkpoint) replaces them from the start. Without
the tensorboard package the run goes on, said once, with its curves in metrics.jsonl only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

SUBDIRECTORY = "tensorboard"


class Curves:
    def __init__(self, enabled: bool, output_dir: Path, resume_at: int | None, log: Callable[[str], None]):
        """``resume_at``: the x of the checkpoint resumed from; None for a fresh run."""
        self.writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log("TENSORBOARD: the tensorboard package is not installed (pip install tensorboard); the curves are "
                "in metrics.jsonl only")
            return
        directory = output_dir / SUBDIRECTORY
        purge = resume_at + 1 if resume_at is not None else (0 if directory.is_dir() else None)
        self.writer = SummaryWriter(str(directory), purge_step=purge, flush_secs=30)

    def add(self, scalars: Mapping[str, float], x: int, flush: bool = False) -> None:
        """``scalars`` (tag: value) at ``x``; ``flush``: on disk now (a record a crash must not lose)."""
        if self.writer is None:
            return
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, x)
        if flush:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
