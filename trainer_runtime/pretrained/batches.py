"""Tokenized examples in batches (each rank's indices: trainer_runtime.sampler): a batch padded to its longest
text, and the batches each process sums before an optimizer step."""

from __future__ import annotations

from typing import Any

import torch

from trainer_contract import exit_codes, global_batch
from trainer_runtime.failures import Refusal


def collate(items: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """One batch, padded to its longest text (not to MAX_SEQ_LENGTH: short texts cost short steps), with its
    attention mask; every other key (the index, the labels) stacked as it is."""
    longest = max(len(item["input_ids"]) for item in items)
    batch = {}
    for key, fill in (("input_ids", pad_id), ("token_type_ids", 0)):
        if key in items[0]:
            batch[key] = torch.tensor([item[key] + [fill] * (longest - len(item[key])) for item in items])
    batch["attention_mask"] = torch.tensor([[1] * len(item["input_ids"]) + [0] * (longest - len(item["input_ids"]))
                                            for item in items])
    for key in items[0]:
        if key not in batch:
            batch[key] = torch.tensor([item[key] for item in items])
    return batch


def accumulation_steps(config: Any, world_size: int) -> int:
    """The batches of BATCH_SIZE each process sums before a step (trainer_contract.global_batch); Refusal (78) where
    GLOBAL_BATCH_SIZE cannot be kept on ``world_size`` processes."""
    problem = global_batch.accumulation_problem(config, world_size)
    if problem:
        raise Refusal(exit_codes.BAD_CONFIG, [problem])
    return global_batch.accumulation_steps(config, world_size)
