"""The features in batches, each rank its own share, and a training order that resumes exactly: the loader tells
Lightning where the epoch stands (its ``state_dict``, saved in every checkpoint), so that a run resumed mid-epoch
goes on with the next batch of the same order instead of starting the epoch's data again."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from worker.qa.features import Features


class FeatureSet(Dataset):
    def __init__(self, features: Features, labelled: bool):
        self.features, self.labelled = features, labelled

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item: dict[str, Any] = {"index": index, "input_ids": self.features.input_ids[index]}
        if self.features.token_type_ids is not None:
            item["token_type_ids"] = self.features.token_type_ids[index]
        if self.labelled:
            item["start_positions"], item["end_positions"] = self.features.starts[index], self.features.ends[index]
        return item


def collate(items: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """One batch, padded to its longest window (not to MAX_SEQ_LENGTH: short questions cost short steps)."""
    longest = max(len(item["input_ids"]) for item in items)
    batch = {"index": torch.tensor([item["index"] for item in items])}
    for key, fill in (("input_ids", pad_id), ("token_type_ids", 0)):
        if key in items[0]:
            batch[key] = torch.tensor([item[key] + [fill] * (longest - len(item[key])) for item in items])
    batch["attention_mask"] = torch.tensor([[1] * len(item["input_ids"]) + [0] * (longest - len(item["input_ids"]))
                                            for item in items])
    for key in ("start_positions", "end_positions"):
        if key in items[0]:
            batch[key] = torch.tensor([item[key] for item in items])
    return batch


class RankBatches:
    """Batches of feature indices for one rank: every rank gets the same number of batches (the shortest share
    is padded by repeating from the start, as DistributedSampler does), shuffled per epoch from ``seed`` when
    ``shuffle``. ``consumed`` batches of epoch ``epoch`` are skipped on the first pass after a resume."""

    def __init__(self, size: int, batch_size: int, rank: int, world_size: int, seed: int, shuffle: bool):
        self.size, self.batch_size, self.rank, self.world_size = size, batch_size, rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.epoch, self.consumed, self.resume_at = 0, 0, None  # resume_at: (epoch, batches) from a checkpoint

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


class ResumableLoader(DataLoader):
    """A DataLoader over RankBatches whose position Lightning saves and restores with each checkpoint. The module
    sets ``batches.consumed`` as each step runs (Lightning fetches a batch ahead, so the loader cannot count)."""

    def __init__(self, dataset: FeatureSet, batches: RankBatches, pad_id: int):
        super().__init__(dataset, batch_sampler=batches, collate_fn=functools.partial(collate, pad_id=pad_id))
        self.batches = batches

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.batches.epoch, "consumed": self.batches.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        # Lightning may start the resumed epoch's iterator before on_train_epoch_start sets the epoch
        if state["consumed"] >= len(self.batches):  # taken at the epoch's end: the next one starts afresh
            self.batches.epoch, self.batches.resume_at = state["epoch"] + 1, None
        else:
            self.batches.epoch, self.batches.resume_at = state["epoch"], (state["epoch"], state["consumed"])
