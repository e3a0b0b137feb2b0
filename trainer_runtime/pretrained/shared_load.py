"""The model read once where the strategy allows: under a strategy that shards the parameters (fsdp, hsdp) rank 0
reads the weights, and every other rank builds the model from its configuration on the meta device (no file read, no
memory taken) and gets its shard from rank 0 once the model is sharded (trainer_runtime/strategies/fsdp.py). A node
then holds one whole copy at most, not one per process (8 x 15 GB for a 7B model in bf16 on a node of 8 GPUs). Under
ddp and allreduce every rank trains a whole copy: each reads it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer_runtime import strategies

# Set (to anything but empty) in a process's environment: every rank reads the weights, as before this module; what
# python -m bench.transformers measures the shared load against.
EVERY_RANK_READS_VARIABLE = "INDEXED_TRAINER_EVERY_RANK_READS"


def read_once(strategy: str) -> bool:
    """Whether rank 0 alone reads the model's weights: several ranks, under a strategy that shards the parameters
    (the process group is up: the gang has joined)."""
    return (dist.is_initialized() and dist.get_world_size() > 1 and strategies.shards_parameters(strategy)
            and not os.environ.get(EVERY_RANK_READS_VARIABLE))


def reads_weights(strategy: str) -> bool:
    """Whether this process reads the model's weights: rank 0 always, another rank only under a strategy that keeps
    a whole copy on every rank."""
    return not read_once(strategy) or dist.get_rank() == 0


def said(strategy: str) -> str:
    """What a workload's start line says of the load: nothing, unless rank 0 alone reads the weights."""
    return ", the weights read by rank 0 alone (each other rank gets its shard)" if read_once(strategy) else ""


def on_meta(model: nn.Module) -> bool:
    """Whether ``model`` was built without its weights (they come from rank 0 when the strategy shards it)."""
    return any(parameter.is_meta for parameter in model.parameters())


def placed(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device``; a model built on the meta device stays there until the strategy materializes it."""
    return model if on_meta(model) else model.to(device)


def materialize(model: nn.Module, device: torch.device) -> None:
    """A model still on the meta device once its strategy is built (every rank built it so: its weights all come
    from the checkpoint the run resumes from) given memory on ``device`` (under fsdp, this rank's shards alone) and
    the values of its buffers, which no checkpoint holds (a rotary embedding's frequencies): its own initialisation
    (a Hugging Face model's ``initialize_weights``), whose weights the checkpoint then replaces."""
    initialize = getattr(model, "initialize_weights", None)
    if initialize is None:
        raise RuntimeError(f"{type(model).__name__} was built without its weights and has no initialize_weights: "
                           "it cannot be materialized for a checkpoint to fill")
    model.to_empty(device=device)
    with torch.no_grad():
        initialize()


def built_without_weights(auto_class: Any, model_dir: Path, options: dict[str, Any],
                          **configuration: Any) -> Any:
    """``auto_class.from_pretrained(model_dir, **options, **configuration)``'s model as it would be before its weights
    are read: its configuration (with ``configuration``'s changes: a classifier's labels) and dtype as from_pretrained
    takes them, its generation settings and evaluation mode, every tensor on the meta device."""
    from transformers import AutoConfig, GenerationConfig

    building = {key: value for key, value in options.items() if key != "use_safetensors"}  # no file is read
    with torch.device("meta"):
        model = auto_class.from_config(AutoConfig.from_pretrained(model_dir, **configuration), **building)
    if (model_dir / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(model_dir)
    return model.eval()
