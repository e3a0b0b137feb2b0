"""The question-answering run's checkpoints: Lightning's own (model, optimizer, schedule, loops, and the loader's
place in the epoch) with the record of trainer_runtime.hub_models.checkpoint_record, written atomically (a kill mid-write
leaves the previous checkpoint whole) and named by the optimizer step. Under FSDP each rank writes its shards
(torch.distributed.checkpoint, through Lightning): gathering the whole model and optimizer on rank 0 to write one
file would cost that rank the memory FSDP saves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO

from trainer_contract import hooks
from trainer_contract.atomic import TEMP_PREFIX, fsync_directory
from trainer_runtime.hub_models import checkpoint_record

# Settings whose change makes a resumed run another run: the schedule, the batches, the features, the seed.
SHAPING = ("epochs", "batch_size", "learning_rate", "seed", "train_samples", "max_seq_length", "doc_stride")


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        checkpoint_record.write(checkpoint, Path(path))


class Checkpointing(L.Callback):
    """A checkpoint every ``every_steps`` optimizer steps (0: never mid-epoch) and at each epoch's end, after its
    evaluation; rank 0 keeps the newest ``keep``. Every rank calls Lightning's save: under DDP rank 0 writes the
    one file; ``sharded`` (FSDP), every rank its shards."""

    def __init__(self, directory: Path, every_steps: int, keep: int, sharded: bool):
        self.directory, self.every_steps, self.keep, self.sharded = directory, every_steps, keep, sharded

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        last = batch_index + 1 == trainer.num_training_batches  # the epoch's end saves it, loops and all
        if self.every_steps and trainer.global_step % self.every_steps == 0 and not last:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.save(trainer)

    def save(self, trainer: L.Trainer) -> None:
        hooks.point("checkpoint")
        path = self.directory / checkpoint_record.checkpoint_name(trainer.global_step)
        if not self.sharded:
            trainer.save_checkpoint(path)  # one file, through AtomicCheckpointIO
        else:
            self.save_sharded(trainer, path)
        if trainer.is_global_zero:
            checkpoint_record.prune(self.directory, self.keep)

    def save_sharded(self, trainer: L.Trainer, path: Path) -> None:
        """Every rank writes its own shards (nothing gathered: the point of FSDP's memory) into a temporary
        directory, which rank 0 renames into place once every rank is done: the checkpoint is whole or absent."""
        temporary = path.parent / f"{TEMP_PREFIX}{path.name}"
        if trainer.is_global_zero:
            checkpoint_record.remove(temporary)
        trainer.strategy.barrier()
        trainer.save_checkpoint(temporary)
        trainer.strategy.barrier()
        if trainer.is_global_zero:
            checkpoint_record.remove(path)
            temporary.rename(path)
            fsync_directory(path.parent)
        trainer.strategy.barrier()
