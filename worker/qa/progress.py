"""The question-answering run's lines, metrics.jsonl and TensorBoard scalars (trainer_runtime.run_log), fed
from Lightning's hooks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L

from trainer_runtime.run_log import RunLog


class ProgressLines(L.Callback):
    def __init__(self, run_log: RunLog):
        self.run_log = run_log
        self.losses: list[float] = []  # this rank's loss of each step since the last line

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.run_log.start(trainer.global_step, int(trainer.estimated_stepping_batches))

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        # the training step's loss, which Lightning hands on as {"loss": ...}
        self.losses.append(float((outputs["loss"] if isinstance(outputs, Mapping) else outputs).detach()))
        self.run_log.tokens += int(batch["attention_mask"].sum())
        if not self.run_log.due(trainer.global_step, batch_index + 1 == trainer.num_training_batches):
            return
        losses, self.losses = self.losses, []
        self.run_log.trained(epoch=trainer.current_epoch + 1, epochs=trainer.max_epochs or 1,
                             step=trainer.global_step, total=int(trainer.estimated_stepping_batches),
                             loss=sum(losses) / max(1, len(losses)),
                             learning_rate=trainer.optimizers[0].param_groups[0]["lr"])

    def evaluated(self, step: int, epoch: int, scores: dict[str, float]) -> None:
        self.run_log.evaluated(step, epoch, scores,
                               f"exact match {scores['exact_match']:.2f}, F1 {scores['f1']:.2f}")
