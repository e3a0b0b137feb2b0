"""The model read once where the strategy allows: under a strategy that shards the parameters (fsdp, hsdp) rank 0
reads the weights, and every other rank builds the model from its configuration on the meta device (no file read, no
memory taken) and gets its shard from rank 0 once the model is sharded (trainer_runtime/strategies/fsdp.py). A node
then holds one whole copy at most, not one per process (8 x 15 GB for a 7B model in bf16 on a node of 8 GPUs). Under
ddp and allreduce every rank trains a whole copy: each reads it."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from trainer_runtime import strategies

# Set (to anything but empty) in a process's environment: every rank reads the weights, as before this module; what
# python -m bench.transformers measures the shared load against.
EVERY_RANK_READS_VARIABLE = "INDEXED_TRAINER_EVERY_RANK_READS"


def reads_weights(strategy: str) -> bool:
    """Whether this process reads the model's weights: rank 0 always, another rank only under a strategy that keeps
    a whole copy on every rank (the process group is up: the gang has joined)."""
    if not dist.is_initialized() or dist.get_world_size() == 1 or dist.get_rank() == 0 \
            or os.environ.get(EVERY_RANK_READS_VARIABLE):
        return True
    return not strategies.shards_parameters(strategy)


def on_meta(model: nn.Module) -> bool:
    """Whether ``model`` was built without its weights (they come from rank 0 when the strategy shards it)."""
    return any(parameter.is_meta for parameter in model.parameters())


def placed(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device``; a model built on the meta device stays there until the strategy materializes it."""
    return model if on_meta(model) else model.to(device)
