"""Tokenized examples in batches: each rank its own equal share, padded per batch, in an order that a resumed run
can pick up at any batch."""

from __future__ import annotations

import math
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


class RankBatches:
    """Batches of feature indices for one rank: every rank gets the same number of batches (the shortest share
    is padded by repeating from the start, as DistributedSampler does), shuffled per epoch from ``seed`` when
    ``shuffle``. ``consumed`` batches of epoch ``epoch`` are skipped on the first pass after a resume. Together the
    ranks' batches number ``b`` are the order's b-th block of ``batch_size x world_size`` indices (the ranks take
    turns within it): with that product fixed (GLOBAL_BATCH_SIZE), every step takes the same examples, and an
    epoch has as many steps, on any number of ranks; only the last step's repeats differ."""

    def __init__(self, size: int, batch_size: int, rank: int, world_size: int, seed: int, shuffle: bool):
        self.size, self.batch_size, self.rank, self.world_size = size, batch_size, rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.epoch, self.consumed = 0, 0
        self.resume_at: tuple[int, int] | None = None  # (epoch, batches) from a checkpoint

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def per_rank(self) -> int:
        return math.ceil(self.size / self.world_size)

    def __len__(self) -> int:
        return math.ceil(self.per_rank / self.batch_size)

    def __iter__(self):
        if self.shuffle:
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(self.size))
        order += order[:self.per_rank * self.world_size - self.size]
        mine = order[self.rank::self.world_size]
        skip = 0
        if self.resume_at is not None and self.resume_at[0] == self.epoch:
            skip = self.resume_at[1]
        self.resume_at = None
        for batch in range(skip, len(self)):
            yield mine[batch * self.batch_size:(batch + 1) * self.batch_size]
