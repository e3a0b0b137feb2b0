"""What the question-answering run shows while it trains: a line every LOG_INTERVAL steps with the loss, this
process's tokens per second, the elapsed time and an ETA; rank 0's metrics.jsonl (a record per reported step and
per evaluation) and TensorBoard scalars. A resumed run drops the records past its checkpoint first, so that no
step is recorded twice."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L

from trainer_contract.progress import format_duration

METRICS_FILE = "metrics.jsonl"


def say(rank: int, message: str) -> None:
    # one write per line: the gang's processes share torchrun's stdout
    sys.stdout.write(f"Rank {rank}: {message}\n")
    sys.stdout.flush()


def keep_records_up_to(output_dir: Path, step: int) -> None:
    """Rank 0, before a resumed run writes: metrics.jsonl keeps only what happened up to ``step``."""
    path = output_dir / METRICS_FILE
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


class ProgressLines(L.Callback):
    def __init__(self, rank: int, output_dir: Path, log_interval: int, tensorboard: bool):
        self.rank, self.output_dir, self.log_interval = rank, output_dir, log_interval
        self.tensorboard = tensorboard and rank == 0
        self.writer: Any = None
        self.began, self.steps_before, self.tokens, self.clock = time.monotonic(), 0, 0, time.monotonic()

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.began, self.clock, self.steps_before = time.monotonic(), time.monotonic(), trainer.global_step
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            keep_records_up_to(self.output_dir, trainer.global_step)
            if self.tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                # purge_step: a resumed run's curves replace what was written after its checkpoint
                self.writer = SummaryWriter(str(self.output_dir / "tensorboard"),
                                            purge_step=trainer.global_step or None)
        say(self.rank, f"training from step {trainer.global_step} of {trainer.estimated_stepping_batches}")

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        self.tokens += int(batch["attention_mask"].sum())
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        steps_per_epoch = trainer.num_training_batches
        if not (step % self.log_interval == 0 or batch_index + 1 == steps_per_epoch):
            return
        now = time.monotonic()
        losses, module.step_losses = module.step_losses, []
        loss = sum(losses) / max(1, len(losses))
        tokens_per_second = self.tokens / max(now - self.clock, 1e-9)
        self.tokens, self.clock = 0, now
        learning_rate = trainer.optimizers[0].param_groups[0]["lr"]
        done, elapsed = step - self.steps_before, now - self.began
        eta = f"about {format_duration(elapsed / done * (total - step))} left" if done and step < total else "done"
        say(self.rank, f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}, step {step}/{total}, loss "
            f"{loss:.4f}, {tokens_per_second:.0f} tokens/s, {format_duration(elapsed)} elapsed, {eta}")
        self.record({"step": step, "epoch": trainer.current_epoch + 1, "loss": round(loss, 6),
                     "learning_rate": learning_rate, "tokens_per_second": round(tokens_per_second, 1)},
                    {"train/loss": loss, "train/learning_rate": learning_rate,
                     "train/tokens_per_second": tokens_per_second})

    def evaluated(self, step: int, epoch: int, scores: dict[str, float]) -> None:
        if self.rank == 0:  # every rank holds the same scores
            say(self.rank, f"epoch {epoch}, evaluation: exact match {scores['exact_match']:.2f}, F1 {scores['f1']:.2f}")
        self.record({"step": step, "epoch": epoch, **{key: round(value, 4) for key, value in scores.items()}},
                    {f"eval/{key}": value for key, value in scores.items()})

    def record(self, line: dict[str, Any], scalars: dict[str, float]) -> None:
        if self.rank != 0:
            return
        with (self.output_dir / METRICS_FILE).open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        if self.writer is not None:
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, line["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
