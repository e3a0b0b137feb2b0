"""The features in batches, each rank its own share, and a training order that resumes exactly: the loader tells
Lightning where the epoch stands (its ``state_dict``, saved in every checkpoint), so that a run resumed mid-epoch
goes on with the next batch of the same order instead of starting the epoch's data again."""

from __future__ import annotations

import functools
from typing import Any

from torch.utils.data import DataLoader, Dataset

from trainer_runtime.pretrained.batches import collate
from trainer_runtime.sampler import RankBatches
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
