"""The question-answering run's checkpoints: what Lightning puts in one (model, optimizer, schedule, loops, and the
loader's place in the epoch) with the record of trainer_runtime.pretrained.checkpoint_record, written and read in
the runtime's own formats through Lightning's hooks (its CheckpointIO for one file, its strategy's save and load
for the shards): a verified file under DDP, a directory of every rank's shards with a manifest of digests under
FSDP (gathering the whole model and optimizer on rank 0 to write one file would cost that rank the memory FSDP
saves), whole or absent whatever moment a kill picks, named by the optimizer step and published by the run's
CheckpointStore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.strategies import ModelParallelStrategy

from trainer_contract import hooks
from trainer_runtime.checkpoints import safe_load, sharded, single_file
from trainer_runtime.checkpoints.clock import CheckpointClock
from trainer_runtime.checkpoints.store import CheckpointStore
from trainer_runtime.pretrained import checkpoint_record
from trainer_runtime.stop import Stopped, StopRequest, agreed


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's one-file checkpoints (DDP) in the runtime's single-file format: verified, written atomically,
    read through the runtime's allow-list."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        single_file.write_payload(Path(path), checkpoint)

    def load_checkpoint(self, path, map_location: Any | None = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        return single_file.read_payload(Path(path))


class ShardedModelParallelStrategy(ModelParallelStrategy):
    """Lightning's FSDP2 strategy, its checkpoints in the runtime's sharded format: every rank's shards of the
    model and optimizers through torch.distributed.checkpoint, the record in the manifest, the rest of Lightning's
    checkpoint (loops, schedulers, callbacks) in its extra file; read through safe_load's allow-lists, where
    Lightning's loader unpickles anything."""

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        path = Path(self.broadcast(filepath))  # every rank, one path
        shards = {"state_dict": checkpoint.pop("state_dict"),
                  **{f"optimizer_{index}": state for index, state in enumerate(checkpoint.pop("optimizer_states", []))}}
        record = checkpoint.pop(checkpoint_record.RECORD_KEY)
        sharded.write_shards(shards, record, path, self.global_rank, extra=checkpoint)

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(self.broadcast(checkpoint_path))
        if path.is_file():
            return super().load_checkpoint(path, weights_only=True)  # one file: through AtomicCheckpointIO
        legacy = path / checkpoint_record.LEGACY_SHARDED_RECORD_FILE
        if legacy.is_file() and not (path / sharded.MANIFEST).is_file():
            rest = safe_load.load(legacy, name=f"{path.name}/{legacy.name}")
        else:
            rest = {**sharded.read_extra(path), checkpoint_record.RECORD_KEY: sharded.verify(path)}
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
        return rest


class Checkpointing(L.Callback):
    """A checkpoint every ``every_steps`` optimizer steps (0: none by steps), when ``clock`` (CHECKPOINT_EVERY_SECONDS)
    is due, and at each epoch's end, after its evaluation, and of the step reached when the gang agrees to stop
    (``stop``: SIGTERM somewhere in it), which then raises Stopped. Every rank calls Lightning's save: under DDP rank
    0 writes the one file (AtomicCheckpointIO), under FSDP every rank its shards (ShardedModelParallelStrategy); rank 0
    then publishes it in ``store``. Lightning runs the backward, so the clock's vote cannot ride with the gradients:
    it rides with the stop's, in the one small all-reduce this callback runs after each step."""

    def __init__(self, store: CheckpointStore, every_steps: int, stop: StopRequest, clock: CheckpointClock):
        self.store, self.every_steps, self.stop, self.clock = store, every_steps, stop, clock

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # Lightning installed its own SIGTERM handler for the fit: it broadcasts from inside the signal handler and
        # ends the fit without a checkpoint. The run's StopRequest takes the signals back (they are remembered,
        # then agreed on at a step's end, below).
        self.stop.listen()
        self.clock.restart()  # CHECKPOINT_EVERY_SECONDS count training time, from here

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_index: int) -> None:
        if batch_index + 1 == trainer.num_training_batches:
            return  # the epoch's end saves it, loops and all, after the evaluation
        stopping, time_due = agreed((self.stop.requested, self.clock.due()), module.device)
        if stopping or time_due or (self.every_steps and trainer.global_step % self.every_steps == 0):
            self.save(trainer)
        if stopping:
            raise Stopped(f"step {trainer.global_step}")

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.save(trainer)
        if agreed((self.stop.requested,), module.device)[0]:
            raise Stopped(f"step {trainer.global_step}")

    def save(self, trainer: L.Trainer) -> None:
        hooks.point("checkpoint")
        path = self.store.directory / checkpoint_record.checkpoint_name(trainer.global_step)
        with self.clock.saving():  # the write is not training: the next interval starts once it is done
            trainer.save_checkpoint(path)  # whole or absent: each format writes beside, then renames into place
        if trainer.is_global_zero:
            self.store.published(path)
