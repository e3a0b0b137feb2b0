"""The trained question-answering model, gathered whole (under FSDP every rank takes part) and exported by rank 0
with trainer_runtime.pretrained.export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer_runtime.pretrained.export import save_pretrained


def full_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """Every rank calls it (under FSDP the parameters are gathered); rank 0 gets the whole model on the CPU."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def export_model(model: Any, state: dict[str, Any], tokenizer, destination: Path) -> None:
    """The trained ``model``'s configuration with its gathered weights ``state`` (no second copy of the model is
    built: under FSDP, rank 0 holds its shards and the whole weights already)."""
    save_pretrained(model, tokenizer, destination, state_dict=state)
