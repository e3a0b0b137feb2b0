"""The question-answering model as Lightning trains it: any AutoModelForQuestionAnswering, sharded per transformer
block under STRATEGY=fsdp (FSDP2's fully_shard on the blocks the model names in ``_no_split_modules``, then on
the whole), AdamW with a linear decay, and an evaluation that turns every window's logits back into answers and
scores them as SQuAD does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer_contract import hooks
from trainer_runtime.pretrained.checkpoint_record import RECORD_KEY
from trainer_runtime.sampler import RankBatches
from trainer_runtime.strategies.fsdp import unmap_large_buffers_when_freed
from worker.qa import features as qa_features
from worker.qa.squad import Question
from worker.qa.squad_scores import score

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks (BertLayer, ...): the classes a Hugging Face model says must never be split."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in names]


class QuestionAnswering(L.LightningModule):
    def __init__(self, model: torch.nn.Module, *, learning_rate: float, total_steps: int, shard: bool,
                 shard_dtype: torch.dtype | None, train_batches: RankBatches, evaluation: Evaluation,
                 record: dict[str, Any], evaluated: Callable[[int, int, dict[str, float]], None]):
        super().__init__()
        self.model = model
        self.model.train()  # from_pretrained leaves it in eval mode
        self.learning_rate, self.total_steps = learning_rate, total_steps
        self.shard, self.shard_dtype, self.sharded = shard, shard_dtype, False
        self.train_batches, self.evaluation = train_batches, evaluation
        self.record, self.evaluated = record, evaluated  # what every checkpoint records; told each evaluation

    def configure_model(self) -> None:
        # Lightning calls this for every fit and validate; a module is sharded once
        if not self.shard or self.sharded:
            return
        self.sharded = True
        if self.device_mesh is None:  # train.py pairs STRATEGY=fsdp with ModelParallelStrategy, which makes one
            raise RuntimeError("STRATEGY=fsdp needs Lightning's ModelParallelStrategy (its device mesh)")
        mesh = self.device_mesh["data_parallel"]
        policy = MixedPrecisionPolicy(param_dtype=self.shard_dtype, reduce_dtype=torch.float32) \
            if self.shard_dtype is not None else MixedPrecisionPolicy()
        unmap_large_buffers_when_freed()  # the blocks' gathered parameters and gradients, freed at every step
        for block in transformer_blocks(self.model):
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(self.model, mesh=mesh, mp_policy=policy)

    def forward(self, batch: dict[str, torch.Tensor]):
        return self.model(**{key: batch[key] for key in MODEL_INPUTS if key in batch},
                          start_positions=batch.get("start_positions"), end_positions=batch.get("end_positions"))

    def on_train_epoch_start(self) -> None:
        self.train_batches.set_epoch(self.current_epoch)

    def on_train_batch_start(self, batch: dict[str, torch.Tensor], batch_index: int) -> None:
        hooks.point("batch", epoch=self.current_epoch + 1, batch=batch_index + 1)

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        loss = self(batch).loss
        # where the epoch stands for the loader's state_dict, which the checkpoint after this step saves
        self.train_batches.consumed = batch_index + 1
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> None:
        output = self(batch)
        self.evaluation.add(batch["index"], output.start_logits, output.end_logits)

    def on_validation_epoch_end(self) -> None:
        self.evaluation.finish()
        if self.evaluation.scores:
            self.evaluated(self.global_step, self.current_epoch + 1, self.evaluation.scores)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[RECORD_KEY] = self.record

    def optimizer_step(self, epoch: int, batch_index: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        super().optimizer_step(epoch, batch_index, optimizer, optimizer_closure)
        # the gradients are spent: freed now, not at the next backward (Lightning's zero_grad), so that the next
        # forward's activations do not come on top of them (docs/performance.md, FSDP's memory)
        optimizer.zero_grad(set_to_none=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.learning_rate, weight_decay=0.01)
        total = max(1, self.total_steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Evaluation:
    """Collects each rank's logits of the evaluation windows, gathers them, and scores the answers (every rank
    gets the same ``scores`` and ``predictions``)."""

    def __init__(self, questions: list[Question], features: qa_features.Features, max_answer_length: int):
        self.questions, self.features, self.max_answer_length = questions, features, max_answer_length
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.scores: dict[str, float] = {}
        self.predictions: dict[str, str] = {}

    def add(self, indexes: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> None:
        for index, start, end in zip(indexes.tolist(), starts.float().cpu().numpy(), ends.float().cpu().numpy(),
                                     strict=True):
            self.rows[index] = (start, end)

    def finish(self) -> None:
        rows = self.rows
        if dist.is_available() and dist.is_initialized():
            everyone: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, rows)
            rows = {index: row for part in everyone for index, row in part.items()}
        self.rows = {}
        if len(rows) < len(self.features):  # Lightning's sanity check runs a few batches only
            return
        ordered = [rows[index] for index in range(len(self.features))]
        self.predictions = qa_features.answers(self.questions, self.features, [row[0] for row in ordered],
                                               [row[1] for row in ordered], self.max_answer_length)
        self.scores = score(self.predictions, {item.id: item.answers for item in self.questions})
