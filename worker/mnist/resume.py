"""What the MNIST worker's start makes of the checkpoint it finds (trainer_runtime.resume takes it up, rank 0 for
every rank): whether it may resume it, and where in its epoch the loop goes on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer_contract.checkpoint_layout import Position
from trainer_contract.program_settings import TrainConfig
from trainer_runtime.checkpoints.found import Checkpoint
from worker.mnist import finished_run


def refusals(config: TrainConfig, world_size: int, checkpoint: Checkpoint) -> list[str]:
    """Why ``checkpoint`` cannot be resumed by this start (trainer_runtime.resume): another shaping setting, or the
    middle of an epoch on another number of processes; [] if it can."""
    state, name = checkpoint.state, checkpoint.path.name
    problems = finished_run.changed_settings(state.config, config, f"checkpoint {name}")
    position = state.position
    if position.step and state.world_size != world_size:
        problems[:0] = [
            f"WORLD_SIZE: checkpoint {name} was taken in the middle of epoch {position.epoch + 1} (after "
            f"batch {position.step}) with {state.world_size} processes, now {world_size}: the rest of "
            f"that epoch's shards cannot be dealt to another number of processes. Run this epoch with "
            f"{state.world_size} processes (replicas x processes per pod), or remove {name} to "
            f"resume from the start of epoch {position.epoch + 1}"]
    return problems


@dataclass(frozen=True)
class ResumePoint:
    """Where the loop starts, and what the interrupted epoch already counted (rank 0 carries the gang's sums)."""

    position: Position = Position(0, 0)
    carried_loss: float = 0.0
    carried_samples: float = 0.0
    result: dict[str, Any] = field(default_factory=dict)  # the last finished epoch's metrics


def resume_point(checkpoint: Checkpoint | None, steps_per_epoch: int, is_rank0: bool,
                 log0: Callable[[str], None]) -> ResumePoint:
    if checkpoint is None:
        return ResumePoint()
    state = checkpoint.state
    position = state.position
    if position.step and state.steps_per_epoch != steps_per_epoch:
        log0(f"the checkpoint was taken with {state.steps_per_epoch} steps per epoch, now {steps_per_epoch}: "
             f"epoch {position.epoch + 1} starts over")
        position = Position(position.epoch, 0)
    carries = bool(position.step) and is_rank0
    return ResumePoint(position, state.epoch_loss_sum if carries else 0.0, state.epoch_samples if carries else 0.0,
                       state.result or {})
