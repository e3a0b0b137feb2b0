"""What a run shows while it trains: every rank's log lines, rank 0's curves (TensorBoard) and metrics.jsonl, and
the live metrics each pod serves (trainer_runtime/metrics.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainer_contract.progress import format_duration, say
from trainer_runtime import metrics_file
from trainer_runtime.metrics import live
from trainer_runtime.tensorboard_log import Curves

# MNIST's scalars per epoch, as metrics.jsonl names them (epoch/<key>); every LOG_INTERVAL steps train/loss (rank 0's
# mini-batch) and train/learning_rate; the x-axis is the training images processed so far
EPOCH_SCALARS = ("loss", "accuracy", "learning_rate", "images_per_second", "sync_ms_per_step", "backward_ms_per_step")


class Progress:
    def __init__(self, rank: int, output_dir: Path, epochs: int, log_interval: int, node: int = 0):
        self.rank, self.output_dir, self.epochs, self.log_interval = rank, output_dir, epochs, log_interval
        self.is_rank0, self.node = rank == 0, node
        self.live = live(log=self.log)
        self.curves = Curves(False, output_dir, None, self.log)  # opened once the start is decided
        self.began, self.steps_before, self.steps_per_epoch = time.monotonic(), 0, 1  # set by begin()

    def begin(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        """Training starts (or resumes) at ``step`` of ``epoch`` (from 0): the clock of the elapsed time and ETA."""
        self.began, self.steps_before, self.steps_per_epoch = time.monotonic(), epoch * steps_per_epoch + step, \
            steps_per_epoch
        self.live.started(self.steps_before, output_dir=self.output_dir, node=self.node,
                          steps_per_epoch=steps_per_epoch)
        self.live.progress(self.steps_before, steps=self.epochs * steps_per_epoch, epoch=epoch + 1, epochs=self.epochs)

    def timing(self, epochs_done: int) -> str:
        """This start's elapsed time and the time left for the run, at the same pace."""
        elapsed = time.monotonic() - self.began
        done = epochs_done * self.steps_per_epoch - self.steps_before
        left = (self.epochs - epochs_done) * self.steps_per_epoch
        eta = format_duration(elapsed / done * left) if done > 0 else "unknown"
        return f"{format_duration(elapsed)} elapsed, {'done' if not left else 'about ' + eta + ' left'}"

    def log(self, message: str) -> None:
        say(self.rank, message)

    def log0(self, message: str) -> None:
        if self.is_rank0:
            self.log(message)

    def open_curves(self, enabled: bool, resume_at: int | None) -> None:
        """``resume_at``: images processed at the checkpoint resumed from; None for a fresh run."""
        if self.is_rank0:
            self.curves = Curves(enabled, self.output_dir, resume_at, self.log)

    def batch_due(self, step: int, steps: int) -> bool:
        """Whether step ``step`` (from 1) is reported: every LOG_INTERVAL steps and the epoch's last."""
        return step % self.log_interval == 0 or step == steps

    def batch(self, epoch: int, step: int, steps: int, samples: int, loss: float | None, learning_rate: float,
              images: int) -> None:
        """A reported step (``batch_due``) of ``epoch`` (from 0), with rank 0's mini-batch loss on the curves.
        ``loss`` is this rank's sum over ``samples``."""
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
                  f"{self.timing(epoch)}")

    def keep_records_up_to(self, epochs: int) -> None:
        """Rank 0, as training starts or resumes after ``epochs`` epochs: metrics.jsonl keeps only the epochs the
        checkpoint holds. An epoch recorded before its checkpoint was on disk (an asynchronous save cut short,
        CHECKPOINT_EVERY > 1) is trained again and recorded once, as TensorBoard's purge_step does for the curves."""
        if not self.is_rank0:
            return
        dropped = metrics_file.keep_up_to(self.output_dir, "epoch", epochs)
        if dropped:
            self.log(f"metrics.jsonl: dropped {dropped} record(s) of epochs after {epochs}, which this start trains "
                     "again")

    def record(self, record: dict[str, Any], images: int) -> None:
        """Rank 0 appends the epoch to metrics.jsonl and the curves."""
        if not self.is_rank0:
            return
        metrics_file.append(self.output_dir, {**record, "time": round(time.time(), 3)})
        self.curves.add({f"epoch/{key}": record[key] for key in EPOCH_SCALARS}, images, flush=True)

    def close(self) -> None:
        self.curves.close()
        self.live.close()
