"""One epoch's counts on one rank, and the epoch record built from the gang's totals: the metrics schema that
metrics.jsonl, the TensorBoard epoch scalars, model.json's accuracy/loss and the checkpoint's ``result`` share."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer_runtime.usage_log import cuda_peak_mib


@dataclass
class EpochTally:
    first_step: int  # where the epoch (re)started
    loss_sum: torch.Tensor  # this rank's summed loss, kept on the device (no sync per step)
    local_samples: int = 0
    global_samples: int = 0  # the gang's, as agreed in each step
    sync_seconds: float = 0.0
    backward_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)


def epoch_record(epoch: int, average_loss: float, accuracy: float, learning_rate: float, tally: EpochTally,
                 train_seconds: float, steps_per_epoch: int, world_size: int, strategy: str,
                 precision: str) -> dict[str, Any]:
    """The epoch's figures; on CUDA also this process's peak CUDA memory allocated so far (``cuda_peak_mib``: rank
    0's in metrics.jsonl, which only rank 0 writes; every rank of ddp and fsdp holds about as much)."""
    steps_run = max(steps_per_epoch - tally.first_step, 1)
    record = {
        "epoch": epoch,
        "loss": round(average_loss, 6),
        "accuracy": round(accuracy, 6),
        "learning_rate": learning_rate,
        "images_per_second": round(tally.global_samples / train_seconds, 1),
        "train_seconds": round(train_seconds, 3),
        "sync_ms_per_step": round(1000 * tally.sync_seconds / steps_run, 3),
        "backward_ms_per_step": round(1000 * tally.backward_seconds / steps_run, 3),  # sync included
        "world_size": world_size,
        "strategy": strategy,
        "precision": precision,
    }
    cuda_peak = cuda_peak_mib(torch.cuda.current_device() if torch.cuda.is_initialized() else None)
    if cuda_peak is not None:  # absent on the CPU
        record["cuda_peak_mib"] = round(cuda_peak, 1)
    return record
