"""The trained model as users load it: ``save_pretrained`` of the model and its tokenizer, written into a
temporary directory beside the destination and renamed into place (an export is whole or absent; a rerun's
replaces the previous one only once it is complete)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer_contract.atomic import TEMP_PREFIX, fsync_directory


def full_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """Every rank calls it (under FSDP the parameters are gathered); rank 0 gets the whole model on the CPU."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def export_model(model_dir: Path, state: dict[str, Any], tokenizer, destination: Path) -> None:
    from transformers import AutoModelForQuestionAnswering

    model = AutoModelForQuestionAnswering.from_pretrained(model_dir)
    model.load_state_dict(state)
    temporary = destination.parent / f"{TEMP_PREFIX}{destination.name}"
    shutil.rmtree(temporary, ignore_errors=True)
    model.save_pretrained(temporary)
    tokenizer.save_pretrained(temporary)
    previous = destination.parent / f"{TEMP_PREFIX}{destination.name}.previous"
    if destination.exists():
        destination.rename(previous)
    temporary.rename(destination)
    shutil.rmtree(previous, ignore_errors=True)
    fsync_directory(destination.parent)
