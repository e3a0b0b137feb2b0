"""MNIST's epoch cadence on every program's RunLog (trainer_runtime/run_log.py): a line every LOG_INTERVAL steps and
at each epoch's last, the epoch's lines (its average loss on every rank; its accuracy, speed and gradient sync on rank
0) and its record in metrics.jsonl and on the curves, whose x-axis is the training images processed so far."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainer_runtime.run_log import RunLog

# The epoch's scalars on the curves, as metrics.jsonl names them (epoch/<key>); every LOG_INTERVAL steps train/loss
# (rank 0's mini-batch) and train/learning_rate
EPOCH_SCALARS = ("loss", "accuracy", "learning_rate", "images_per_second", "sync_ms_per_step", "backward_ms_per_step")


class Progress(RunLog):
    def __init__(self, rank: int, output_dir: Path, epochs: int, log_interval: int, node: int = 0,
                 tensorboard: bool = False):
        super().__init__(rank, output_dir, log_interval, tensorboard, node)
        self.epochs, self.steps_per_epoch = epochs, 1  # set by begin()

    def begin(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        """Training starts (or resumes) at ``step`` of ``epoch`` (from 0): the clock of the elapsed time and ETA."""
        self.began, self.steps_before, self.steps_per_epoch = time.monotonic(), epoch * steps_per_epoch + step, \
            steps_per_epoch
        self.live.started(self.steps_before, output_dir=self.output_dir, node=self.node,
                          steps_per_epoch=steps_per_epoch)
        self.live.progress(self.steps_before, steps=self.epochs * steps_per_epoch, epoch=epoch + 1, epochs=self.epochs)

    def epoch_timing(self, epochs_done: int) -> str:
        """This start's elapsed time and the time left for the run, at the same pace."""
        return self.timing(epochs_done * self.steps_per_epoch - self.steps_before,
                           (self.epochs - epochs_done) * self.steps_per_epoch)

    def keep_epochs_up_to(self, epochs: int) -> None:
        """metrics.jsonl keeps only the epochs the checkpoint holds. An epoch recorded before its checkpoint was on
        disk (an asynchronous save cut short, CHECKPOINT_EVERY > 1) is trained again and recorded once."""
        self.keep_records_up_to("epoch", epochs, f"of epochs after {epochs}")

    def batch(self, epoch: int, step: int, steps: int, samples: int, loss: float | None, learning_rate: float,
              images: int) -> None:
        """A reported step (``due``) of ``epoch`` (from 0), with rank 0's mini-batch loss on the curves. ``loss`` is
        this rank's sum over ``samples``."""
        self.log(f"epoch: {epoch + 1}/{self.epochs}, batch: {step}/{steps}, mini-batch size: {samples}")
        self.live.progress(epoch * steps + step, steps=self.epochs * steps, epoch=epoch + 1, epochs=self.epochs)
        if loss is not None and samples:
            self.live.loss(loss / samples)
            if self.is_rank0:
                self.curves.add({"train/loss": loss / samples, "train/learning_rate": learning_rate}, images)

    def epoch(self, record: dict[str, Any], average_loss: float, accuracy: float) -> None:
        """The epoch's lines: its average loss (every rank), its accuracy and speed (rank 0); the unrounded
        figures, so the lines read as they always have."""
        epoch = record["epoch"]
        self.live.evaluation("accuracy", accuracy)
        self.live.throughput(record["images_per_second"], "samples")
        self.log(f"epoch {epoch}/{self.epochs}, average epoch loss={average_loss:.4f}")
        self.log0(f"epoch {epoch}/{self.epochs}, test accuracy={accuracy:.4f}, "
                  f"{record['images_per_second']:.0f} images/s, gradient sync "
                  f"{record['sync_ms_per_step']:.2f} ms/step (backward with sync {record['backward_ms_per_step']:.1f}), "
                  f"{self.epoch_timing(epoch)}")

    def record_epoch(self, record: dict[str, Any], images: int) -> None:
        """Rank 0 appends the epoch to metrics.jsonl and the curves."""
        self.record({**record, "time": round(time.time(), 3)},
                    {f"epoch/{key}": record[key] for key in EPOCH_SCALARS}, images)
