"""What a checkpoint records besides the model and optimizer: the trainer's state schema, in one place.

Both formats store ``TrainingState.to_record()`` (in the file beside the tensors, in a sharded directory's
manifest), so its keys are the on-disk schema; ``from_record`` reads checkpoints written by earlier versions too
(keys added later get their defaults). Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainer_contract.checkpoint_layout import Position


@dataclass(frozen=True)
class TrainingState:
    position: Position
    steps_per_epoch: int
    world_size: int
    # the interrupted epoch's running loss sum and sample count (rank 0's totals over the gang), so that a
    # resumed epoch reports the same average as an uninterrupted one; 0 at an epoch boundary
    epoch_loss_sum: float = 0.0
    epoch_samples: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)  # worker.mnist.finished_run.recorded_config
    result: dict[str, Any] | None = None  # the last finished epoch's metrics: a run resumed at its end reports them
    strategy: str = ""
    scaler: dict[str, Any] | None = None  # the gradient scaler's state under fp16
    started_at: float | None = None  # when the run's first start began (Unix time): model.json's duration

    def to_record(self) -> dict[str, Any]:
        return {**asdict(self), "position": asdict(self.position)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrainingState:
        return cls(
            position=Position(**record["position"]),
            steps_per_epoch=record["steps_per_epoch"],
            world_size=record["world_size"],
            epoch_loss_sum=record.get("epoch_loss_sum", 0.0),
            epoch_samples=record.get("epoch_samples", 0.0),
            config=record.get("config") or {},
            result=record.get("result"),
            strategy=record.get("strategy", ""),
            scaler=record.get("scaler"),
            started_at=record.get("started_at"),
        )
