"""Rank 0's TensorBoard curves in OUTPUT_DIR/tensorboard (TENSORBOARD=true, the default).

    tensorboard --logdir runs/local        # or the volume's OUTPUT_DIR

Every scalar's step is the number of training images processed so far, which, unlike a step count, means the
same at any world size and batch size, so the curves of a run resumed with another number of processes continue
in place. Per epoch: epoch/loss, epoch/accuracy, epoch/learning_rate, epoch/images_per_second,
epoch/sync_ms_per_step (communication waited for after backward) and epoch/backward_ms_per_step (backward with
the gradient communication it overlaps); every LOG_INTERVAL steps: train/loss (rank 0's mini-batch) and train/learning_rate.

A resumed run opens its writer with ``purge_step`` just past its checkpoint's step: TensorBoard then drops what the
interrupted run logged after the checkpoint, so no step appears twice and none is lost. Epoch scalars are flushed
when written.
"""

from __future__ import annotations

from pathlib import Path

SUBDIRECTORY = "tensorboard"
EPOCH_SCALARS = ("loss", "accuracy", "learning_rate", "images_per_second", "sync_ms_per_step", "backward_ms_per_step")


class Curves:
    def __init__(self, enabled: bool, output_dir: Path, resume_at: int | None, log):
        """``resume_at``: images processed at the checkpoint resumed from; None for a fresh run."""
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
        # a fresh run in an OUTPUT_DIR that has curves (RESUME=false, or killed before its first checkpoint)
        # replaces them from step 0
        purge = resume_at + 1 if resume_at is not None else (0 if directory.is_dir() else None)
        self.writer = SummaryWriter(str(directory), purge_step=purge, flush_secs=30)

    def batch(self, images: int, loss: float, learning_rate: float) -> None:
        if self.writer:
            self.writer.add_scalar("train/loss", loss, images)
            self.writer.add_scalar("train/learning_rate", learning_rate, images)

    def epoch(self, images: int, result: dict) -> None:
        if self.writer:
            for key in EPOCH_SCALARS:
                self.writer.add_scalar(f"epoch/{key}", result[key], images)
            self.writer.flush()

    def close(self) -> None:
        if self.writer:
            self.writer.close()
            self.writer = None
