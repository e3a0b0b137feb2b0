"""The question-answering run's checkpoints: Lightning's own (model, optimizer, schedule, loops, and the loader's
place in the epoch) with the record of trainer_runtime.hub_models.checkpoint_record, written atomically (a kill mid-write
leaves the previous checkpoint whole) and named by the optimizer step. Under FSDP each rank writes its shards
(torch.distributed.checkpoint, through Lightning): gathering the whole model and optimizer on rank 0 to write one
file would cost that rank the memory FSDP saves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.strategies import ModelParallelStrategy

from trainer_contract import hooks
from trainer_contract.atomic import TEMP_PREFIX, fsync_directory
from trainer_runtime.checkpoints import safe_load
from trainer_runtime.hub_models import checkpoint_record
from trainer_runtime.stop import StopRequest, agreed

if TYPE_CHECKING:
    from trainer_stager.checkpoint_mirror import CheckpointMirror

# Settings whose change makes a resumed run another run: the schedule, the batches, the features, the seed.
SHAPING = ("epochs", "batch_size", "learning_rate", "seed", "train_samples", "max_seq_length", "doc_stride")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's one-file checkpoints (DDP): written atomically, read through the runtime's allow-list."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        checkpoint_record.write(checkpoint, Path(path))

    def load_checkpoint(self, path, map_location: Any | None = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        return safe_load.load(Path(path))


class ShardedModelParallelStrategy(ModelParallelStrategy):
    """Lightning's FSDP2 strategy, its sharded checkpoints read by the runtime (safe_load.dcp_load: DCP's metadata
    and non-tensor items through allow-lists, where Lightning's loader unpickles anything)."""

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(self.broadcast(checkpoint_path))
        if not (path / checkpoint_record.SHARDED_RECORD_FILE).is_file():
            return super().load_checkpoint(path, weights_only=True)  # one file: torch.load with weights_only
        model = self.model
        assert model is not None
        module_state = {"state_dict": get_model_state_dict(model)}
        safe_load.dcp_load(module_state, path)
        model.load_state_dict(module_state["state_dict"])
        for index, optimizer in enumerate(self.optimizers):
            key = f"optimizer_{index}"
            optimizer_state = {key: get_optimizer_state_dict(model, optimizer)}
            safe_load.dcp_load(optimizer_state, path)
            set_optimizer_state_dict(model, optimizer, optim_state_dict=optimizer_state[key],
                                     options=StateDictOptions(cpu_offload=True))
        meta = path / checkpoint_record.SHARDED_RECORD_FILE
        return safe_load.load(meta, name=f"{path.name}/{meta.name}")


class Stopped(Exception):
    """The gang agreed to stop (SIGTERM somewhere in it); the step reached is checkpointed."""

    def __init__(self, step: int):
        super().__init__(f"stopped at step {step}")
        self.step = step


class Checkpointing(L.Callback):
    """A checkpoint every ``every_steps`` optimizer steps (0: never mid-epoch) and at each epoch's end, after its
    evaluation, and of the step reached when the gang agrees to stop (``stop``: SIGTERM somewhere in it), which
    then raises Stopped; rank 0 keeps the newest ``keep``. Every rank calls Lightning's save: under DDP rank 0
    writes the one file; ``sharded`` (FSDP), every rank its shards."""

    def __init__(self, directory: Path, every_steps: int, keep: int, sharded: bool, stop: StopRequest,
                 mirror: CheckpointMirror | None = None):
        self.directory, self.every_steps, self.keep, self.sharded = directory, every_steps, keep, sharded
        self.stop, self.mirror = stop, mirror

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # Lightning installed its own SIGTERM handler for the fit: it broadcasts from inside the signal handler and
        # ends the fit without a checkpoint. The run's StopRequest takes the signals back (they are remembered,
        # then agreed on at a step's end, below).
        self.stop.listen()

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        if batch_index + 1 == trainer.num_training_batches:
            return  # the epoch's end saves it, loops and all, after the evaluation
        stopping = agreed(self.stop.requested, module.device)
        if stopping or (self.every_steps and trainer.global_step % self.every_steps == 0):
            self.save(trainer)
        if stopping:
            raise Stopped(trainer.global_step)

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.save(trainer)
        if agreed(self.stop.requested, module.device):
            raise Stopped(trainer.global_step)

    def save(self, trainer: L.Trainer) -> None:
        hooks.point("checkpoint")
        path = self.directory / checkpoint_record.checkpoint_name(trainer.global_step)
        if not self.sharded:
            trainer.save_checkpoint(path)  # one file, through AtomicCheckpointIO
        else:
            self.save_sharded(trainer, path)
        if trainer.is_global_zero:
            checkpoint_record.published(path, self.keep, self.mirror)

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
